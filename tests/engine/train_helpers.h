// What the engine's trainer tests share (train_test.cc, adapters_test.cc): a micro model made once
// per test process, configs, a small GRPO batch, method calls and greedy probes.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine_process.h"

namespace ajet::engine::testing {

// The `micro` preset over the byte tokenizer, made once per test process by `ajet-engine model
// init`.
inline const fs::path& micro_model_dir() {
  static const fs::path dir = [] {
    const fs::path tok = process_dir() / "micro_tok", out = process_dir() / "micro";
    model::testing::write_byte_tokenizer(tok);
    model::testing::write_text(tok / "tokenizer_config.json",
                               R"({"eos_token": "<|im_end|>", "add_bos_token": false})");
    auto r =
        run_command(kEngineBinary + " model init --preset micro --seed 5 --threads 1 --tokenizer " +
                    quote(tok) + " --out " + quote(out));
    if (r.exit_code != 0) throw std::runtime_error("model init failed: " + r.out);
    return out;
  }();
  return dir;
}

// A config with a learning rate large enough that one step visibly changes greedy logprobs;
// `extra` is more of the ajet section.
inline fs::path write_conf(const std::string& name, const std::string& backbone,
                           const fs::path& checkpoints, const std::string& lr = "0.01",
                           const std::string& extra = "") {
  const fs::path conf = process_dir() / (name + ".yaml");
  model::testing::write_text(conf,
                             "ajet:\n"
                             "  backbone: " +
                                 backbone +
                                 "\n"
                                 "  trainer_common:\n"
                                 "    use_kl_loss: false\n"
                                 "    checkpoint_base_dir: " +
                                 checkpoints.string() +
                                 "\n"
                                 "    optim:\n"
                                 "      lr: " +
                                 lr +
                                 "\n"
                                 "  engine:\n"
                                 "    seed: 3\n" +
                                 extra);
  return conf;
}

// write_conf's torch settings at lr 0.05 with LoRA rank 4, alpha 8 on every linear layer.
inline fs::path write_lora_conf(const std::string& name, const fs::path& checkpoints) {
  return write_conf(name, "torch", checkpoints, "0.05",
                    "  lora:\n"
                    "    lora_rank: 4\n"
                    "    lora_alpha: 8\n");
}

// Four samples in two task groups with different rewards: prompt tokens (mask 0), then a response.
inline rpc::TrainBatch make_batch(int salt) {
  rpc::TrainBatch b;
  b.sample_offsets.push_back(0);
  for (int s = 0; s < 4; ++s) {
    const std::vector<int32_t> prompt = prompt_of(6 + s, salt + s);
    const std::vector<int32_t> response = prompt_of(5 + s % 2, salt * 7 + s + 1);
    for (int32_t id : prompt) {
      b.token_ids.push_back(id);
      b.loss_mask.push_back(0);
      b.logprobs.push_back(0.0f);
    }
    for (int32_t id : response) {
      b.token_ids.push_back(id);
      b.loss_mask.push_back(1);
      b.logprobs.push_back(-1.5f);
    }
    b.sample_offsets.push_back(static_cast<int64_t>(b.token_ids.size()));
    b.rewards.push_back(s == 0 ? 1.0 : s == 1 ? 0.0 : s == 2 ? 0.5 : 2.0);
    b.task_ids.push_back(s < 2 ? "task-a" : "task-b");
    b.episode_uuids.push_back("episode-" + std::to_string(salt) + "-" + std::to_string(s));
    b.weights.push_back(1.0);
  }
  return b;
}

inline nlohmann::json call(rpc::Client& client, rpc::Frame request) {
  return client.call(std::move(request), std::chrono::seconds(120)).done.body;
}

inline rpc::Frame method_frame(std::string_view method, nlohmann::json body) {
  rpc::Frame f;
  f.method = std::string(method);
  f.body = std::move(body);
  return f;
}

inline std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Greedy tokens of a fixed prompt with their raw logprobs and versions.
inline GenerateOutcome probe(rpc::Client& client) {
  return generate(client, greedy(prompt_of(10, 42), 6));
}

inline void expect_versions(const GenerateOutcome& o, int64_t version) {
  ASSERT_TRUE(o.done) << (o.error ? o.error->what() : "no done frame");
  for (const auto& e : o.events) {
    for (int64_t v : e.policy_versions) EXPECT_EQ(v, version);
  }
}

inline bool logprobs_differ(const GenerateOutcome& a, const GenerateOutcome& b) {
  const auto x = a.logprobs(0, true), y = b.logprobs(0, true);
  if (a.ids() != b.ids() || x.size() != y.size()) return true;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::abs(x[i] - y[i]) > 1e-4) return true;
  }
  return false;
}

}  // namespace ajet::engine::testing
