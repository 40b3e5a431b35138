// `ajet-engine serve` (or any command that prints "ajet-engine: ready on ADDRESS") as a child
// process of a test or a benchmark: stdout read through a pipe up to the ready line (never a
// sleep), stderr into a file. The front supervises its engines itself
// (engine_control/supervisor.h); this is the plain version for a process that drives an engine
// directly over RPC.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ajet::rpc {

class ServeChild {
 public:
  // Starts argv (argv[0]: the program path) with stderr written to `stderr_path`. Throws Error(kIo)
  // when the pipe or the fork fails (a program that cannot be executed exits with 127).
  ServeChild(std::vector<std::string> argv, std::filesystem::path stderr_path);
  // A child still running gets SIGTERM, then SIGKILL after 10 s, and is reaped.
  ~ServeChild();
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;

  // Reads stdout until "ajet-engine: ready on ADDRESS"; returns ADDRESS. Throws Error(kUnavailable)
  // with stdout and stderr when the process closes stdout (exits) first; `limit` guards against a
  // hang.
  const std::string& wait_ready(std::chrono::seconds limit = std::chrono::seconds(300));
  // Reads stdout to its end, reaps the process and returns its exit code (128 + signal when
  // killed).
  int wait_exit(std::chrono::seconds limit = std::chrono::seconds(120));

  void signal(int sig);
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& stdout_text() const { return stdout_; }
  std::string stderr_text() const;  // the file so far

 private:
  enum class Read { kData, kEnd, kTimeout };
  // One chunk of stdout; kEnd at end of file, kTimeout when the deadline passed.
  Read read_stdout(std::chrono::steady_clock::time_point deadline);
  // Reaps the child if it exits within `limit` (it closed stdout: it is exiting); true then.
  bool reap_within(std::chrono::milliseconds limit);

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::filesystem::path stderr_path_;
  std::string stdout_, address_;
  std::optional<int> exit_code_;
};

}  // namespace ajet::rpc
