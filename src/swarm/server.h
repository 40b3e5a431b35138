// The swarm front as one object, as `ajet-swarm start` runs it: the SQLite store (recovered on
// start), the registry, the janitor, the engine supervisor, the batch loop and the HTTP server with
// every route of docs/protocol.md. A store that holds an earlier run is resumed only when asked
// (OldStoreRule::kResume): then the registry's finished and claimed episodes come back (their keys
// stay valid: the key secret is in the store) and, when the engine was running, the engine itself.
// kFresh moves such a store aside; kRefuse (the default) refuses to start and names both choices.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/records.h"
#include "swarm/server_context.h"

namespace ajet {
class StopSignals;
}
namespace ajet::http {
class HttpServer;
}
namespace ajet::store {
class Store;
}

namespace ajet::episodes {
class Registry;
class Janitor;
class TrackerMap;
class VerboseLog;
}  // namespace ajet::episodes

namespace ajet::engine_control {
class EngineSupervisor;
class BatchRunner;
}  // namespace ajet::engine_control

namespace ajet::openai {
class LatestCall;
}

namespace ajet::swarm {

class WorkPool;
class MetricsSink;
class CoordinatorAsker;

// What start() did that the operator should read: what was restored or moved aside, and every
// warning of the --conf it synced, one line each.
struct StartReport {
  std::vector<std::string> notes;
  std::vector<std::string> config_warnings;
};

// One line for a store's earlier run: "global step 3, engine was ENGINE.ROLLING, 2 finished
// episodes waiting for a batch, 1 claimed episode, config: backbone torch, model /m"; "" for a
// store with no run.
std::string describe_earlier_run(const store::RecoveredState& recovered);

// One line for the operator (ajet-swarm start prints it on stdout, prefixed "ajet-swarm: ").
using Say = std::function<void(const std::string& line)>;

class SwarmServer {
 public:
  // Opens (or creates) the store and recovers it (applying options.old_store to an earlier run),
  // builds every part, binds the port (port 0: an ephemeral one). Throws Error naming what failed
  // (a store held by another front, a busy port …; kInvalidArgument for an earlier run under
  // kRefuse). `say` gets what a stop does (null: the log).
  explicit SwarmServer(FrontOptions options, Say say = nullptr);
  ~SwarmServer();  // stop() and shut down in order
  SwarmServer(const SwarmServer&) = delete;
  SwarmServer& operator=(const SwarmServer&) = delete;

  uint16_t port() const;
  std::string url() const;  // "http://HOST:PORT"
  const FrontOptions& options() const { return options_; }

  // SIGINT/SIGTERM/SIGHUP → stop() (call before start()). A signal while the front is stopping
  // already (draining requests, saving the last checkpoint, stopping the engine) ends the process
  // at once with exit status 128 + the signal, saying what it did not save; the engine dies with it
  // (PR_SET_PDEATHSIG) and the store is as after a crash (`--resume` continues from the newest
  // checkpoint).
  void handle_signals();
  // Resumes from the store (restarting the engine if it was running), syncs --conf, then serves.
  StartReport start();
  // Blocks until the server was stopped, then shuts down: a step in flight finishes, the steps
  // trained since the last checkpoint are saved in one (said with its step and directory; or that
  // there is nothing to save), the engine is terminated (the store keeps its status, so the next
  // start resumes it from that checkpoint), queued store writes are committed.
  void wait();
  void stop();

 private:
  void shutdown(bool save_checkpoint);
  // wait()'s checkpoint of the steps trained since the last one (blocks on the engine).
  void save_trained_steps();
  void on_stop_signal(int signal, int nth);
  void say(const std::string& line) const;

  FrontOptions options_;
  std::unique_ptr<store::Store> store_;
  store::RecoveredState recovered_;
  std::unique_ptr<episodes::VerboseLog> verbose_;
  std::unique_ptr<openai::LatestCall> latest_;
  std::unique_ptr<episodes::TrackerMap> trackers_;
  std::unique_ptr<episodes::Registry> registry_;
  std::unique_ptr<MetricsSink> metrics_;  // the registry's hooks and /log_metrics write through it
  std::unique_ptr<WorkPool> pool_;
  std::unique_ptr<engine_control::EngineSupervisor> supervisor_;
  std::unique_ptr<SyncedTrain> synced_;
  std::unique_ptr<engine_control::BatchRunner> batches_;
  std::unique_ptr<ServerContext> ctx_;
  std::unique_ptr<CoordinatorAsker> asker_;  // before janitor_: the janitor's sweeps ask through it
  std::unique_ptr<episodes::Janitor> janitor_;
  std::unique_ptr<engine_control::AdmissionLoop> admission_;  // null with --admission fixed
  std::unique_ptr<http::HttpServer> http_;
  std::vector<std::string> store_notes_;  // what the constructor restored or moved aside
  bool shut_down_ = false;
  Say say_;
  std::atomic<bool> stopping_{false};
  std::mutex http_mu_;  // stop() from the signal thread never meets shutdown's reset of http_
  // What a signal that stops the process at once leaves unsaved (", without …"; "" when nothing).
  mutable std::mutex at_once_mu_;
  std::string lost_at_once_;
  std::unique_ptr<StopSignals> signals_;  // last: its thread calls into everything above
};

// The ajet-engine next to the running executable.
std::filesystem::path sibling_engine_binary();

}  // namespace ajet::swarm
