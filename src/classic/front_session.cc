#include "classic/front_session.h"

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"
#include "config/backbone.h"

namespace ajet::classic {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

FrontSession::FrontSession(const LaunchOptions& options, const PreparedConfig& prepared,
                           std::function<void(const std::string&)> say)
    : options_(options), prepared_(prepared), say_(std::move(say)) {}

void FrontSession::connect(bool resume, const std::function<void(int)>& front_pid) {
  if (remote()) {
    connect_remote();
  } else {
    start_local(resume, front_pid);
  }
  say_("ajet: live dashboard, episodes and tokens: " + url_ + "/ui/");
}

void FrontSession::start_local(bool resume, const std::function<void(int)>& front_pid) {
  std::vector<std::string> flags = options_.swarm_flags;
  flags.push_back(resume ? "--resume" : "--fresh");
  // This launcher is its own front's only client and runs max_env_worker episodes at once.
  flags.insert(flags.end(), {"--max-claims-per-client", "-1"});
  // The run's own front may dial the teacher its config names (the user running it chose it).
  if (prepared_.config.distillation.enabled())
    flags.insert(flags.end(), {"--teacher-url", prepared_.config.distillation.base_url});
  const fs::path dir = prepared_.exp_dir;
  child_ = std::make_unique<SwarmChild>(
      SwarmChildOptions{options_.swarm_binary, dir / "swarm", dir / "swarm.log", flags});
  front_pid(child_->pid());
  url_ = child_->url();
  say_("ajet: front at " + url_ + " (log: " + (dir / "swarm.log").string() + ")");
  client::SwarmClientOptions copts;
  copts.client_uuid = "ajet-classic";
  client_ = std::make_unique<client::SwarmClient>(url_, copts);
}

void FrontSession::connect_remote() {
  url_ = options_.swarm_url;
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
  client::SwarmClientOptions copts;
  copts.client_uuid = "ajet-classic";
  try {
    client_ = std::make_unique<client::SwarmClient>(url_, copts);
    client_->get_global_step();  // throws when nothing answers there
  } catch (const client::SwarmError& e) {
    fail(ErrorCode::kUnavailable,
         "--swarm-url " + options_.swarm_url + ": the front does not answer (" + e.what() +
             "); start one there (`ajet-swarm start`) or check the address");
  }
  say_("ajet: front at " + url_ +
       " (--swarm-url: this run starts no front; it stops the front's engine at the end)");
}

std::string FrontSession::experiment_dir_for_messages() {
  try {
    return client_->get_server_experiment_dir();
  } catch (const std::exception&) {
    return "";
  }
}

std::string FrontSession::exit_lines() const {
  return child_ && child_->exited() ? "\n" + child_->last_lines(10) : "";
}

bool FrontSession::is_this_experiment(const std::string& front_dir) const {
  return !front_dir.empty() && fs::path(front_dir).filename() == prepared_.config.experiment_name;
}

// --swarm-url: the engine the given front runs is stopped, so this run's config can be synced: one
// an earlier run of this experiment left (killed before its end), or with --force-restart any.
// Another experiment's engine is refused otherwise.
void FrontSession::free_remote_engine() {
  const client::EngineStatus s = client_->get_engine_status();
  if (s.status == client::kOffline) return;
  const std::string experiment = experiment_dir_for_messages();
  const std::string running =
      s.status + (experiment.empty() ? "" : " (experiment " + experiment + ")");
  const bool ours = is_this_experiment(experiment);
  if (!ours && !options_.force_restart) {
    fail(ErrorCode::kFailedPrecondition,
         fmt::format("--swarm-url {}: the front's engine is {}, not this run's experiment '{}'; "
                     "stopping it would end "
                     "that training. Wait until the front's engine is ENGINE.OFFLINE, or pass "
                     "--force-restart to stop "
                     "it (the front saves its checkpoint first)",
                     url_, running, prepared_.config.experiment_name));
  }
  say_("ajet: the front's engine is " + running +
       "; stopping it so this run's config can be synced (" +
       (ours ? "an earlier run of this experiment left it" : "--force-restart") +
       "; the front saves its checkpoint first)");
  client_->stop_engine(true, 120.0, s.engine_run);
}

// The front keeps one newest checkpoint (of whatever ran there last). It is this run's when the
// front's last engine ran this experiment (experiment_dir auto: <front
// dir>/experiments/<experiment_name>) and the checkpoint lies under that directory.
bool FrontSession::remote_checkpoint_is_ours() {
  const Json checkpoint =
      client_->get_engine_status().body.value("latest_checkpoint", Json(nullptr));
  const std::string dir = client_->get_server_experiment_dir();
  const std::string cp = checkpoint.is_string() ? checkpoint.get<std::string>() : "";
  const bool ours = !cp.empty() && is_this_experiment(dir) && cp.rfind(dir + "/", 0) == 0;
  if (!ours) {
    say_("ajet: --resume: the front at " + url_ + " holds no checkpoint of this run (" +
         (cp.empty() ? std::string("it has none")
                     : "its newest, " + cp + ", is another experiment's") +
         "); starting the run again from step 0");
  }
  return ours;
}

void FrontSession::sync_config() {
  Json synced;
  try {
    synced = client_->sync_train_config(prepared_.yaml);
  } catch (const client::SwarmError& e) {
    if (e.http_status() != 401) throw;
    fail(ErrorCode::kFailedPrecondition,
         std::string(e.what()) + " (the front wants its admin token: set AJET_ADMIN_TOKEN)");
  }
  if (!synced.value("success", false)) {
    fail(ErrorCode::kInvalidArgument,
         "the front refused the config: " + synced.value("error", synced.dump()));
  }
}

FrontSession::Boot FrontSession::boot(bool resume) {
  Boot out{resume, 0};
  bool from_checkpoint = resume;
  if (remote()) {
    free_remote_engine();
    if (resume && !config::trains(config::backbone_of(prepared_.config))) {
      from_checkpoint =
          false;  // nothing was trained: the run continues from metrics.jsonl on the model
    } else if (resume && !remote_checkpoint_is_ours()) {
      out.resume = from_checkpoint = false;
    }
  } else if (resume && client_->get_engine_status().status != client::kOffline) {
    say_(
        "ajet: --resume: the front restarted the earlier run's engine; restarting it with this "
        "config");
    client_->stop_engine(true, 120.0);
  }
  sync_config();
  const auto started = Clock::now();
  // Not waiting in start_engine: the engine is this run's from its answer on, also when the boot
  // fails.
  engine_run_ = client_->start_engine(false, std::nullopt, from_checkpoint).value("engine_run", "");
  engine_started_ = true;
  client_->follow_engine_run(
      engine_run_);  // claims refused once another client replaced this engine
  client_->wait_for_status(client::kRolling, 900.0, true);
  if (remote()) front_run_dir_ = experiment_dir_for_messages();
  out.global_step = client_->get_engine_status().global_step;
  say_(fmt::format("ajet: engine rolling after {:.1f} s (global step {})", seconds_since(started),
                   out.global_step));
  return out;
}

void FrontSession::check_engine_is_ours(const client::EngineStatus& s) {
  if (engine_run_.empty() || s.engine_run.empty() || s.engine_run == engine_run_) return;
  engine_replaced_ = true;
  fail(ErrorCode::kFailedPrecondition,
       "the front's engine is no longer this run's: another client stopped it and started its own "
       "(engine_run " +
           s.engine_run + "); this run stops here");
}

void FrontSession::stop_engine(double max_wait) {
  if (!client_ || (remote() && !engine_started_)) return;  // this run started no engine there
  if (engine_replaced_) {
    say_("ajet: the front's engine is another client's now; left running");
    return;
  }
  try {
    client_->stop_engine(true, max_wait, engine_run_);
  } catch (const client::SwarmError&) {
    // Refused because another engine runs now (the front's status says which), or a failure to
    // report.
    if (const client::EngineStatus s = client_->get_engine_status();
        engine_run_.empty() || s.engine_run.empty() || s.engine_run == engine_run_) {
      throw;
    }
    engine_replaced_ = true;
    say_(
        "ajet: the front's engine is no longer this run's (another client stopped it and started "
        "its own); left "
        "running");
  }
}

void FrontSession::stop_front() {
  if (child_) child_->stop();
}

}  // namespace ajet::classic
