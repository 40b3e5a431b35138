// Helpers for the client end-to-end tests, on top of tests/e2e/e2e_util.h (the real ajet-swarm on
// an ephemeral port, the tokenizer / micro-model fixture, polling with a deadline): the npm
// packages for the JS SDK tests, and a server booted with the echo engine or the real engine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "e2e/e2e_util.h"

namespace ajet::clients_test {

using namespace ajet::e2e;

// node_modules from scripts/npm-deps.sh; std::nullopt with the reason when node or npm is
// unavailable.
inline std::optional<fs::path> npm_node_modules(std::string* why) {
  if (run_capture("command -v node").status != 0) {
    *why = "node is not installed (scripts/setup.sh installs it)";
    return std::nullopt;
  }
  Captured r =
      run_capture("bash " + shell_quote(source("scripts/npm-deps.sh").string()) + " 2>/dev/null");
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  std::string last = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  if (r.status != 0 || !fs::is_directory(last)) {
    *why =
        "scripts/npm-deps.sh failed (exit status " + std::to_string(r.status) +
        "): npm or the registry is unavailable, so the official OpenAI JS SDK cannot be installed";
    return std::nullopt;
  }
  return fs::path(last);
}

// A scratch dir, `ajet-swarm start` with the given engine, booted with the tiny fixture's config.
class BootedSwarm {
 public:
  // engine: "ajet-echo-engine" (test double: echoes the last user message) or "ajet-engine".
  // train_batch_size: tasks per batch (the fixture's config says 2).
  explicit BootedSwarm(const std::string& engine = "ajet-echo-engine",
                       const std::string& extra_yaml = "", int train_batch_size = 2,
                       const std::string& admin_token = "") {
    const bool real = engine == "ajet-engine";
    if (!fs::exists(bin(engine))) {
      ADD_FAILURE() << engine << " is not built: build the " << engine << " target";
      return;
    }
    Fixture f = fixture(real);
    model_ = real ? f.model : f.tokenizer;
    if (real)
      model_ = model_with_positions(f.model, dir_ / "model", 2048);  // room for a tool-call turn
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin(engine), admin_token, {}});
    api_ = std::make_unique<Api>(swarm_->url());
    http::Headers admin;
    if (!admin_token.empty()) admin.add("Authorization", "Bearer " + admin_token);
    std::string yaml = config_yaml(model_, extra_yaml);
    yaml.replace(yaml.find("train_batch_size: 2"), 19,
                 "train_batch_size: " + std::to_string(train_batch_size));
    // The fixture tokenizer's 400 ids make tool prompts long; the echo engine takes any length.
    yaml.replace(yaml.find("max_prompt_length: 256"), 22, "max_prompt_length: 1536");
    yaml.replace(yaml.find("max_model_len: 512"), 18,
                 real ? "max_model_len: 2048" : "max_model_len: 4096");
    if (!real) {
      yaml.replace(yaml.find("max_response_length_in_one_turn: 48"), 35,
                   "max_response_length_in_one_turn: 256");
    }
    api_->boot(yaml, admin);
  }
  const std::string& url() const { return swarm_->url(); }
  Api& api() { return *api_; }
  SwarmProcess& process() { return *swarm_; }
  const fs::path& model() const { return model_; }
  const ScratchDir& dir() const { return dir_; }

 private:
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

// The admin token of every EchoSwarm: the tests read every id of the pool information with it (a
// caller without it sees only its own, docs/protocol.md).
inline const std::string kEchoAdminToken = "echo-swarm-admin-token";

// `ajet-swarm start` with the echo engine in `dir`, booted with the fixture config and this
// backbone, train_batch_size and num_repeat (torch: the echo engine "trains" each full batch and
// reports stats). Several of them run in one test (one server per model), each in its own
// directory; a participant of episode groups names its coordinator in `peer` (--peer).
class EchoSwarm {
 public:
  EchoSwarm(const fs::path& dir, const std::string& backbone = "debug", int batch = 2,
            int repeat = 2, const std::string& peer = "",
            std::vector<std::string> extra = {}) {  // more `ajet-swarm start` flags
    Fixture f = fixture(false);
    if (!peer.empty()) extra.insert(extra.end(), {"--peer", peer});
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir, bin("ajet-echo-engine"), kEchoAdminToken, std::move(extra)});
    api_ = std::make_unique<Api>(swarm_->url());
    std::string yaml = config_yaml(f.tokenizer);
    yaml.replace(yaml.find("backbone: debug"), 15, "backbone: " + backbone);
    yaml.replace(yaml.find("train_batch_size: 2"), 19,
                 "train_batch_size: " + std::to_string(batch));
    yaml.replace(yaml.find("num_repeat: 2"), 13, "num_repeat: " + std::to_string(repeat));
    api_->boot(yaml, admin());
  }
  static http::Headers admin() {
    return http::Headers{{"Authorization", "Bearer " + kEchoAdminToken}};
  }
  const std::string& url() const { return swarm_->url(); }
  Api& api() { return *api_; }
  Json pool() { return api_->get("/get_current_batch_rollout_pool_information", admin()).json(); }

 private:
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

}  // namespace ajet::clients_test
