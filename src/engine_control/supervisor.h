// Engine supervision: the front launches `ajet-engine serve` with the synced config on a private
// Unix socket, waits for its ready line ("ajet-engine: ready on ADDRESS") and connects the
// rpc::Client, moves the registry BOOTING → ROLLING. If the engine dies it marks the status, logs
// it in verbose logs and restarts it from latest_checkpoint_dir(); stop() terminates it (SIGTERM,
// grace, SIGKILL). With engine_ranks N > 1 it launches N local data-parallel ranks (one c10d group
// on loopback, each with threads / N and a socket of its own) and treats them as one engine: ready
// when all are, and when one dies all are restarted together from the checkpoint (the group cannot
// continue without it). With synced code (sync_train_code) the tree is built first (cmake, only the
// ajet-engine target) and its binary runs; a failed build keeps the previous engine and says why in
// engine_status_detail.
//
// Threads: one supervisor thread forks every child (engines, builds), so PR_SET_PDEATHSIG — which
// follows the forking *thread* — kills them if the front dies; it also reads their output and
// notices their exit (pidfd). start()/stop() may be called from any thread except an HTTP I/O
// thread (stop waits for the engine to exit). It never holds the registry's lock while waiting on a
// process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "config/config.h"
#include "rpc/client.h"

namespace ajet {
class Subprocess;
}  // namespace ajet

namespace ajet::episodes {
class Registry;
class VerboseLog;
}  // namespace ajet::episodes

namespace ajet::engine_control {

class RemoteGroup;

struct SupervisorOptions {
  std::filesystem::path default_engine;  // the ajet-engine next to ajet-swarm
  std::chrono::milliseconds boot_timeout{600'000};
  std::chrono::milliseconds stop_grace{10'000};
  int max_restart_failures = 3;  // consecutive failed restarts before giving up (→ OFFLINE)
  int build_jobs = 2;
  // Data-parallel engine ranks started on this machine (ajet-swarm start --engine-ranks). Rank 0
  // also serves inference; every rank trains its part of each batch (batch_runner.h).
  int engine_ranks = 1;
  // Engine replicas on other hosts (ajet-swarm start --engine-at, remote_group.h): not empty, the
  // front starts no engine process; it forms these `ajet-engine serve --elastic` engines into one
  // group when start_engine is called, routes calls to them and re-forms the group as they die
  // and join. engine_ranks is then ignored.
  std::vector<std::string> remote_engines;
  // Disaggregated training (ajet-swarm start --trainer-at): not empty, these engines are the
  // trainer ranks (the group remote_engines would form, trained on and never routed to), and the
  // remote_engines are inference replicas that train nothing: after every step the trainers' rank
  // 0 pushes its weights to them (RemoteGroup::publish), and a replica that connects gets them at
  // once. Needs remote_engines.
  std::vector<std::string> remote_trainers;
  std::string engine_token;  // their shared secret
  std::chrono::milliseconds group_timeout{120'000};
  // With several listed engines, how long the first forming waits for all of them once one
  // answered (those late join at a later step boundary).
  std::chrono::milliseconds gather_grace{20'000};
};

struct EngineLaunch {
  config::Config config;
  std::filesystem::path config_file;  // the synced YAML written to disk (passed to the engine)
  std::filesystem::path code_root;    // synced source tree to build first; empty: none
  std::filesystem::path
      build_dir;                  // where that tree is built (next to it, never inside the install)
  std::filesystem::path run_dir;  // engine.log and build logs go here
};

class EngineSupervisor {
 public:
  EngineSupervisor(SupervisorOptions options, episodes::Registry& registry,
                   episodes::VerboseLog& verbose);
  ~EngineSupervisor();  // stops the engine and joins the thread
  EngineSupervisor(const EngineSupervisor&) = delete;
  EngineSupervisor& operator=(const EngineSupervisor&) = delete;

  // Launches the engine in the background; the registry must be BOOTING (the caller called
  // start_booting). Returns the engine's pid, or 0 when a build of synced code runs first. Throws
  // Error(kFailedPrecondition) when an engine is already supervised, kIo when it cannot be spawned.
  int64_t start(EngineLaunch launch);
  // Terminates the engine (and a running build) and waits until it is gone. Idempotent. Does not
  // change the registry (the caller calls Registry::stop).
  void stop();

  // The connection to the ready engine (null while booting, restarting or stopped); rank 0's when
  // there are several ranks.
  std::shared_ptr<rpc::Client> client() const;
  // Every rank's connection, rank order (empty while booting, restarting or stopped).
  std::vector<std::shared_ptr<rpc::Client>> rank_clients() const;

  // Remote replicas (options.remote_engines, or added later): see remote_group.h. remote() is
  // false when the front starts its own engine processes; the methods below then throw
  // kFailedPrecondition, except train_ranks, which answers rank_clients().
  bool remote() const { return remote_ != nullptr; }
  bool disaggregated() const { return replicas_ != nullptr; }
  std::vector<std::shared_ptr<rpc::Client>> train_ranks(bool after_failure);
  int64_t group_version() const;
  // A step was trained. Disaggregated: its weights are pushed to the inference replicas before
  // this returns.
  void note_step(int64_t policy_version, const std::string& weights_checksum);
  // Held by the batch runner while it trains a step (and pushes it), so that a push to a replica
  // that just connected never waits behind a step on the trainer.
  std::unique_lock<std::mutex> hold_trainer();
  // `trainer`: a trainer rank (disaggregated fronts only); otherwise an engine that serves (and,
  // colocated, trains).
  void add_engine(const std::string& address, bool trainer = false);
  void remove_engine(const std::string& address);
  Json engines_json() const;
  // Runs on the supervisor thread each time a started (or restarted) local engine answered its
  // status, before the front is told it is ready (so before any call reaches it). A throw is
  // logged, the engine still serves. It returns true when the engine now serves trained state its
  // policy version does not count (named adapters from their own checkpoints): the batches after
  // that version are then not rolled back and trained again. Set before start().
  void set_before_ready(std::function<bool(rpc::Client& engine)> hook);
  // The newest trainer checkpoint (save_checkpoint's reply); the next (re)start passes it as
  // `--resume DIR` so the engine continues from those weights, optimizer and step. Empty: none, the
  // engine loads ajet.model.path. start() keeps it; clear it with an empty path for a fresh run.
  void set_latest_checkpoint(std::filesystem::path dir);
  std::filesystem::path latest_checkpoint_dir() const;
  // {"pid", "phase", "binary", "socket", "restarts", "build"} for logs and tests.
  Json status_json() const;
  int64_t pid() const;
  bool running() const;  // an engine (or its build) is supervised

 private:
  enum class Phase { kIdle, kBuilding, kBooting, kReady, kStopping };
  struct Session;

  struct RankGroup;   // the engine processes of one (re)start
  struct BootResult;  // how waiting for them to accept connections ended

  void run();
  // The supervisor thread's work for one start(): (re)starts the engine until stopped or given up.
  void supervise(EngineLaunch launch);
  // The same for remote replicas: forms their group, then keeps watch until stopped.
  void supervise_remote();
  // Disaggregated: pushes the trainers' weights to the replicas; whether any replica serves them.
  bool publish_weights(const std::string& why);  // tries twice
  bool publish_once(const std::string& why);
  // The phases of supervise(), in order. A nullopt / false / -1 answer ends the supervision.
  std::optional<std::filesystem::path> choose_binary(const EngineLaunch& launch, Session& session);
  std::optional<RankGroup> spawn_ranks(const std::filesystem::path& binary,
                                       const EngineLaunch& launch, Session& session);
  BootResult wait_for_ready(RankGroup& group, Session& session);
  void announce_ready(RankGroup& group, const std::filesystem::path& binary);
  int watch(RankGroup& group);  // the rank that exited, or -1 when stopped
  void retire_connections(RankGroup& group);
  void shut_down(RankGroup& group);  // on stop: kStopping, then every rank terminated
  std::string end_group(RankGroup& group, int exited_rank, bool timed_out);  // why it ended
  bool restart_or_give_up(const EngineLaunch& launch, const Session& session, RankGroup& group,
                          const std::string& why, bool ever_ready, int failures);
  void give_up(const std::string& detail);  // verbose log, registry → OFFLINE
  std::filesystem::path build_engine(const EngineLaunch& launch, Session& session);
  std::vector<std::string> engine_command(const std::filesystem::path& binary,
                                          const EngineLaunch& launch, int rank,
                                          int master_port) const;
  std::filesystem::path rank_socket(int rank) const;
  bool stop_requested() const;
  void set_phase(Phase phase);
  void note_line(Session& session, int rank, const std::string& line);
  std::string tail_text(const Session& session, size_t lines) const;
  bool sleep_unless_stopped(std::chrono::milliseconds d);

  SupervisorOptions options_;
  episodes::Registry& registry_;
  episodes::VerboseLog& verbose_;
  std::filesystem::path socket_dir_;  // private 0700 directory for the engine socket
  int owner_fd_ = -1;                 // its owner file, flock-ed while this front runs
  std::filesystem::path socket_path_;

  std::mutex control_mu_;  // serialises start() and stop()
  mutable std::mutex mu_;
  std::function<bool(rpc::Client&)> before_ready_;  // under mu_
  std::condition_variable cv_;
  bool quit_ = false;
  bool stop_ = false;
  std::optional<EngineLaunch> pending_;
  std::optional<std::promise<int64_t>> started_;  // resolved with the pid (or 0 when building)
  Phase phase_ = Phase::kIdle;
  int64_t pid_ = 0;
  int64_t restarts_ = 0;
  std::string binary_;
  std::string build_note_;
  std::filesystem::path last_good_binary_;
  std::filesystem::path checkpoint_dir_;
  std::shared_ptr<rpc::Client> client_;
  std::vector<std::shared_ptr<rpc::Client>> rank_clients_;  // all ranks (client_ is rank 0's)
  std::vector<int64_t> rank_pids_;
  std::vector<std::shared_ptr<rpc::Client>> retired_clients_;  // destroyed on this thread only
  std::unique_ptr<RemoteGroup> remote_;    // the engines that train (colocated: and serve)
  std::unique_ptr<RemoteGroup> replicas_;  // disaggregated: the inference replicas
  std::mutex trainer_mu_;                  // hold_trainer()
  std::thread thread_;
};

}  // namespace ajet::engine_control
