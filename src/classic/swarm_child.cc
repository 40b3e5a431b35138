#include "classic/swarm_child.h"

#include <signal.h>

#include "common/error.h"

namespace ajet::classic {

std::optional<std::string> parse_ready_line(const std::string& line) {
  static constexpr std::string_view kPrefix = "ajet-swarm ready: ";
  size_t at = line.find(kPrefix);
  if (at == std::string::npos) return std::nullopt;
  std::string rest = line.substr(at + kPrefix.size());
  size_t end = rest.find_first_of(" \t");
  std::string url = rest.substr(0, end);
  if (url.rfind("http://", 0) != 0 || url.size() <= 7) return std::nullopt;
  return url;
}

SwarmChild::SwarmChild(SwarmChildOptions options) : options_(std::move(options)) {
  std::filesystem::create_directories(options_.server_dir);
  if (!options_.log_file.empty()) {
    std::filesystem::create_directories(options_.log_file.parent_path());
    log_.open(options_.log_file, std::ios::app);
  }
  std::vector<std::string> argv = {options_.binary.string(),    "start", "--port", "0", "--exp-dir",
                                   options_.server_dir.string()};
  argv.insert(argv.end(), options_.extra_flags.begin(), options_.extra_flags.end());
  proc_ = Subprocess::spawn(SpawnOptions{argv, {}, {}});
  reader_ = std::thread([this] { pump(); });
  std::unique_lock<std::mutex> lock(mu_);
  bool ready =
      cv_.wait_for(lock, options_.ready_timeout, [this] { return !url_.empty() || exited_; });
  if (!url_.empty()) return;
  std::string why = exited_ ? "exited (" + describe_exit(status_) + ")"
                            : "printed no ready line within " +
                                  std::to_string(options_.ready_timeout.count()) + " s";
  (void)ready;
  lock.unlock();
  std::string tail = last_lines(15);
  stop(std::chrono::milliseconds(2000));
  fail(ErrorCode::kUnavailable,
       options_.binary.string() + " start " + why + "; its last output:\n" + tail);
}

SwarmChild::~SwarmChild() { stop(); }

void SwarmChild::pump() {
  int status = proc_.wait([this](std::string line) {
    std::lock_guard<std::mutex> lock(mu_);
    if (log_.is_open()) log_ << line << '\n' << std::flush;
    if (url_.empty()) {
      if (auto url = parse_ready_line(line)) url_ = *url;
    }
    tail_.push_back(std::move(line));
    if (tail_.size() > 200) tail_.erase(tail_.begin(), tail_.begin() + 100);
    cv_.notify_all();
  });
  std::lock_guard<std::mutex> lock(mu_);
  exited_ = true;
  status_ = status;
  cv_.notify_all();
}

bool SwarmChild::exited() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exited_;
}

std::string SwarmChild::last_lines(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (size_t i = tail_.size() > n ? tail_.size() - n : 0; i < tail_.size(); ++i)
    out += "  " + tail_[i] + "\n";
  return out;
}

int SwarmChild::stop(std::chrono::milliseconds grace) {
  const pid_t pid = proc_.pid();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!stopping_ && !exited_ && pid > 0) {
      stopping_ = true;
      ::kill(-pid, SIGINT);  // the front has its own process group; SIGINT is its graceful stop
      if (!cv_.wait_for(lock, grace, [this] { return exited_; })) ::kill(-pid, SIGKILL);
    }
  }
  if (reader_.joinable()) reader_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

}  // namespace ajet::classic
