// The front as a child of the launcher: `ajet-swarm start --port 0 --exp-dir DIR`, its output
// copied to a log file, the ready line parsed for the URL. Stopping is SIGINT (graceful: the front
// stops its engine), then SIGKILL after a grace period. Never talks HTTP; the launcher does that.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"

namespace ajet::classic {

struct SwarmChildOptions {
  std::filesystem::path binary;          // ajet-swarm
  std::filesystem::path server_dir;      // --exp-dir of the front
  std::filesystem::path log_file;        // the front's stdout + stderr
  std::vector<std::string> extra_flags;  // e.g. {"--engine", path}
  std::chrono::seconds ready_timeout{120};
};

class SwarmChild {
 public:
  // Starts the front and waits for its ready line. Throws Error(kUnavailable) with the last lines
  // of its output when it exits or stays silent past ready_timeout.
  explicit SwarmChild(SwarmChildOptions options);
  ~SwarmChild();  // stop()
  SwarmChild(const SwarmChild&) = delete;
  SwarmChild& operator=(const SwarmChild&) = delete;

  const std::string& url() const { return url_; }  // "http://127.0.0.1:PORT"
  pid_t pid() const { return proc_.pid(); }
  // SIGINT, then SIGKILL after `grace`; returns the wait status (idempotent).
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(15'000));
  bool exited() const;
  std::string last_lines(size_t n) const;

 private:
  void pump();

  SwarmChildOptions options_;
  Subprocess proc_;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> tail_;
  std::ofstream log_;
  std::string url_;
  bool exited_ = false;
  bool stopping_ = false;
  int status_ = -1;
};

// Parses "ajet-swarm ready: http://HOST:PORT (...)": the URL, or nullopt for another line.
std::optional<std::string> parse_ready_line(const std::string& line);

}  // namespace ajet::classic
