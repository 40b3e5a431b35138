#include "common/subprocess.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

extern char** environ;

namespace ajet {

namespace {

// PATH lookup in the parent (execve in the child must not allocate).
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  return find_on_path(program).value_or(program);  // not found: execve fails and the error names it
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

std::optional<std::string> find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(pos, end - pos);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = end + 1;
  }
  return std::nullopt;
}

Subprocess Subprocess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) invalid_argument("spawn: empty command line");
  const std::string program = resolve_program(options.argv[0]);

  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the front is multithreaded).
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    bool overridden = false;
    for (const auto& [k, v] : options.env) {
      if (entry.size() > k.size() && entry.substr(0, k.size()) == k && entry[k.size()] == '=')
        overridden = true;
    }
    if (!overridden) env_strings.emplace_back(entry);
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string cwd = options.cwd.string();
  const long max_fd = std::max(::sysconf(_SC_OPEN_MAX), 1024L);

  int out[2], err[2], in[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0)
    fail(ErrorCode::kIo, "spawn " + program + ": pipe: " + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    fail(ErrorCode::kIo, "spawn " + program + ": pipe: " + std::strerror(errno));
  }
  // stdin as a socket pair rather than a pipe: send(MSG_NOSIGNAL) turns a vanished reader into
  // EPIPE without touching the process's SIGPIPE disposition.
  if (options.pipe_stdin && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    fail(ErrorCode::kIo, "spawn " + program + ": socketpair: " + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1]}) {
      if (fd >= 0) ::close(fd);
    }
    fail(ErrorCode::kIo, "spawn " + program + ": fork: " + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (in[1] >= 0) {
      ::dup2(in[1], 0);
    } else {
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, 0);
    }
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    // Nothing else of the parent's reaches the child: not the front's listening socket (a front
    // restarted on its port would find it taken while the engine lives), not its client
    // connections, not the store. Libraries (Asio, SQLite) open fds without O_CLOEXEC, so mark them
    // all here; err[1] is already close-on-exec and must stay open until execve reports.
    if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {  // Linux < 5.11
      for (long fd = 3; fd < max_fd; ++fd) {
        if (fd != err[1]) ::close(int(fd));
      }
    }
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
      int e = errno;
      (void)!::write(err[1], &e, sizeof e);
      ::_exit(127);
    }
    ::execve(program.c_str(), argv.data(), envp.data());
    int e = errno;
    (void)!::write(err[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so signal_group works before the child ran setpgid
  ::close(out[1]);
  ::close(err[1]);
  if (in[1] >= 0) ::close(in[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(err[0]);
  if (n == sizeof child_errno) {
    ::close(out[0]);
    if (in[0] >= 0) ::close(in[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    fail(ErrorCode::kIo, "cannot run " + program + (cwd.empty() ? "" : " in " + cwd) + ": " +
                             std::strerror(child_errno));
  }
  Subprocess p;
  p.pid_ = pid;
  p.out_fd_ = out[0];
  p.in_fd_ = in[0];
  set_nonblocking(p.out_fd_);
#ifdef SYS_pidfd_open
  p.pid_fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  return p;
}

Subprocess::Subprocess(Subprocess&& other) noexcept { *this = std::move(other); }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, -1);
    out_fd_ = std::exchange(other.out_fd_, -1);
    in_fd_ = std::exchange(other.in_fd_, -1);
    pid_fd_ = std::exchange(other.pid_fd_, -1);
    partial_ = std::move(other.partial_);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

Subprocess::~Subprocess() { reset(); }

void Subprocess::reset() {
  if (pid_ > 0 && !status_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
  }
  close_fds();
  pid_ = -1;
}

void Subprocess::close_fds() {
  close_input();
  if (out_fd_ >= 0) ::close(out_fd_);
  if (pid_fd_ >= 0) ::close(pid_fd_);
  out_fd_ = pid_fd_ = -1;
}

bool Subprocess::write_input(const std::string& data) {
  size_t done = 0;
  while (in_fd_ >= 0 && done < data.size()) {
    const ssize_t n = ::send(in_fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return in_fd_ >= 0;
}

void Subprocess::close_input() {
  if (in_fd_ >= 0) ::close(in_fd_);
  in_fd_ = -1;
}

void Subprocess::read_output(const std::function<void(std::string)>& on_line) {
  if (out_fd_ < 0) return;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n > 0) {
      partial_.append(buf, size_t(n));
      size_t start = 0, nl;
      while ((nl = partial_.find('\n', start)) != std::string::npos) {
        if (on_line) on_line(partial_.substr(start, nl - start));
        start = nl + 1;
      }
      partial_.erase(0, start);
      if (partial_.size() > 64 * 1024) {  // a line without end: deliver it in pieces
        if (on_line) on_line(std::move(partial_));
        partial_.clear();
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF (or an error): the last partial line, then no more output.
    if (!partial_.empty() && on_line) on_line(std::move(partial_));
    partial_.clear();
    ::close(out_fd_);
    out_fd_ = -1;
    return;
  }
}

std::optional<int> Subprocess::try_reap() {
  if (status_ || pid_ <= 0) return status_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) status_ = status;
  return status_;
}

void Subprocess::signal_group(int sig) {
  if (pid_ <= 0 || status_) return;
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
}

bool Subprocess::wait_some(std::chrono::milliseconds timeout,
                           const std::function<void(std::string)>& on_line) {
  if (try_reap()) {
    read_output(on_line);
    return true;
  }
  pollfd fds[2];
  nfds_t n = 0;
  if (out_fd_ >= 0) fds[n++] = pollfd{out_fd_, POLLIN, 0};
  if (pid_fd_ >= 0) fds[n++] = pollfd{pid_fd_, POLLIN, 0};
  // Without a pidfd (old kernels) the exit is noticed by polling waitpid.
  int ms = int(pid_fd_ >= 0 ? timeout.count() : std::min<int64_t>(timeout.count(), 50));
  ::poll(fds, n, ms);
  read_output(on_line);
  return try_reap().has_value();
}

int Subprocess::terminate(std::chrono::milliseconds grace,
                          const std::function<void(std::string)>& on_line) {
  if (pid_ <= 0) return 0;
  if (!try_reap()) {
    signal_group(SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (!exited()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      wait_some(left, on_line);
    }
    if (!exited()) signal_group(SIGKILL);
  }
  return wait(on_line);
}

int Subprocess::wait(const std::function<void(std::string)>& on_line) {
  if (pid_ <= 0) return 0;
  while (!wait_some(std::chrono::milliseconds(60'000), on_line)) {
  }
  read_output(on_line);
  return *status_;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "killed by signal " + std::to_string(sig) +
           (name != nullptr ? std::string(" (") + name + ")" : "");
  }
  return "status " + std::to_string(status);
}

bool exited_cleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

CommandResult run_command(const SpawnOptions& options, const std::function<bool()>& cancelled,
                          size_t max_output) {
  CommandResult result;
  Subprocess p = Subprocess::spawn(options);
  auto collect = [&](std::string line) {
    result.output += line;
    result.output += '\n';
    if (result.output.size() > 2 * max_output)
      result.output.erase(0, result.output.size() - max_output);
  };
  while (!p.wait_some(std::chrono::milliseconds(100), collect)) {
    if (cancelled && cancelled()) {
      result.cancelled = true;
      p.terminate(std::chrono::milliseconds(2000), collect);
      break;
    }
  }
  result.status = p.wait(collect);
  if (result.output.size() > max_output) result.output.erase(0, result.output.size() - max_output);
  return result;
}

}  // namespace ajet
