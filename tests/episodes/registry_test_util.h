// Shared helpers for the registry tests: a manual clock and short-hands for the commands.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/error.h"
#include "episodes/registry.h"
#include "store/store.h"

namespace ajet::episodes::testing {

inline const std::string kTestSecret = "test-secret-0123456789abcdef";

class RegistryHarness {
 public:
  explicit RegistryHarness(RegistryOptions options, store::Store* store = nullptr)
      : registry(std::move(options), EpisodeKeySigner(kTestSecret), store, [this] { return now; }) {
    registry.set_hooks(
        RegistryHooks{[this](const EpisodeClosed& c) { closed.push_back(c); }, nullptr});
  }

  // OFFLINE → BOOTING → ROLLING.
  void start() {
    registry.start_booting();
    registry.engine_ready();
  }

  ClaimResponse try_claim(const std::string& client, const std::string& type = "train",
                          double timeout = 240, const std::string& task = "") {
    ClaimRequest req;
    req.client_uuid = client;
    req.episode_type = type;
    req.discard_episode_timeout = timeout;
    if (!task.empty()) {
      ThrottlePolicy policy;
      policy.current_task_id = task;
      req.throttle_policy = policy;
    }
    return registry.claim_episode(req);
  }

  std::string claim(const std::string& client, const std::string& type = "train",
                    double timeout = 240, const std::string& task = "") {
    ClaimResponse r = try_claim(client, type, timeout, task);
    EXPECT_TRUE(r.success) << r.fail_cause;
    return r.episode_uuid;
  }

  static EndRequest end_request(const std::string& client, const std::string& uuid,
                                const std::string& task, double reward) {
    EndRequest req;
    req.client_uuid = client;
    req.episode_uuid = uuid;
    req.task_id = task;
    req.workflow_output.reward = reward;
    req.workflow_output.metadata = Json{{"task_id", task}};
    return req;
  }

  void end(const std::string& client, const std::string& uuid, const std::string& task,
           double reward) {
    registry.end_episode_wait(end_request(client, uuid, task, reward));
  }

  // end_episode's error (fails the test when it succeeds).
  CommandError end_error(const std::string& client, const std::string& uuid,
                         const std::string& task = "t", double reward = 1) {
    std::optional<CommandError> result;
    bool called = false;
    registry.end_episode(end_request(client, uuid, task, reward),
                         [&](std::optional<CommandError> e) {
                           called = true;
                           result = e;
                         });
    EXPECT_TRUE(called);
    EXPECT_TRUE(result.has_value()) << "end_episode succeeded";
    return result.value_or(CommandError{});
  }

  void abort(const std::string& client, const std::string& uuid) {
    registry.abort_episode(AbortRequest{client, uuid});
  }

  bool can_continue(const std::string& client, const std::string& uuid) {
    return registry.can_continue_episode(EpisodeRef{client, uuid});
  }

  double now = 1000.0;
  std::vector<EpisodeClosed> closed;
  Registry registry;
};

inline RegistryOptions small_options(Backbone backbone = Backbone::kTorch, int64_t batch = 2,
                                     int64_t repeat = 2, int64_t pool = 8) {
  RegistryOptions o;
  o.backbone = backbone;
  o.train_batch_size = batch;
  o.num_repeat = repeat;
  o.max_env_worker = pool;
  o.openai_base_url = "http://127.0.0.1:10086/v1";
  o.training_model_path = "/models/tiny";
  return o;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace ajet::episodes::testing
