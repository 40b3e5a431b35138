// One classic run owns its experiment directory: a lock (`ajet.lock`, held by the running ajet; the
// kernel drops it when ajet dies however it dies), a pid file (`ajet.pid`: which ajet and which
// front run this experiment), leftovers of an earlier run found and stopped (a front or engine
// whose command line names this directory), and the files of an earlier run moved aside (never
// deleted) when a new run starts there. Never talks HTTP and never touches the store's contents.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace ajet::classic {

// The lock on an experiment directory; released by the destructor (or by the kernel).
class ExperimentLock {
 public:
  // Takes `dir`/ajet.lock and writes `dir`/ajet.pid. Throws Error(kFailedPrecondition) naming the
  // other ajet's pid when another ajet runs this experiment.
  explicit ExperimentLock(const std::filesystem::path& dir);
  ~ExperimentLock();
  ExperimentLock(const ExperimentLock&) = delete;
  ExperimentLock& operator=(const ExperimentLock&) = delete;

  // Records the front's pid in ajet.pid (JSON: {"ajet_pid", "front_pid", "started"}).
  void set_front_pid(pid_t pid);

 private:
  void write_pid_file();

  std::filesystem::path dir_;
  int fd_ = -1;
  pid_t front_pid_ = 0;
  std::string started_;
};

struct Leftover {
  pid_t pid = 0;
  std::string program;  // "ajet-swarm" or "ajet-engine"
};

// ajet-swarm and ajet-engine processes (other than this one) with an argument that is `dir` or a
// path under it: a front or engine of this experiment that outlived its ajet.
std::vector<Leftover> find_leftovers(const std::filesystem::path& dir);

// Stops `leftovers`: fronts first with SIGINT (a front stops its engine itself), engines with
// SIGTERM, SIGKILL for any still running after `grace`. Returns once they are gone. `say` gets one
// line per process.
void stop_leftovers(const std::vector<Leftover>& leftovers, std::chrono::milliseconds grace,
                    const std::function<void(const std::string&)>& say);

// Moves every entry of `dir` except the lock, the pid file and `earlier/` itself into
// `dir`/earlier/<time>/; returns that directory, or "" when `dir` held nothing else.
std::filesystem::path move_earlier_run_aside(const std::filesystem::path& dir);

}  // namespace ajet::classic
