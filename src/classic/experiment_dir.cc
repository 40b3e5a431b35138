#include "classic/experiment_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <thread>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/proc.h"
#include "common/time_text.h"

namespace ajet::classic {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockFile = "ajet.lock";
constexpr const char* kPidFile = "ajet.pid";
constexpr const char* kEarlierDir = "earlier";

// The arguments of a running process; empty when it is gone. POSIX reads: a process that exits
// while its cmdline is read makes read() fail (ESRCH), which libstdc++'s filebuf throws through an
// istreambuf_iterator (an `ajet` beside an exiting one failed with "basic_filebuf::underflow error
// reading the file: No such process"); here it only ends the text.
std::vector<std::string> command_line(pid_t pid) {
  std::string raw;
  const std::string path = "/proc/" + std::to_string(pid) + "/cmdline";
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) raw.append(buf, size_t(n));
    ::close(fd);
  }
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\0') {
      args.push_back(raw.substr(start, i - start));
      start = i + 1;
    }
  }
  return args;
}

bool is_under(const std::string& arg, const std::string& dir) {
  return arg == dir || (arg.size() > dir.size() && arg.compare(0, dir.size(), dir) == 0 &&
                        arg[dir.size()] == '/');
}

// Gone, or a zombie its parent has not reaped yet.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::vector<std::string> fields = proc_stat_fields(pid);
  return fields.empty() || fields[0] == "Z";
}

bool wait_gone(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!process_gone(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(50));  // polling a process's exit, not synchronising
  }
  return true;
}

}  // namespace

ExperimentLock::ExperimentLock(const fs::path& dir)
    : dir_(dir), started_(local_time_text("%Y-%m-%d %H:%M:%S")) {
  fs::create_directories(dir_);
  const fs::path lock = dir_ / kLockFile;
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(ErrorCode::kIo, "cannot open " + lock.string());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    std::string who = "another ajet";
    try {
      Json pids = parse_json(read_file(dir_ / kPidFile), (dir_ / kPidFile).string());
      who = fmt::format("ajet pid {} (its front: pid {})", pids.value("ajet_pid", 0),
                        pids.value("front_pid", 0));
    } catch (const std::exception&) {
    }
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("experiment {} is being run by {} ({} is locked); stop that run first (Ctrl-C "
                     "in its terminal, "
                     "or kill -INT on its pid) or choose another experiment_name",
                     dir_.string(), who, lock.string()));
  }
  write_pid_file();
}

ExperimentLock::~ExperimentLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  fs::remove(dir_ / kPidFile, ec);
  ::close(fd_);  // releases the lock; the lock file itself stays (removing it would race a new run)
}

void ExperimentLock::set_front_pid(pid_t pid) {
  front_pid_ = pid;
  write_pid_file();
}

void ExperimentLock::write_pid_file() {
  write_file_atomic(
      dir_ / kPidFile,
      Json{{"ajet_pid", ::getpid()}, {"front_pid", front_pid_}, {"started", started_}}.dump() +
          "\n");
}

std::vector<Leftover> find_leftovers(const fs::path& dir) {
  const std::string root = fs::absolute(dir).lexically_normal().string();
  std::vector<Leftover> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(name));
    if (pid == ::getpid()) continue;
    const std::vector<std::string> args = command_line(pid);
    if (args.empty()) continue;
    const std::string program = fs::path(args[0]).filename().string();
    if (program != "ajet-swarm" && program != "ajet-engine") continue;
    for (size_t i = 1; i < args.size(); ++i) {
      const size_t eq = args[i].find('=');
      const std::string value =
          args[i].rfind("--", 0) == 0 && eq != std::string::npos ? args[i].substr(eq + 1) : args[i];
      if (is_under(value, root)) {
        if (!process_gone(pid)) out.push_back(Leftover{pid, program});
        break;
      }
    }
  }
  return out;
}

void stop_leftovers(const std::vector<Leftover>& leftovers, std::chrono::milliseconds grace,
                    const std::function<void(const std::string&)>& say) {
  // Fronts first: a front given SIGINT stops its engine in order and records that in its store.
  for (const bool fronts : {true, false}) {
    for (const Leftover& l : leftovers) {
      if ((l.program == "ajet-swarm") != fronts || process_gone(l.pid)) continue;
      say(fmt::format(
          "ajet: {} pid {} of an earlier run of this experiment is still running; stopping it",
          l.program, l.pid));
      ::kill(l.pid, fronts ? SIGINT : SIGTERM);
      if (!wait_gone(l.pid, grace)) {
        say(fmt::format("ajet: {} pid {} did not stop within {} s; killing it", l.program, l.pid,
                        grace.count() / 1000));
        ::kill(l.pid, SIGKILL);
        wait_gone(l.pid, std::chrono::seconds(10));
      }
    }
  }
}

fs::path move_earlier_run_aside(const fs::path& dir) {
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name != kLockFile && name != kPidFile && name != kEarlierDir)
      entries.push_back(entry.path());
  }
  if (entries.empty()) return {};
  const std::string stamp = local_time_text("%Y%m%d-%H%M%S");
  fs::path target = dir / kEarlierDir / stamp;
  for (int n = 2; fs::exists(target); ++n)
    target = dir / kEarlierDir / (stamp + "-" + std::to_string(n));
  fs::create_directories(target);
  for (const fs::path& from : entries) fs::rename(from, target / from.filename());
  return target;
}

}  // namespace ajet::classic
