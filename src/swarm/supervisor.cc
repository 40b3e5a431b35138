#include "swarm/supervisor.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "common/error.h"
#include "common/log.h"
#include "rpc/messages.h"
#include "swarm/registry.h"
#include "swarm/subprocess.h"
#include "swarm/verbose_log.h"

namespace ajet::swarm {

namespace fs = std::filesystem;

struct EngineSupervisor::Session {
  std::ofstream log;
  bool ready_line = false;       // "ajet-engine: ready on ADDRESS" was printed
  std::deque<std::string> tail;  // the engine's last lines, for crash reports
  int forwarded = 0;             // lines copied into the verbose log (bounded per engine process)
};

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

EngineSupervisor::EngineSupervisor(SupervisorOptions options, Registry& registry, VerboseLog& verbose)
    : options_(std::move(options)), registry_(registry), verbose_(verbose) {
  std::string templ = (fs::temp_directory_path() / "ajet-swarm-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) fail(ErrorCode::kIo, "cannot create a private directory for the engine socket in " + fs::temp_directory_path().string());
  socket_dir_ = templ;  // mode 0700: only this user can reach the engine
  socket_path_ = socket_dir_ / "engine.sock";
  thread_ = std::thread([this] { run(); });
}

EngineSupervisor::~EngineSupervisor() {
  stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::error_code ec;
  fs::remove_all(socket_dir_, ec);
}

int64_t EngineSupervisor::start(EngineLaunch launch) {
  std::lock_guard<std::mutex> control(control_mu_);
  std::future<int64_t> started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ != Phase::kIdle || pending_) {
      fail(ErrorCode::kFailedPrecondition, "the engine is already running; call stop_engine first");
    }
    pending_ = std::move(launch);
    started_.emplace();
    started = started_->get_future();
  }
  cv_.notify_all();
  return started.get();
}

void EngineSupervisor::stop() {
  std::lock_guard<std::mutex> control(control_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  if (phase_ == Phase::kIdle && !pending_) return;
  stop_ = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return phase_ == Phase::kIdle && !pending_; });
  stop_ = false;
}

std::shared_ptr<rpc::Client> EngineSupervisor::client() const {
  std::lock_guard<std::mutex> lock(mu_);
  return client_;
}

void EngineSupervisor::set_latest_checkpoint(fs::path dir) {
  std::lock_guard<std::mutex> lock(mu_);
  checkpoint_dir_ = std::move(dir);
}

fs::path EngineSupervisor::latest_checkpoint_dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checkpoint_dir_;
}

int64_t EngineSupervisor::pid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_;
}

bool EngineSupervisor::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_ != Phase::kIdle || pending_.has_value();
}

Json EngineSupervisor::status_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  static constexpr const char* kNames[] = {"idle", "building", "booting", "ready", "stopping"};
  return Json{{"pid", pid_},
              {"phase", kNames[int(phase_)]},
              {"binary", binary_},
              {"socket", socket_path_.string()},
              {"restarts", restarts_},
              {"build", build_note_}};
}

bool EngineSupervisor::stop_requested() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_ || quit_;
}

void EngineSupervisor::set_phase(Phase phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  cv_.notify_all();
}

bool EngineSupervisor::sleep_unless_stopped(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stop_ || quit_; });
}

void EngineSupervisor::note_line(Session& s, const std::string& line) {
  if (s.log.is_open()) s.log << line << '\n' << std::flush;
  if (line.rfind("ajet-engine: ready on ", 0) == 0) s.ready_line = true;
  s.tail.push_back(line);
  while (s.tail.size() > 40) s.tail.pop_front();
  const std::string l = lower(line);
  const bool notable = l.find("error") != std::string::npos || l.find("ready") != std::string::npos ||
                       l.find("listening") != std::string::npos || l.find("warn") != std::string::npos;
  if (notable && s.forwarded < 50) {
    s.forwarded += 1;
    verbose_.add("engine", line.substr(0, 500), /*mirror=*/false);
  }
}

std::string EngineSupervisor::tail_text(const Session& s, size_t lines) const {
  std::string out;
  size_t skip = s.tail.size() > lines ? s.tail.size() - lines : 0;
  for (size_t i = skip; i < s.tail.size(); ++i) {
    if (!out.empty()) out += " | ";
    out += s.tail[i];
  }
  return out.empty() ? "(no output)" : out;
}

void EngineSupervisor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || pending_.has_value(); });
    if (quit_ && !pending_) return;
    EngineLaunch launch = std::move(*pending_);
    pending_.reset();
    phase_ = Phase::kBooting;
    lock.unlock();
    try {
      supervise(std::move(launch));
    } catch (const std::exception& e) {
      log().error("engine supervisor: {}", e.what());
    }
    lock.lock();
    if (started_) {  // supervise() ended before resolving start(): it failed before spawning
      started_->set_exception(std::make_exception_ptr(Error(ErrorCode::kIo, "the engine could not be started")));
      started_.reset();
    }
    if (client_) retired_clients_.push_back(std::move(client_));
    client_.reset();
    std::vector<std::shared_ptr<rpc::Client>> retired;
    retired.swap(retired_clients_);
    lock.unlock();
    retired.clear();  // closes them here, never on an RPC reader thread; in-flight calls get their error
    lock.lock();
    pid_ = 0;
    phase_ = Phase::kIdle;
    cv_.notify_all();
  }
}

std::vector<std::string> EngineSupervisor::engine_command(const fs::path& binary, const EngineLaunch& launch) const {
  // The engine reads ajet.engine.*, ajet.rollout.*, the trainer's keys from the synced YAML; --model
  // names the base weights and --resume the newest checkpoint (weights, optimizer, step) when one exists.
  std::vector<std::string> argv = {binary.string(), "serve", "--conf", launch.config_file.string(),
                                   "--model", launch.config.model.path, "--listen", "unix:" + socket_path_.string()};
  const fs::path checkpoint = latest_checkpoint_dir();
  if (!checkpoint.empty()) argv.insert(argv.end(), {"--resume", checkpoint.string()});
  return argv;
}

void EngineSupervisor::supervise(EngineLaunch launch) {
  Session session;
  std::error_code ec;
  fs::create_directories(launch.run_dir, ec);
  session.log.open(launch.run_dir / "engine.log", std::ios::app);

  fs::path binary = options_.default_engine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!last_good_binary_.empty()) binary = last_good_binary_;
    if (launch.code_root.empty()) build_note_.clear();
  }
  if (!launch.code_root.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_->set_value(0);  // start() answers now; the build takes a while
      started_.reset();
    }
    binary = build_engine(launch, session);
    if (stop_requested()) return;
  }

  bool ever_ready = false;
  int failures = 0;
  while (!stop_requested()) {
    fs::remove(socket_path_, ec);  // a crashed engine's socket file would refuse the new one's clients
    std::vector<std::string> argv = engine_command(binary, launch);
    Subprocess proc;
    try {
      proc = Subprocess::spawn(SpawnOptions{argv, {}, {}});
    } catch (const Error& e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (started_) {  // start() reports it; the caller puts the registry back to OFFLINE
          started_->set_exception(std::current_exception());
          started_.reset();
          return;
        }
      }
      std::string detail = std::string("the engine could not be started: ") + e.what();
      verbose_.add("engine", detail);
      try {
        registry_.stop(detail);
      } catch (const Error&) {
      }
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pid_ = proc.pid();
      binary_ = binary.string();
      phase_ = Phase::kBooting;
      if (started_) {
        started_->set_value(proc.pid());
        started_.reset();
      }
    }
    if (session.log.is_open()) session.log << "---- " << fmt::format("{}", fmt::join(argv, " ")) << '\n' << std::flush;
    session.forwarded = 0;
    session.ready_line = false;
    auto on_line = [&](std::string line) { note_line(session, line); };

    // Boot: wait until the engine accepts connections (it listens once the model is loaded).
    const auto deadline = std::chrono::steady_clock::now() + options_.boot_timeout;
    std::shared_ptr<rpc::Client> conn;
    auto step = std::chrono::milliseconds(10);
    bool exited = false, timed_out = false;
    while (!stop_requested()) {
      if (proc.wait_some(step, on_line)) {
        exited = true;
        break;
      }
      if (session.ready_line || fs::exists(socket_path_)) {
        try {
          auto c = std::make_shared<rpc::Client>("unix:" + socket_path_.string());
          c->connect();
          conn = std::move(c);
          break;
        } catch (const Error&) {
          // not listening yet
        }
      }
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out = true;
        break;
      }
      step = std::min(step * 2, std::chrono::milliseconds(200));
    }
    if (stop_requested()) {
      set_phase(Phase::kStopping);
      proc.terminate(options_.stop_grace, on_line);
      return;
    }
    const bool became_ready = conn != nullptr;
    if (became_ready) {
      std::string detail = fmt::format("engine ready (pid {}, {})", proc.pid(), binary.filename().string());
      try {
        rpc::Client::CallResult status = conn->call(rpc::make_status_request(), std::chrono::seconds(30));
        if (status.done.body.contains("policy_version")) {
          detail += fmt::format(", policy_version {}", status.done.body["policy_version"].dump());
        }
      } catch (const std::exception& e) {
        log().warn("engine status after boot: {}", e.what());
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!build_note_.empty()) detail += "; " + build_note_;
        client_ = conn;
        phase_ = Phase::kReady;
      }
      try {
        registry_.engine_ready(detail);
      } catch (const Error& e) {
        log().info("engine ready, but the registry moved on ({}); stopping it", e.what());
      }
      verbose_.add("engine", detail);
      ever_ready = true;
      failures = 0;
      // Running: until it exits or we are told to stop.
      while (!stop_requested()) {
        if (proc.wait_some(std::chrono::milliseconds(200), on_line)) {
          exited = true;
          break;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (client_) retired_clients_.push_back(std::move(client_));
        client_.reset();
      }
      if (!exited) {
        set_phase(Phase::kStopping);
        conn.reset();
        proc.terminate(options_.stop_grace, on_line);
        return;
      }
      conn.reset();
      std::lock_guard<std::mutex> lock(mu_);
      restarts_ += 1;
    }
    if (timed_out) proc.terminate(options_.stop_grace, on_line);
    const std::string why = timed_out ? fmt::format("did not accept connections within {} s",
                                                    options_.boot_timeout.count() / 1000)
                                      : describe_exit(proc.wait(on_line));
    const std::string tail = tail_text(session, 6);
    if (!ever_ready) {
      std::string detail = fmt::format("the engine failed to start ({}): {}", why, tail);
      verbose_.add("engine", detail);
      try {
        registry_.stop(detail);
      } catch (const Error&) {
      }
      return;
    }
    if (!became_ready) failures += 1;  // it died while booting again
    if (failures >= options_.max_restart_failures) {
      std::string detail = fmt::format("the engine crashed and failed to restart {} times ({}): {}; giving up",
                                       failures, why, tail);
      verbose_.add("engine", detail);
      try {
        registry_.stop(detail);
      } catch (const Error&) {
      }
      return;
    }
    const fs::path checkpoint = latest_checkpoint_dir();
    std::string detail = fmt::format(
        "the engine (pid {}) exited unexpectedly ({}); restarting it from {}; last output: {}", proc.pid(), why,
        checkpoint.empty() ? launch.config.model.path + " (no checkpoint yet)" : "checkpoint " + checkpoint.string(),
        tail);
    verbose_.add("engine", detail);
    try {
      registry_.engine_restarting(detail);
    } catch (const Error&) {
      return;  // stopped meanwhile
    }
    if (failures > 0 && !sleep_unless_stopped(std::chrono::milliseconds(500 * failures))) return;
  }
}

}  // namespace ajet::swarm
