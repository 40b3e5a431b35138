// Helpers for the tests of the torch-free training data, also used by tests/train: random
// GRPO-shaped batches (deterministic for a given seed), a fake environment for torchrun variables,
// and the message of an expected ajet::Error. No libtorch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "train_data/batch.h"
#include "train_data/dist_options.h"

namespace ajet::train_data::testing {

// `groups` tasks x `per_group` episodes: every episode of a task shares a prompt of `prompt`
// tokens, then a completion of 1..`completion` tokens (mask 1), sometimes followed by environment
// tokens and a second completion. Rewards in {0, 0.5, 1}; behaviour logprobs in (-3, -0.05).
inline Batch random_batch(int groups, int per_group, int prompt, int completion, int64_t vocab,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)); };
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng() % 1000003) / 1000003.0;
  };
  Batch b;
  for (int g = 0; g < groups; ++g) {
    std::vector<int32_t> shared(static_cast<size_t>(prompt));
    for (auto& t : shared) t = token();
    for (int e = 0; e < per_group; ++e) {
      TrainSample s;
      s.episode_uuid = "ep-" + std::to_string(g) + "-" + std::to_string(e);
      s.task_id = "task-" + std::to_string(g);
      s.reward = static_cast<double>(rng() % 3) * 0.5;
      s.token_ids = shared;
      s.loss_mask.assign(shared.size(), 0);
      const int turns = 1 + static_cast<int>(rng() % 2);
      for (int turn = 0; turn < turns; ++turn) {
        if (turn > 0) {
          for (int k = 0; k < 2; ++k) {  // an observation
            s.token_ids.push_back(token());
            s.loss_mask.push_back(0);
          }
        }
        const int len = 1 + static_cast<int>(rng() % static_cast<uint64_t>(completion));
        for (int k = 0; k < len; ++k) {
          s.token_ids.push_back(token());
          s.loss_mask.push_back(1);
        }
      }
      for (uint8_t m : s.loss_mask)
        s.logprobs.push_back(m ? static_cast<float>(-uniform(0.05, 3.0)) : 0.0f);
      b.samples.push_back(std::move(s));
    }
  }
  return b;
}

// An environment of exactly `vars`, for resolve_placement.
inline EnvLookup fake_env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// The message of the ajet::Error `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace ajet::train_data::testing
