#include <poll.h>
#include <signal.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "classic/run_metrics.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/time_text.h"
#include "research/runner.h"

namespace ajet::research {
namespace fs = std::filesystem;

std::vector<Validation> read_classic_validations(const fs::path& metrics_jsonl) {
  std::map<int64_t, Json> by_step;
  std::ifstream in(metrics_jsonl);
  std::string line;
  while (std::getline(in, line)) {
    std::optional<Json> r = try_parse_json(line);
    if (!r || !r->is_object()) continue;
    const std::string kind = r->value("kind", "");
    const int64_t step = r->value("step", int64_t(-1));
    if (kind == "resume") {
      by_step.erase(by_step.upper_bound(step), by_step.end());
    } else if (kind == "validation" && step >= 0) {
      by_step[step] = classic::validation_metrics(*r, {});
    }
  }
  std::vector<Validation> out;
  for (auto& [step, metrics] : by_step) out.push_back(Validation{step, std::move(metrics)});
  return out;
}

int64_t read_classic_last_step(const fs::path& metrics_jsonl) {
  int64_t last = 0;
  std::ifstream in(metrics_jsonl);
  std::string line;
  while (std::getline(in, line)) {
    std::optional<Json> r = try_parse_json(line);
    if (!r || !r->is_object()) continue;
    const std::string kind = r->value("kind", "");
    const int64_t step = r->value("step", int64_t(-1));
    if (kind == "resume") last = std::min(last, step);
    if (kind == "train") last = std::max(last, step);
  }
  return last;
}

LocalRunner::LocalRunner(fs::path ajet_binary, std::chrono::milliseconds stop_grace)
    : ajet_(std::move(ajet_binary)), stop_grace_(stop_grace) {}

LocalRunner::~LocalRunner() = default;  // a Subprocess still running is killed with its group

std::string LocalRunner::describe() const {
  return "local classic runs (" + ajet_.string() + " --conf ...)";
}

std::vector<std::string> LocalRunner::command(const TrialLaunch& l) const {
  std::vector<std::string> argv = {ajet_.string(), "--conf", l.base_config.string(), "--exp-dir",
                                   l.exp_base.string()};
  for (const auto& [key, value] : l.overrides) {
    argv.push_back("--set");
    argv.push_back(key + "=" + value);
  }
  if (l.revalidate_step) {
    // The checkpoint of that step when the run saved one (a trained run); else the run's own model
    // (the debug backbone trains nothing).
    argv.push_back("--set");
    argv.push_back("ajet.experiment_name=" + l.run_dir().filename().string());
    argv.push_back("--set");
    argv.push_back("ajet.trainer_common.val_only=true");
    const fs::path model = l.exp_dir() / "saved_checkpoints" /
                           ("global_step_" + std::to_string(*l.revalidate_step)) / "model";
    if (fs::exists(model)) {
      argv.push_back("--set");
      argv.push_back("ajet.model.path=" + fs::absolute(model).string());
    }
  }
  for (const std::string& flag : l.extra_flags) argv.push_back(flag);
  if (l.resume && !l.revalidate_step) argv.push_back("--resume");
  return argv;
}

namespace {

// A run that a dead controller left behind dies with it (PR_SET_PDEATHSIG), but the signal is
// asynchronous: a resume that came at once could find the old `ajet` still holding the experiment's
// lock, and be refused. Waits (bounded) until the pid in ajet.pid is gone.
void wait_for_earlier_run(const fs::path& exp_dir) {
  const fs::path pid_file = exp_dir / "ajet.pid";
  if (!fs::exists(pid_file)) return;
  std::optional<Json> j;
  try {
    j = try_parse_json(read_file(pid_file));
  } catch (const Error&) {
    return;
  }
  if (!j || !j->is_object() || !(*j)["ajet_pid"].is_number_integer()) return;
  const pid_t pid = pid_t((*j)["ajet_pid"].get<int64_t>());
  for (int i = 0; i < 300 && pid > 0 && ::kill(pid, 0) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

void append_trial_log(const TrialLaunch& l, const std::string& line) {
  fs::create_directories(l.exp_base);
  std::ofstream out(l.exp_base / (l.name + ".log"), std::ios::app);
  out << line << "\n";
}

void LocalRunner::start(const TrialLaunch& l) { spawn(l, command(l)); }

void LocalRunner::spawn(const TrialLaunch& l, const std::vector<std::string>& argv) {
  if (running_.count(l.trial))
    fail(ErrorCode::kInternal, "trial " + l.name + " is already running");
  fs::create_directories(l.run_dir());
  if (l.resume || l.revalidate_step) wait_for_earlier_run(l.run_dir());
  const fs::path log = l.exp_base / (l.name + ".log");
  {
    std::string line;
    for (const std::string& a : argv) line += (line.empty() ? "" : " ") + a;
    append_trial_log(l, std::string("=== research: ") + (l.resume ? "resume" : "start") + " at " +
                            local_time_text("%Y-%m-%d %H:%M:%S") + ": " + line);
  }
  // The shell only redirects, then becomes ajet (exec keeps the pid, the process group and the
  // parent-death signal), so the log is written by the kernel even after the controller dies.
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "exec \"$@\" >>\"$AJET_RESEARCH_TRIAL_LOG\" 2>&1 </dev/null", "sh"};
  o.argv.insert(o.argv.end(), argv.begin(), argv.end());
  o.env = {{"AJET_RESEARCH_TRIAL_LOG", log.string()}};
  o.cwd = l.workdir;
  running_.emplace(l.trial, Subprocess::spawn(o));
}

std::optional<TrialEnd> LocalRunner::poll(int64_t trial) {
  auto it = running_.find(trial);
  if (it == running_.end()) return TrialEnd{false, "not running"};
  std::optional<int> status = it->second.try_reap();
  if (!status) return std::nullopt;
  TrialEnd end{exited_cleanly(*status), describe_exit(*status)};
  running_.erase(it);
  return end;
}

std::vector<Validation> LocalRunner::validations(const TrialLaunch& l) {
  if (!l.revalidate_step) return read_classic_validations(l.exp_dir() / "metrics.jsonl");
  std::vector<Validation> out;
  for (Validation& v : read_classic_validations(l.run_dir() / "metrics.jsonl")) {
    if (v.step == 0) out.push_back(Validation{*l.revalidate_step, std::move(v.metrics)});
  }
  return out;
}

int64_t LocalRunner::last_step(const TrialLaunch& l) {
  return read_classic_last_step(l.exp_dir() / "metrics.jsonl");
}

void LocalRunner::stop(int64_t trial) {
  auto it = running_.find(trial);
  if (it == running_.end()) return;
  it->second.terminate(stop_grace_);
  running_.erase(it);
}

std::string LocalRunner::log_tail(const TrialLaunch& l, size_t lines) {
  const fs::path log = l.exp_base / (l.name + ".log");
  std::ifstream in(log, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 32768);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = text.size();
  if (!text.empty() && text.back() == '\n') --pos;
  for (size_t n = 0; n < lines && pos != std::string::npos && pos > 0; ++n) {
    pos = text.rfind('\n', pos - 1);
  }
  return pos == std::string::npos || pos == 0 ? text : text.substr(pos + 1);
}

void LocalRunner::wait(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  for (auto& [id, p] : running_) {
    if (p.exit_fd() >= 0) fds.push_back(pollfd{p.exit_fd(), POLLIN, 0});
  }
  if (running_.empty()) return;
  if (fds.size() == running_.size()) {
    ::poll(fds.data(), fds.size(), int(timeout.count()));
  } else {
    std::this_thread::sleep_for(timeout);  // no pidfd: poll() by the caller's timeout
  }
}

}  // namespace ajet::research
