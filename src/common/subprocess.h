// Child processes (the front's engine and the build of synced code; classic mode's front and
// workflow commands): fork + exec with stdout and stderr piped back, a process group of its own (a
// terminal's Ctrl-C reaches only the parent, which then stops the child in order), PR_SET_PDEATHSIG
// so the child dies with the *thread* that spawned it (a SIGKILLed parent leaves no orphan), and a
// pidfd to poll for its exit. Linux only. A Subprocess is owned by one thread at a time; it never
// reaps other children.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ajet {

struct SpawnOptions {
  std::vector<std::string> argv;                         // argv[0]: the program path
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the front's environment
  std::filesystem::path cwd;                             // empty: the front's
  bool pipe_stdin =
      false;  // the child's stdin is a socket the parent writes (write_input); else /dev/null
};

class Subprocess {
 public:
  // Throws Error(kIo) naming the program when it cannot be started (exec failures included).
  static Subprocess spawn(const SpawnOptions& options);

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();  // a child still running is killed (SIGKILL to its group) and reaped

  pid_t pid() const { return pid_; }
  bool valid() const { return pid_ > 0; }
  bool exited() const { return status_.has_value(); }
  std::optional<int> status() const { return status_; }  // waitpid status once reaped

  // Non-blocking read end of the child's stdout + stderr; -1 after EOF.
  int output_fd() const { return out_fd_; }
  // Readable once the child has exited (a pidfd); -1 when the kernel has no pidfd_open (then poll
  // with a timeout and call try_reap()).
  int exit_fd() const { return pid_fd_; }

  // With pipe_stdin: writes all of `data` to the child's stdin (blocking; never raises SIGPIPE).
  // False when the child closed its stdin or exited, or without pipe_stdin.
  bool write_input(const std::string& data);
  // Closes the child's stdin: a child reading it sees end of file.
  void close_input();

  // Reads what is available; complete lines go to `on_line` (without the newline). At EOF a last
  // partial line is delivered too and output_fd() becomes -1.
  void read_output(const std::function<void(std::string)>& on_line);
  // Reaps the child if it has exited; returns its status then.
  std::optional<int> try_reap();
  // Sends `sig` to the child's process group (the child and anything it started).
  void signal_group(int sig);
  // SIGTERM, then SIGKILL after `grace`; waits for the exit and returns the status. Output arriving
  // meanwhile goes to `on_line` (may be null).
  int terminate(std::chrono::milliseconds grace,
                const std::function<void(std::string)>& on_line = nullptr);
  // Blocks until the child exits (draining output to `on_line`), returns its status.
  int wait(const std::function<void(std::string)>& on_line = nullptr);
  // Waits up to `timeout` for output or the exit (output goes to `on_line`); true once exited.
  bool wait_some(std::chrono::milliseconds timeout,
                 const std::function<void(std::string)>& on_line);

 private:
  void reset();  // kills and reaps a running child, closes the descriptors
  void close_fds();

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;  // our end of the child's stdin (a socket: send() with MSG_NOSIGNAL), or -1
  int pid_fd_ = -1;
  std::string partial_;
  std::optional<int> status_;
};

// "exit code 1", "killed by signal 9 (Killed)".
std::string describe_exit(int wait_status);
bool exited_cleanly(int wait_status);

// The first executable `program` in the directories of $PATH (an empty entry: the working
// directory; no $PATH: /usr/local/bin:/usr/bin:/bin), or nullopt.
std::optional<std::string> find_on_path(const std::string& program);

// Runs a command to completion (blocking), capturing stdout + stderr (the last `max_output` bytes).
// `cancelled` (optional) is checked every 100 ms; when it says so the command is terminated.
struct CommandResult {
  int status = 0;      // waitpid status
  std::string output;  // tail of the combined output
  bool cancelled = false;
};
CommandResult run_command(const SpawnOptions& options,
                          const std::function<bool()>& cancelled = nullptr,
                          size_t max_output = 256 * 1024);

}  // namespace ajet
