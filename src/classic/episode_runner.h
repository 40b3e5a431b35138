// Runs a list of episodes through the swarm with a fixed number of worker threads (max_env_worker),
// like a pool of swarm clients: claim → workflow → end_episode with the reward. An episode whose
// end was refused or dropped is run again (a GRPO group must be complete for the batch trigger).
// Stops claiming when `stop` says so; a front that goes OFFLINE ends the run with its reason.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "classic/workflow.h"
#include "client/swarm_client.h"
#include "tasks/task.h"

namespace ajet::classic {

struct EpisodeJob {
  const tasks::Task* task = nullptr;
  std::string episode_type = "train";
  Json sampling = Json::object();
  uint64_t env_seed = 0;
  int64_t sample_index = 0;  // which of the task's repeats / samples this is
};

struct EpisodeResult {
  EpisodeJob job;
  EpisodeReport report;
  std::string episode_uuid;  // of the attempt that ended (empty when none did)
  bool ended = false;        // end_episode stored it
  int attempts = 0;
  std::string error;  // why it never ended (empty when ended)
};

struct RunnerOptions {
  int64_t workers = 1;
  double discard_episode_timeout = 600;
  int max_attempts = 3;
  // The last lines of a front this run started that has exited, "" while it runs (or when the
  // front is not this run's child): a claim that cannot reach the front gives up on it.
  std::function<std::string()> front_exit;
};

class EpisodeRunner {
 public:
  EpisodeRunner(client::SwarmClient& client, const Workflow& workflow, RunnerOptions options,
                const std::atomic<bool>& stop);

  // Runs every job; `on_done` is called (serialised) after each one. Returns results in job order.
  // Throws Error(kUnavailable) when the engine went OFFLINE (its detail in the message).
  std::vector<EpisodeResult> run(const std::vector<EpisodeJob>& jobs,
                                 const std::function<void(const EpisodeResult&)>& on_done = {});

 private:
  EpisodeResult run_one(const EpisodeJob& job);

  client::SwarmClient& client_;
  const Workflow& workflow_;
  RunnerOptions options_;
  const std::atomic<bool>& stop_;
  std::atomic<bool> fatal_{false};
  std::string fatal_message_;
};

}  // namespace ajet::classic
