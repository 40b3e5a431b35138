// The front session: the one front a classic run talks to, local (an `ajet-swarm start` child in
// the experiment directory) or remote (--swarm-url), and the engine this run owns there. It
// connects, syncs the config, starts the engine and stops it again; it never stops an engine
// another client started since (the front refuses, and the session says so and leaves it running).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "classic/launcher.h"
#include "classic/swarm_child.h"
#include "client/swarm_client.h"

namespace ajet::classic {

class FrontSession {
 public:
  FrontSession(const LaunchOptions& options, const PreparedConfig& prepared,
               std::function<void(const std::string&)> say);

  // Local: starts the front child (--resume or --fresh) and records its pid in `front_pid` of the
  // experiment lock. Remote: checks that the --swarm-url front answers.
  void connect(bool resume, const std::function<void(int pid)>& front_pid);

  struct Boot {
    bool resume = false;  // the engine continues the earlier run (false: the front had none of it)
    int64_t global_step = 0;  // the engine's global step once ROLLING
  };
  // Frees the remote front's engine (an earlier run of this experiment, or --force-restart), syncs
  // the config and starts the engine (from the newest checkpoint when resuming), waits until
  // ROLLING.
  Boot boot(bool resume);

  // Fails the run when the front's engine (status `s`) is no longer the one this run started.
  void check_engine_is_ours(const client::EngineStatus& s);
  // Stops this run's engine (the front saves a last checkpoint). Leaves another client's alone.
  void stop_engine(double max_wait);
  void stop_front();

  client::SwarmClient& client() { return *client_; }
  bool remote() const { return !options_.swarm_url.empty(); }
  const std::string& url() const { return url_; }
  bool engine_replaced() const { return engine_replaced_; }
  const std::string& front_run_dir() const { return front_run_dir_; }
  // The front's experiment directory for messages: "" when the front does not say (or answer).
  std::string experiment_dir_for_messages();
  // The last lines of a local front that exited ("" otherwise), for error messages.
  std::string exit_lines() const;

 private:
  void start_local(bool resume, const std::function<void(int)>& front_pid);
  void connect_remote();
  void free_remote_engine();
  bool is_this_experiment(const std::string& front_dir) const;
  bool remote_checkpoint_is_ours();
  void sync_config();

  const LaunchOptions& options_;
  const PreparedConfig& prepared_;
  std::function<void(const std::string&)> say_;
  std::unique_ptr<SwarmChild> child_;
  std::unique_ptr<client::SwarmClient> client_;
  std::string url_;
  // The engine this run started: start_engine answered (started), with its "engine_run" ("" from a
  // front that names none: then stop_engine stops whatever runs); replaced: another client stopped
  // it and started its own, which the end of this run leaves alone.
  bool engine_started_ = false;
  std::string engine_run_;
  bool engine_replaced_ = false;
  std::string front_run_dir_;  // --swarm-url: this run's experiment directory on the front
};

}  // namespace ajet::classic
