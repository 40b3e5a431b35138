// Classic mode: `ajet --conf x.yaml`. Swarm mode with the clients started for you: the launcher
// starts `ajet-swarm start` as a child, syncs the config and starts the engine through the command
// API (as any swarm client would), reads the tasks, runs the workflow for train_batch_size ×
// num_repeat episodes per step with max_env_worker in flight, waits for each step's training,
// validates every test_freq steps, and writes metrics.jsonl and reward_curve.html into the
// experiment directory. It never touches tensors or the engine directly: only HTTP to the front.
//
// The experiment directory belongs to one run at a time (experiment_dir.h: a lock and a pid file).
// A new run stops leftovers of an earlier one (a front or engine still running there) and moves the
// earlier run's files into earlier/<time>/; --resume instead continues the earlier run from its
// newest checkpoint (weights, optimizer, step; the task order is replayed to the same cursor) and
// appends to its metrics.jsonl after a {"kind":"resume"} line; a validation the earlier run owed
// for the step it continues after (stopped between the step and its validation) is made up first.
// Checkpoints go under the experiment directory.
//
// With a swarm URL (--swarm-url) the launcher starts no front: it drives the given one through the
// command API (an engine running there is stopped first, the config synced, the engine started and,
// at the end or on a stop request, stopped again), runs the episodes here and writes metrics.jsonl
// and the rest into the local experiment directory. The front keeps its engine's files (engine.log,
// checkpoints, TensorBoard) in its own directory: the synced config names `experiment_dir: auto`
// and the relative checkpoint_base_dir. It never signals a process it did not start.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/json.h"
#include "config/config.h"

namespace ajet::classic {

struct LaunchOptions {
  std::filesystem::path conf;          // --conf
  std::string backbone;                // --backbone ("" = the config's)
  std::vector<std::string> overrides;  // --set ajet.key=value (YAML value), in order
  std::filesystem::path exp_base_dir = "saved_experiments";  // --exp-dir
  std::filesystem::path swarm_binary;                        // ajet-swarm
  std::vector<std::string> swarm_flags;                      // extra flags for `ajet-swarm start`
  bool interactive = false;  // redraw the progress bar in place (a terminal)
  bool resume = false;       // --resume: continue the run in the experiment directory
  // --swarm-url: an existing front to drive instead of starting one ("" = start `ajet-swarm` as a
  // child). Its admin token comes from $AJET_ADMIN_TOKEN.
  std::string swarm_url;
  // --force-restart (with swarm_url): stop the front's engine even when it trains another
  // experiment. Without it such a run refuses to start, so it cannot end someone else's training.
  bool force_restart = false;
};

struct PreparedConfig {
  config::Config config;
  // What is synced to the front: every key, resolved (a remote front: experiment_dir auto and the
  // configured checkpoint_base_dir, so the front's files stay in its own directory).
  std::string yaml;
  std::vector<std::string> warnings;  // unknown keys, by name
  std::filesystem::path config_dir;   // relative task files and workflow commands start here
  std::filesystem::path exp_dir;      // absolute
  // Dynamic sampling (swarm_mode_sample_collection_method
  // rollout_until_finish_enough_non_dummy_tasks, every backbone): the launcher samples task batches
  // until train_batch_size groups have unequal rewards (at most algorithm.max_num_gen_batches) and
  // then agrees to sync weights, so the front's trigger is
  // rollout_until_any_client_agree_sync_weight in `yaml`.
  bool dynamic_sampling = false;
};

// Loads and checks the config for classic mode: the --backbone override, the model directory (here,
// unless the front is remote: then the front checks it), a task source that yields tasks, auto
// names → an absolute experiment directory. Throws
// Error(kInvalidArgument / kNotFound) naming the flag, key or file that is wrong.
PreparedConfig prepare_config(const LaunchOptions& options);

struct RunResult {
  int64_t steps_done = 0;
  bool stopped = false;           // a stop request (SIGINT) ended the run early
  int64_t resumed_from_step = 0;  // --resume: the step the run continued after (0: a new run)
  std::filesystem::path exp_dir;
  std::filesystem::path final_checkpoint;  // the newest checkpoint at the end ("" when none)
  std::vector<Json> records;               // the lines written to metrics.jsonl
};

// Runs the whole job. `stop` is polled (set it from a signal handler); output lines go to `out`.
RunResult run_classic(const LaunchOptions& options, const std::atomic<bool>& stop,
                      const std::function<void(const std::string&)>& out);

}  // namespace ajet::classic
