#include "engine_control/supervisor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "engine_control/remote_group.h"
#include "episodes/registry.h"
#include "episodes/verbose_log.h"
#include "rpc/messages.h"
#include "rpc/token.h"

namespace ajet::engine_control {

namespace fs = std::filesystem;

struct EngineSupervisor::Session {
  std::ofstream log;
  std::vector<uint8_t> ready_line;  // per rank: "ajet-engine: ready on ADDRESS" was printed
  std::deque<std::string> tail;     // the engine's last lines, for crash reports
  int forwarded = 0;  // lines copied into the verbose log (bounded per engine process)
};

namespace {

constexpr const char* kSocketDirPrefix = "ajet-swarm-";
constexpr const char* kOwnerFile =
    "owner";  // "<pid> <start time> locked" of the front that made the directory
constexpr const char* kLockedMarker =
    "locked";  // the owner holds an flock on the file while it runs

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. With the pid
// it names one process; a pid alone may have been reused since. Empty when the process is gone.
std::string process_start_time(pid_t pid) {
  std::vector<std::string> fields = proc_stat_fields(pid);
  return fields.size() > 22 - 3 ? fields[22 - 3] : "";
}

// Whether the front that wrote this owner file is gone. Its flock (held from creation to exit,
// released by the kernel however the front ends) says so wherever the front ran: a pid is not
// enough, since a front in a PID namespace that shares /tmp but not /proc (tests/docs runs the
// documents so) recorded a pid that names some other process here, and its directory stayed
// forever. Owner files without the marker (older versions) fall back to the pid and its start time.
// nullopt: no owner file, or one that says nothing yet (its front is creating it).
std::optional<bool> owner_gone(const fs::path& owner_file) {
  const int fd = ::open(owner_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  char buf[128] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  const std::string text(buf, n > 0 ? size_t(n) : 0);
  std::optional<bool> gone;
  pid_t pid = 0;
  char started[32] = {};
  if (text.find(kLockedMarker) != std::string::npos) {
    gone = ::flock(fd, LOCK_SH | LOCK_NB) == 0;  // nobody holds the owner's exclusive lock
  } else if (std::sscanf(text.c_str(), "%d %31s", &pid, started) == 2) {
    gone = pid <= 0 || process_start_time(pid) != started;
  }
  ::close(fd);
  return gone;
}

// Removes the engine-socket directories of fronts that are gone (SIGKILLed fronts cannot clean up).
// A directory is stale when its owner is gone (owner_gone); one without a complete owner file
// (being created, or left by a front that failed to create it) only once it is a minute old. Only
// this user's.
void remove_stale_socket_dirs(const fs::path& tmp) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kSocketDirPrefix, 0) != 0 || !entry.is_directory(ec) || entry.is_symlink(ec))
      continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    const std::optional<bool> gone = owner_gone(entry.path() / kOwnerFile);
    if (!gone.value_or(std::time(nullptr) - st.st_mtime > 60)) continue;
    fs::remove_all(entry.path(), ec);
    if (!ec) log().info("removed {}, left behind by a front that is gone", entry.path().string());
  }
}

// A TCP port on loopback that nothing listens on right now: the ranks' rendezvous (rank 0 binds it
// moments later; a clash is reported by the engine, naming the port, and the restart picks
// another).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    fail(ErrorCode::kIo, "cannot open a socket to pick the engine ranks' rendezvous port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) fail(ErrorCode::kIo, "cannot bind a loopback port for the engine ranks' rendezvous");
  return ntohs(addr.sin_port);
}

}  // namespace

// One engine process of the group and its connection (outside the anonymous namespace:
// EngineSupervisor::RankGroup holds them).
struct RankProcess {
  Subprocess proc;
  std::shared_ptr<rpc::Client> conn;
};

EngineSupervisor::EngineSupervisor(SupervisorOptions options, episodes::Registry& registry,
                                   episodes::VerboseLog& verbose)
    : options_(std::move(options)), registry_(registry), verbose_(verbose) {
  if (!options_.remote_trainers.empty() && options_.remote_engines.empty()) {
    invalid_argument(
        "--trainer-at: trainer ranks apart from inference need inference replicas to "
        "serve the calls (--engine-at)");
  }
  const fs::path tmp = fs::temp_directory_path();
  remove_stale_socket_dirs(tmp);
  std::string templ = (tmp / (std::string(kSocketDirPrefix) + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) {
    fail(ErrorCode::kIo,
         "cannot create a private directory for the engine socket in " + tmp.string());
  }
  socket_dir_ = templ;  // mode 0700: only this user can reach the engine
  // Locked before anything is written: a reader sees either no marker (and leaves a young directory
  // alone) or the marker with the lock held.
  owner_fd_ =
      ::open((socket_dir_ / kOwnerFile).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const std::string owner =
      fmt::format("{} {} {}\n", ::getpid(), process_start_time(::getpid()), kLockedMarker);
  if (owner_fd_ < 0 || ::flock(owner_fd_, LOCK_EX | LOCK_NB) != 0 ||
      ::write(owner_fd_, owner.data(), owner.size()) != ssize_t(owner.size())) {
    const std::string why = std::strerror(errno);
    if (owner_fd_ >= 0) ::close(owner_fd_);
    fail(ErrorCode::kIo,
         "cannot create, lock and write " + (socket_dir_ / kOwnerFile).string() + ": " + why);
  }
  socket_path_ = socket_dir_ / "engine.sock";
  if (!options_.remote_engines.empty()) {
    RemoteGroupOptions ro;
    ro.token = options_.engine_token;
    ro.group_timeout = options_.group_timeout;
    if (!options_.remote_trainers.empty()) {
      RemoteGroupOptions replicas = ro;
      replicas.addresses = options_.remote_engines;
      replicas_ = std::make_unique<RemoteGroup>(std::move(replicas), verbose_);
      ro.addresses = options_.remote_trainers;
    } else {
      ro.addresses = options_.remote_engines;
    }
    remote_ = std::make_unique<RemoteGroup>(std::move(ro), verbose_);
  }
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
  if (owner_fd_ >= 0) ::close(owner_fd_);
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
  if (remote_) return phase_ == Phase::kReady ? remote_->first() : nullptr;
  return client_;
}

std::vector<std::shared_ptr<rpc::Client>> EngineSupervisor::rank_clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (remote_) {
    if (phase_ != Phase::kReady) return {};
    return replicas_ ? replicas_->serving() : remote_->serving();
  }
  return rank_clients_;
}

fs::path EngineSupervisor::rank_socket(int rank) const {
  return rank == 0 ? socket_path_ : socket_dir_ / fmt::format("engine-rank{}.sock", rank);
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
  Json ranks = Json::array();
  for (size_t r = 0; r < rank_pids_.size(); ++r) {
    ranks.push_back(
        Json{{"rank", r}, {"pid", rank_pids_[r]}, {"socket", rank_socket(int(r)).string()}});
  }
  return Json{{"pid", pid_},
              {"phase", kNames[int(phase_)]},
              {"binary", binary_},
              {"socket", socket_path_.string()},
              {"restarts", restarts_},
              {"build", build_note_},
              {"engine_ranks", options_.engine_ranks},
              {"ranks", ranks}};
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

void EngineSupervisor::note_line(Session& s, int rank, const std::string& raw) {
  if (raw.rfind("ajet-engine: ready on ", 0) == 0 && size_t(rank) < s.ready_line.size())
    s.ready_line[size_t(rank)] = 1;
  // With several ranks each line says whose it is; one rank's lines stay as they were.
  const std::string line = options_.engine_ranks > 1 ? fmt::format("[rank {}] {}", rank, raw) : raw;
  if (s.log.is_open()) s.log << line << '\n' << std::flush;
  s.tail.push_back(line);
  while (s.tail.size() > 40) s.tail.pop_front();
  const std::string l = ascii_lower(line);
  const bool notable =
      l.find("error") != std::string::npos || l.find("ready") != std::string::npos ||
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
      started_->set_exception(
          std::make_exception_ptr(Error(ErrorCode::kIo, "the engine could not be started")));
      started_.reset();
    }
    if (client_) retired_clients_.push_back(std::move(client_));
    client_.reset();
    for (auto& c : rank_clients_) retired_clients_.push_back(std::move(c));
    rank_clients_.clear();
    rank_pids_.clear();
    std::vector<std::shared_ptr<rpc::Client>> retired;
    retired.swap(retired_clients_);
    lock.unlock();
    retired.clear();  // closes them here, never on an RPC reader thread; in-flight calls get their
                      // error
    lock.lock();
    pid_ = 0;
    phase_ = Phase::kIdle;
    cv_.notify_all();
  }
}

std::vector<std::string> EngineSupervisor::engine_command(const fs::path& binary,
                                                          const EngineLaunch& launch, int rank,
                                                          int master_port) const {
  // The engine reads ajet.engine.*, ajet.rollout.*, the trainer's keys from the synced YAML;
  // --model names the base weights and --resume the newest checkpoint (weights, optimizer, step)
  // when one exists.
  std::vector<std::string> argv = {binary.string(), "serve",
                                   "--conf",        launch.config_file.string(),
                                   "--model",       launch.config.model.path,
                                   "--listen",      "unix:" + rank_socket(rank).string()};
  const int ranks = options_.engine_ranks;
  if (ranks > 1) {
    // One node, N local ranks meeting on loopback; the cores are shared out so the ranks do not
    // oversubscribe them (ajet.engine.threads, or one per core when 0, divided by N; at least 1).
    const int64_t configured = launch.config.engine.threads;
    const int64_t total =
        configured > 0 ? configured : int64_t(std::max(1u, std::thread::hardware_concurrency()));
    const int64_t threads = std::max<int64_t>(1, total / ranks);
    argv.insert(argv.end(),
                {"--threads", std::to_string(threads), "--nnodes", "1", "--node-rank", "0",
                 "--nproc-per-node", std::to_string(ranks), "--local-rank", std::to_string(rank),
                 "--master-addr", "127.0.0.1", "--master-port", std::to_string(master_port)});
  }
  const fs::path checkpoint = latest_checkpoint_dir();
  if (!checkpoint.empty()) argv.insert(argv.end(), {"--resume", checkpoint.string()});
  return argv;
}

// The engine processes of one (re)start, rank 0 first, and the handlers that feed each one's output
// lines into the session.
struct EngineSupervisor::RankGroup {
  std::vector<RankProcess> ranks;
  std::vector<std::function<void(std::string)>> on_lines;

  int world() const { return static_cast<int>(ranks.size()); }
  Subprocess& rank0() { return ranks[0].proc; }

  // Waits on rank 0 for up to `d` and looks at the others without waiting; the rank that exited, or
  // -1.
  int wait(std::chrono::milliseconds d) {
    for (int r = 0; r < world(); ++r) {
      if (ranks[size_t(r)].proc.wait_some(r == 0 ? d : std::chrono::milliseconds(0),
                                          on_lines[size_t(r)]))
        return r;
    }
    return -1;
  }

  // SIGTERM to every rank still running, last rank first; then each is reaped (SIGKILL after
  // `grace`).
  void terminate_all(std::chrono::milliseconds grace) {
    for (int r = world() - 1; r >= 0; --r) {
      if (!ranks[size_t(r)].proc.exited()) ranks[size_t(r)].proc.signal_group(SIGTERM);
    }
    for (int r = world() - 1; r >= 0; --r)
      ranks[size_t(r)].proc.terminate(grace, on_lines[size_t(r)]);
  }

  void drop_connections() {
    for (auto& r : ranks) r.conn.reset();
  }
};

// How the boot of a group ended (or where it stood when a stop was requested).
struct EngineSupervisor::BootResult {
  int exited_rank = -1;  // the rank that exited while booting, or -1
  bool timed_out = false;
  bool all_connected = false;

  bool ready() const { return all_connected && exited_rank < 0; }
};

// The phases: 1. the binary (built first from synced code); then, for every (re)start, 2. spawn the
// ranks, 3. boot until all accept connections, 4. serve until one exits or a stop, 5. end the group
// and apply the restart policy, 6. back off. Returns when stopped or given up; run() cleans up.
void EngineSupervisor::supervise(EngineLaunch launch) {
  if (remote_) {
    supervise_remote();
    return;
  }
  Session session;
  std::error_code ec;
  fs::create_directories(launch.run_dir, ec);
  session.log.open(launch.run_dir / "engine.log", std::ios::app);

  // 1. The installed (or last good) engine, or the synced code's, built first.
  const std::optional<fs::path> binary = choose_binary(launch, session);
  if (!binary) return;  // stopped during the build

  bool ever_ready = false;
  int failures = 0;  // consecutive restarts that died while booting
  while (!stop_requested()) {
    // 2. Spawn every rank; start() gets rank 0's pid (or the error when none could be spawned).
    std::optional<RankGroup> group = spawn_ranks(*binary, launch, session);
    if (!group) return;
    // 3. Boot: wait until every rank accepts connections (each listens once its model is loaded).
    const BootResult boot = wait_for_ready(*group, session);
    if (stop_requested()) {
      shut_down(*group);
      return;
    }
    int exited_rank = boot.exited_rank;
    if (boot.ready()) {
      // 4. Ready: serve until a rank exits or we are told to stop.
      announce_ready(*group, *binary);
      ever_ready = true;
      failures = 0;
      exited_rank = watch(*group);
      retire_connections(*group);
      if (exited_rank < 0) {
        shut_down(*group);
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      restarts_ += 1;
    }
    // 5. A rank exited or the boot timed out: every rank goes, then restart or give up.
    const std::string why = end_group(*group, exited_rank, boot.timed_out);
    if (!boot.ready()) failures += 1;  // it died while booting (again)
    if (!restart_or_give_up(launch, session, *group, why, ever_ready, failures)) return;
    // 6. Back-off: 500 ms per consecutive failed restart.
    if (failures > 0 && !sleep_unless_stopped(std::chrono::milliseconds(500 * failures))) return;
  }
}

std::optional<fs::path> EngineSupervisor::choose_binary(const EngineLaunch& launch,
                                                        Session& session) {
  fs::path binary = options_.default_engine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!last_good_binary_.empty()) binary = last_good_binary_;
    if (launch.code_root.empty()) build_note_.clear();
  }
  if (launch.code_root.empty()) return binary;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_->set_value(0);  // start() answers now; the build takes a while
    started_.reset();
  }
  binary = build_engine(launch, session);
  if (stop_requested()) return std::nullopt;
  return binary;
}

std::optional<EngineSupervisor::RankGroup> EngineSupervisor::spawn_ranks(const fs::path& binary,
                                                                         const EngineLaunch& launch,
                                                                         Session& session) {
  const int world = std::max(1, options_.engine_ranks);
  RankGroup group;
  group.ranks.resize(static_cast<size_t>(world));
  std::vector<std::vector<std::string>> argvs;
  try {
    std::error_code ec;
    const int master_port = world > 1 ? free_loopback_port() : 0;
    for (int r = 0; r < world; ++r) {
      fs::remove(rank_socket(r),
                 ec);  // a crashed engine's socket file would refuse the new one's clients
      argvs.push_back(engine_command(binary, launch, r, master_port));
      // The engines listen on unix sockets of mode 0600 and are reached without a token; an
      // AJET_ENGINE_TOKEN the front inherited (meant for another engine) would lock it out.
      group.ranks[size_t(r)].proc =
          Subprocess::spawn(SpawnOptions{argvs.back(), {{rpc::kTokenEnv, ""}}, {}});
    }
  } catch (const Error& e) {
    group.ranks.clear();  // ranks already spawned are killed and reaped
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (started_) {  // start() reports it; the caller puts the registry back to OFFLINE
        started_->set_exception(std::current_exception());
        started_.reset();
        return std::nullopt;
      }
    }
    give_up(std::string("the engine could not be started: ") + e.what());
    return std::nullopt;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pid_ = group.rank0().pid();
    rank_pids_.clear();
    for (const auto& r : group.ranks) rank_pids_.push_back(r.proc.pid());
    binary_ = binary.string();
    phase_ = Phase::kBooting;
    if (started_) {
      started_->set_value(group.rank0().pid());
      started_.reset();
    }
  }
  if (session.log.is_open()) {
    for (const auto& argv : argvs)
      session.log << "---- " << fmt::format("{}", fmt::join(argv, " ")) << '\n';
    session.log << std::flush;
  }
  session.forwarded = 0;
  session.ready_line.assign(size_t(world), 0);
  for (int r = 0; r < world; ++r) {
    group.on_lines.push_back(
        [this, &session, r](std::string line) { note_line(session, r, line); });
  }
  return group;
}

EngineSupervisor::BootResult EngineSupervisor::wait_for_ready(RankGroup& group, Session& session) {
  const auto deadline = std::chrono::steady_clock::now() + options_.boot_timeout;
  auto step = std::chrono::milliseconds(10);
  BootResult boot;
  while (!stop_requested()) {
    boot.exited_rank = group.wait(step);
    if (boot.exited_rank >= 0) break;
    boot.all_connected = true;
    for (int r = 0; r < group.world(); ++r) {
      RankProcess& rp = group.ranks[size_t(r)];
      if (rp.conn) continue;
      if (session.ready_line[size_t(r)] || fs::exists(rank_socket(r))) {
        try {
          auto c = std::make_shared<rpc::Client>("unix:" + rank_socket(r).string());
          c->connect();
          rp.conn = std::move(c);
        } catch (const Error&) {
          // not listening yet
        }
      }
      boot.all_connected = boot.all_connected && rp.conn != nullptr;
    }
    if (boot.all_connected) break;
    if (std::chrono::steady_clock::now() > deadline) {
      boot.timed_out = true;
      break;
    }
    step = std::min(step * 2, std::chrono::milliseconds(200));
  }
  return boot;
}

void EngineSupervisor::shut_down(RankGroup& group) {
  set_phase(Phase::kStopping);
  group.drop_connections();
  group.terminate_all(options_.stop_grace);
}

void EngineSupervisor::set_before_ready(std::function<bool(rpc::Client&)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  before_ready_ = std::move(hook);
}

void EngineSupervisor::announce_ready(RankGroup& group, const fs::path& binary) {
  std::shared_ptr<rpc::Client> conn = group.ranks[0].conn;
  std::string detail =
      fmt::format("engine ready (pid {}, {})", group.rank0().pid(), binary.filename().string());
  std::optional<int64_t> served_version;  // the front's global_step adopts it (e.g. after --resume)
  if (group.world() > 1) detail += fmt::format(", {} data-parallel ranks", group.world());
  try {
    rpc::Client::CallResult status =
        conn->call(rpc::make_status_request(), std::chrono::seconds(30));
    if (status.done.body.contains("policy_version")) {
      detail += fmt::format(", policy_version {}", status.done.body["policy_version"].dump());
      if (status.done.body["policy_version"].is_number_integer()) {
        served_version = status.done.body["policy_version"].get<int64_t>();
      }
    }
  } catch (const std::exception& e) {
    log().warn("engine status after boot: {}", e.what());
  }
  std::function<bool(rpc::Client&)> before_ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before_ready = before_ready_;
  }
  bool own_versions = false;
  if (before_ready) {
    try {
      own_versions = before_ready(*conn);
    } catch (const std::exception& e) {
      verbose_.add("engine", std::string("after the engine started: ") + e.what());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!build_note_.empty()) detail += "; " + build_note_;
    client_ = conn;
    rank_clients_.clear();
    for (const auto& r : group.ranks) rank_clients_.push_back(r.conn);
    phase_ = Phase::kReady;
  }
  try {
    registry_.engine_ready(detail, served_version, /*roll_back=*/!own_versions);
  } catch (const Error& e) {
    log().info("engine ready, but the registry moved on ({}); stopping it", e.what());
  }
  verbose_.add("engine", detail);
}

int EngineSupervisor::watch(RankGroup& group) {
  while (!stop_requested()) {
    const int exited_rank = group.wait(std::chrono::milliseconds(200));
    if (exited_rank >= 0) return exited_rank;
  }
  return -1;
}

void EngineSupervisor::retire_connections(RankGroup& group) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (client_) retired_clients_.push_back(std::move(client_));
    client_.reset();
    for (auto& c : rank_clients_) retired_clients_.push_back(std::move(c));
    rank_clients_.clear();
  }
  group.drop_connections();
}

std::string EngineSupervisor::end_group(RankGroup& group, int exited_rank, bool timed_out) {
  group.drop_connections();
  // The ranks still running cannot go on without the one that exited: all of them go.
  const int failed = exited_rank >= 0 ? exited_rank : 0;
  const int failed_status =
      exited_rank >= 0 ? group.ranks[size_t(failed)].proc.wait(group.on_lines[size_t(failed)]) : 0;
  group.terminate_all(options_.stop_grace);
  std::string why = timed_out ? fmt::format("did not accept connections within {} s",
                                            options_.boot_timeout.count() / 1000)
                              : describe_exit(failed_status);
  if (group.world() > 1 && !timed_out) {
    why = fmt::format("rank {} (pid {}): {}", failed, group.ranks[size_t(failed)].proc.pid(), why);
  }
  return why;
}

bool EngineSupervisor::restart_or_give_up(const EngineLaunch& launch, const Session& session,
                                          RankGroup& group, const std::string& why, bool ever_ready,
                                          int failures) {
  const std::string tail = tail_text(session, group.world() > 1 ? 10 : 6);
  if (!ever_ready) {
    give_up(fmt::format("the engine failed to start ({}): {}", why, tail));
    return false;
  }
  if (failures >= options_.max_restart_failures) {
    give_up(fmt::format("the engine crashed and failed to restart {} times ({}): {}; giving up",
                        failures, why, tail));
    return false;
  }
  const fs::path checkpoint = latest_checkpoint_dir();
  std::string detail = fmt::format(
      "the engine (pid {}) exited unexpectedly ({}); restarting it from {}; last output: {}",
      group.rank0().pid(), why,
      checkpoint.empty() ? launch.config.model.path + " (no checkpoint yet)"
                         : "checkpoint " + checkpoint.string(),
      tail);
  verbose_.add("engine", detail);
  try {
    registry_.engine_restarting(detail);
  } catch (const Error&) {
    return false;  // stopped meanwhile
  }
  return true;
}

void EngineSupervisor::give_up(const std::string& detail) {
  verbose_.add("engine", detail);
  try {
    registry_.stop(detail);
  } catch (const Error&) {
  }
}

}  // namespace ajet::engine_control
