// Helpers for the example agents' end-to-end tests: a real `ajet-swarm start` with the real
// `ajet-engine` (debug backbone) on a micro model copied into the test's own directory, the example
// run as a child process, and the check that every episode it reports is stored with its reward.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client_e2e/client_e2e_util.h"
#include "common/fs.h"
#include "common/json.h"

namespace ajet::examples_test {

using namespace ajet::e2e;
using clients_test::npm_node_modules;

// A server with a started engine. The calc task's prompt (system prompt + tool block) is ~600 ids
// with the fixture's 400-id tokenizer, longer than the micro preset's 512 positions: the test's
// copy of the model gets 2048 (the Qwen2 architecture has no learned positions, RoPE only).
class ExampleSwarm {
 public:
  // engine: "ajet-engine" (real, random micro model) or "ajet-echo-engine" (test double).
  explicit ExampleSwarm(const std::string& engine = "ajet-engine") {
    for (const char* b : {"ajet", "ajet-swarm", engine.c_str()}) {
      if (!fs::exists(bin(b))) {
        ADD_FAILURE() << bin(b) << " is not built: build the " << b << " target";
        return;
      }
    }
    const bool real = engine == "ajet-engine";
    Fixture f = fixture(real);
    if (::testing::Test::HasFailure()) return;
    const fs::path model = real ? model_with_positions(f.model, dir_ / "model", 2048) : f.tokenizer;
    swarm_ =
        std::make_unique<SwarmProcess>(SwarmProcess::Options{dir_ / "server", bin(engine), "", {}});
    if (::testing::Test::HasFailure()) return;
    api_ = std::make_unique<Api>(swarm_->url());
    std::string yaml = config_yaml(model);
    replace(yaml, "max_prompt_length: 256", "max_prompt_length: 1536");
    replace(yaml, "max_model_len: 512", "max_model_len: 2048");
    replace(yaml, "train_batch_size: 2", "train_batch_size: 100");  // no batch boundary mid-test
    if (!real)
      replace(yaml, "max_response_length_in_one_turn: 48", "max_response_length_in_one_turn: 256");
    api_->boot(yaml);
  }

  const std::string& url() const { return swarm_->url(); }
  Api& api() { return *api_; }
  const ScratchDir& dir() const { return dir_; }
  bool ok() const { return api_ != nullptr && !::testing::Test::HasFailure(); }

 private:
  static void replace(std::string& text, const std::string& from, const std::string& to) {
    size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << "config_yaml() no longer has '" << from << "'";
    text.replace(at, from.size(), to);
  }

  ScratchDir dir_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

// The per-episode JSON lines an example printed (objects with an episode_uuid).
inline std::vector<Json> episode_lines(const std::string& output) {
  std::vector<Json> out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("episode_uuid")) out.push_back(std::move(j));
  }
  return out;
}

// Every reported episode was ended (not aborted) and the store holds it as finished, under its
// task, with the reward the example reported and at least one model call.
inline void expect_stored_as_reported(Api& api, const std::vector<Json>& episodes) {
  std::set<std::string> uuids;
  for (const Json& e : episodes) {
    SCOPED_TRACE(e.dump());
    ASSERT_FALSE(e.contains("aborted")) << "the example aborted an episode";
    ASSERT_TRUE(e["reward"].is_number());
    const std::string uuid = e["episode_uuid"].get<std::string>();
    EXPECT_TRUE(uuids.insert(uuid).second) << "episode reported twice";
    auto r = api.get("/episodes/" + uuid);
    ASSERT_EQ(r.status, 200) << r.body;
    Json doc = r.json();
    EXPECT_EQ(doc["status"], "finished");
    EXPECT_EQ(doc["episode_type"], "train");
    EXPECT_EQ(doc["task_id"], e["task_id"]);
    ASSERT_TRUE(doc["reward"].is_number()) << "no reward recorded";
    EXPECT_DOUBLE_EQ(doc["reward"].get<double>(), e["reward"].get<double>());
    EXPECT_GE(doc["calls"].size(), 1u) << "the episode made no model call";
  }
  Json pool = api.get("/get_current_batch_rollout_pool_information").json();
  EXPECT_EQ(pool["completed_episodes"], episodes.size()) << pool.dump();
  EXPECT_EQ(pool["claimed_episodes"], 0) << "an episode was left claimed: " << pool.dump();
}

// Copies examples/<name>/<files> to <dir>/examples/<name>/, so that `node` resolves npm packages
// from <dir>/examples/node_modules (a link to the cache of scripts/npm-deps.sh).
inline fs::path stage_js_example(const fs::path& dir, const fs::path& node_modules,
                                 const std::string& name) {
  const fs::path root = dir / "examples";
  if (!fs::exists(root / "node_modules")) {
    fs::create_directories(root);
    fs::create_directory_symlink(node_modules, root / "node_modules");
  }
  const fs::path app = root / name;
  fs::create_directories(app);
  for (const auto& entry : fs::directory_iterator(source("examples/" + name))) {
    if (entry.is_regular_file()) fs::copy_file(entry.path(), app / entry.path().filename());
  }
  return app;
}

}  // namespace ajet::examples_test
