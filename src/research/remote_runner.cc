#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "client/swarm_client.h"
#include "common/error.h"
#include "common/fs.h"
#include "research/runner.h"

namespace ajet::research {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Where a trial's last server is kept (beside its log), so a controller that restarted sends a
// resumed trial back to the front that holds its checkpoint.
fs::path server_file(const TrialLaunch& l) { return l.exp_base / (l.name + ".server"); }

double seconds(std::chrono::milliseconds d) { return double(d.count()) / 1000.0; }

}  // namespace

RemoteRunner::RemoteRunner(fs::path ajet_binary, RemoteRunnerOptions options,
                           std::chrono::milliseconds stop_grace)
    : LocalRunner(std::move(ajet_binary), stop_grace), options_(std::move(options)) {
  if (options_.servers.empty())
    invalid_argument("the remote trial runner needs at least one server");
}

std::string RemoteRunner::describe() const {
  return fmt::format("classic runs (ajet --conf ... --swarm-url) on {} swarm server(s): {}",
                     options_.servers.size(), fmt::join(options_.servers, ", "));
}

std::string RemoteRunner::server_of(int64_t trial) const {
  const auto it = held_.find(trial);
  return it == held_.end() ? "" : it->second;
}

// A free server: for a resumed trial the one it last ran on (when free and not found silent at its
// last probe), else the first free one that answered at its last probe (or was never probed), else
// the first free one.
std::string RemoteRunner::pick_server(const TrialLaunch& l) const {
  std::vector<std::string> free;
  for (const std::string& s : options_.servers) {
    const bool taken =
        std::any_of(held_.begin(), held_.end(), [&](const auto& h) { return h.second == s; });
    if (!taken) free.push_back(s);
  }
  if (free.empty()) return "";
  // Not found silent at its last probe (or never probed).
  auto answered = [&](const std::string& s) {
    const auto u = unreachable_.find(s);
    return u == unreachable_.end() || !u->second;
  };
  if (l.resume && fs::exists(server_file(l))) {
    std::string last = read_file(server_file(l));
    while (!last.empty() && (last.back() == '\n' || last.back() == ' ')) last.pop_back();
    if (answered(last) && std::find(free.begin(), free.end(), last) != free.end()) return last;
  }
  for (const std::string& s : free) {
    if (answered(s)) return s;
  }
  return free.front();
}

bool RemoteRunner::answers(const std::string& server) const {
  try {
    client::SwarmClientOptions o;
    o.client_uuid = "ajet-research-probe";
    o.connect_timeout = std::chrono::milliseconds(2000);
    o.timeout = std::chrono::milliseconds(5000);
    client::SwarmClient probe(server, o);
    return probe.get_engine_status().status != client::kCannotConnect;
  } catch (const std::exception&) {
    return false;
  }
}

void RemoteRunner::launch_on(const TrialLaunch& l, const std::string& server) {
  std::vector<std::string> argv = command(l);
  argv.push_back("--swarm-url");
  argv.push_back(server);
  // The study's servers are its own (runner.servers): a trial takes over whatever engine an earlier
  // trial or controller left running there.
  argv.push_back("--force-restart");
  try {
    spawn(l, argv);
  } catch (...) {
    held_.erase(l.trial);
    throw;
  }
}

void RemoteRunner::start(const TrialLaunch& l) {
  if (held_.count(l.trial)) fail(ErrorCode::kInternal, "trial " + l.name + " is already running");
  const std::string server = pick_server(l);
  if (server.empty()) {
    fail(ErrorCode::kUnavailable,
         fmt::format("every trial server is busy ({}); parallel must not exceed them",
                     fmt::join(options_.servers, ", ")));
  }
  held_[l.trial] = server;
  fs::create_directories(l.exp_base);
  write_file_atomic(server_file(l), server + "\n");
  if (answers(server)) {
    unreachable_[server] = false;
    launch_on(l, server);
    return;
  }
  unreachable_[server] = true;
  const std::string line = fmt::format(
      "research: {}: the trial server {} does not answer; waiting up to {:.0f} s for it", l.name,
      server, seconds(options_.unreachable));
  options_.say(line);
  append_trial_log(l, "=== " + line);
  const auto now = Clock::now();
  waiting_[l.trial] =
      Waiting{l, server, now, now + options_.first_probe_delay, options_.first_probe_delay};
}

std::optional<TrialEnd> RemoteRunner::poll(int64_t trial) {
  const auto w = waiting_.find(trial);
  if (w == waiting_.end()) {
    std::optional<TrialEnd> end = LocalRunner::poll(trial);
    if (end) held_.erase(trial);
    return end;
  }
  Waiting& wait = w->second;
  const auto now = Clock::now();
  if (now < wait.next_probe) return std::nullopt;
  const double waited = std::chrono::duration<double>(now - wait.since).count();
  if (answers(wait.server)) {
    unreachable_[wait.server] = false;
    const TrialLaunch l = wait.launch;
    options_.say(fmt::format("research: {}: the trial server {} answers after {:.0f} s; starting",
                             l.name, wait.server, waited));
    waiting_.erase(w);
    try {
      launch_on(l, held_.at(trial));
    } catch (const Error& e) {
      return TrialEnd{false, std::string("could not start: ") + e.what()};
    }
    return std::nullopt;
  }
  if (now - wait.since >= options_.unreachable) {
    const std::string why =
        fmt::format("the trial server {} did not answer for {:.0f} s (budget.unreachable_seconds)",
                    wait.server, waited);
    options_.say(fmt::format("research: {}: giving up: {}", wait.launch.name, why));
    append_trial_log(wait.launch, "=== research: giving up: " + why);
    TrialEnd end{false, why};
    end.unreachable_server = wait.server;
    end.waited_s = waited;
    held_.erase(trial);
    waiting_.erase(w);
    return end;
  }
  // Back-off: the delay doubles up to max_probe_delay; the last probe falls on the deadline.
  wait.delay = std::min(wait.delay * 2, options_.max_probe_delay);
  wait.next_probe = std::min(now + wait.delay, wait.since + options_.unreachable);
  return std::nullopt;
}

void RemoteRunner::stop(int64_t trial) {
  waiting_.erase(trial);
  LocalRunner::stop(trial);  // the child stops the front's engine as it ends
  held_.erase(trial);
}

void RemoteRunner::wait(std::chrono::milliseconds timeout) {
  if (waiting_.empty()) {
    LocalRunner::wait(timeout);
    return;
  }
  auto until = Clock::now() + timeout;
  for (const auto& [id, w] : waiting_) until = std::min(until, w.next_probe);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  if (left.count() <= 0) return;
  if (children() > 0) {
    LocalRunner::wait(left);
  } else {
    std::this_thread::sleep_for(left);  // nothing else to wait on until the next probe
  }
}

}  // namespace ajet::research
