#include "rpc/serve_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"

namespace ajet::rpc {

namespace {
constexpr const char* kReadyMarker = "ajet-engine: ready on ";
}  // namespace

ServeChild::ServeChild(std::vector<std::string> argv, std::filesystem::path stderr_path)
    : stderr_path_(std::move(stderr_path)) {
  if (argv.empty()) fail(ErrorCode::kInvalidArgument, "ServeChild: no command");
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    fail(ErrorCode::kIo, std::string("ServeChild: pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(out[0]);
    ::close(out[1]);
    fail(ErrorCode::kIo, std::string("ServeChild: fork: ") + std::strerror(errno));
  }
  if (pid_ == 0) {  // only async-signal-safe calls from here on
    ::dup2(out[1], 1);
    const int err = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) ::dup2(err, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  stdout_fd_ = out[0];
}

ServeChild::~ServeChild() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    pid_t r = 0;
    while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child's exit
    }
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

const std::string& ServeChild::wait_ready(std::chrono::seconds limit) {
  const std::string marker = kReadyMarker;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    const size_t at = stdout_.find(marker);
    if (at != std::string::npos) {
      const size_t end = stdout_.find('\n', at);
      if (end != std::string::npos)
        return address_ = stdout_.substr(at + marker.size(), end - at - marker.size());
    }
    const Read r = read_stdout(deadline);
    if (r != Read::kData) {
      std::string why = "no ready line within " + std::to_string(limit.count()) + " s";
      if (r == Read::kEnd)
        why = reap_within(std::chrono::seconds(10))
                  ? "it exited with code " + std::to_string(*exit_code_)
                  : "it closed its stdout";
      fail(ErrorCode::kUnavailable, "the engine did not get ready (" + why + "); stdout:\n" +
                                        stdout_ + "\nstderr (" + stderr_path_.string() + "):\n" +
                                        stderr_text());
    }
  }
}

int ServeChild::wait_exit(std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (read_stdout(deadline) == Read::kData) {
  }
  if (!exit_code_) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return *exit_code_;
}

void ServeChild::signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

std::string ServeChild::stderr_text() const {
  std::ifstream in(stderr_path_);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ServeChild::Read ServeChild::read_stdout(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Read::kTimeout;
    pollfd p{stdout_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Read::kTimeout;
    if (r < 0) return Read::kEnd;
    char buf[4096];
    const ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Read::kEnd;
    stdout_.append(buf, static_cast<size_t>(n));
    return Read::kData;
  }
}

bool ServeChild::reap_within(std::chrono::milliseconds limit) {
  if (exit_code_) return true;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) != pid_) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a child's exit
  }
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

}  // namespace ajet::rpc
