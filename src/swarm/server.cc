#include "swarm/server.h"

#include <fmt/format.h>

#include <cstdlib>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/stop_signals.h"
#include "common/time_text.h"
#include "config/load.h"
#include "engine_control/batch_runner.h"
#include "engine_control/supervisor.h"
#include "episodes/janitor.h"
#include "episodes/registry.h"
#include "episodes/tracker_map.h"
#include "episodes/verbose_log.h"
#include "http/client.h"
#include "http/router.h"
#include "http/server.h"
#include "openai/openai_call.h"
#include "rpc/token.h"
#include "store/store.h"
#include "swarm/coordinator_asker.h"
#include "swarm/metrics_sink.h"
#include "swarm/route_table.h"
#include "swarm/routes.h"
#include "swarm/routes_prometheus.h"
#include "swarm/work_pool.h"

namespace ajet::swarm {

namespace fs = std::filesystem;

fs::path sibling_engine_binary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "ajet-engine";
  return self.parent_path() / "ajet-engine";
}

std::string describe_earlier_run(const store::RecoveredState& r) {
  const bool has_run = !r.train_config_yaml.empty() || r.global_step > 0 ||
                       !r.pending_finished.empty() || !r.claimed.empty();
  if (!has_run) return "";
  std::string out = fmt::format(
      "global step {}, engine was {}, {} finished episodes waiting for a batch, {} claimed "
      "episodes",
      r.global_step, r.engine_status.empty() ? "ENGINE.OFFLINE" : r.engine_status,
      r.pending_finished.size(), r.claimed.size());
  if (!r.train_config_yaml.empty()) {
    try {
      config::Config c = config::parse_config(r.train_config_yaml, "stored train config",
                                              config::ConfigUse::kSwarmServer)
                             .config;
      out += fmt::format(", config: experiment {}, backbone {}, model {}", c.experiment_name,
                         c.backbone, c.model.path);
    } catch (const std::exception&) {
      out += ", config: (does not load any more)";
    }
  }
  return out;
}

namespace {

// Renames the store file and its WAL side files to `<store>.before-<stamp>[-N]…`; returns the new
// name.
fs::path move_store_aside(const fs::path& store_path) {
  const std::string stamp = local_time_text("%Y%m%d-%H%M%S");
  fs::path target = store_path.string() + ".before-" + stamp;
  for (int n = 2; fs::exists(target); ++n)
    target = store_path.string() + ".before-" + stamp + "-" + std::to_string(n);
  fs::rename(store_path, target);
  for (const char* side : {"-wal", "-shm"}) {
    const fs::path from = store_path.string() + side;
    if (fs::exists(from)) fs::rename(from, target.string() + side);
  }
  return target;
}

std::string url_host(const std::string& host) {
  if (host == "0.0.0.0" || host.empty()) return "127.0.0.1";
  if (host == "::") return "[::1]";
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

}  // namespace

SwarmServer::SwarmServer(FrontOptions options, Say say)
    : options_(std::move(options)), say_(std::move(say)) {
  fs::create_directories(options_.server_dir);
  options_.server_dir = fs::absolute(options_.server_dir);
  if (options_.store_path.empty()) options_.store_path = options_.server_dir / "swarm.sqlite";
  if (options_.engine_binary.empty()) options_.engine_binary = sibling_engine_binary();

  store_ = std::make_unique<store::Store>(options_.store_path);
  recovered_ = store_->recover();
  // An earlier run in the store: resumed only when asked, so a new experiment never continues an
  // old one.
  if (const std::string earlier = describe_earlier_run(recovered_); !earlier.empty()) {
    switch (options_.old_store) {
      case OldStoreRule::kRefuse:
        invalid_argument(fmt::format(
            "{} holds an earlier run ({}). Continue it with --resume (what a restart after a "
            "crash wants), or start a new experiment with --fresh (the old store is moved "
            "aside, nothing is deleted)",
            options_.store_path.string(), earlier));
      case OldStoreRule::kResume:
        store_notes_.push_back("resuming the earlier run in " + options_.store_path.string() +
                               ": " + earlier);
        break;
      case OldStoreRule::kFresh: {
        store_.reset();  // commits and closes, releases the lock
        const fs::path moved = move_store_aside(options_.store_path);
        store_notes_.push_back(
            fmt::format("--fresh: the earlier run in {} ({}) was moved aside to {}",
                        options_.store_path.string(), earlier, moved.string()));
        store_ = std::make_unique<store::Store>(options_.store_path);
        recovered_ = store_->recover();
        break;
      }
    }
  } else if (options_.old_store == OldStoreRule::kResume) {
    store_notes_.push_back("--resume: " + options_.store_path.string() +
                           " holds no earlier run; starting empty");
  }
  const std::string secret = store_->load_or_create_secret();
  recovered_.episode_key_secret = secret;

  verbose_ = std::make_unique<episodes::VerboseLog>();
  latest_ = std::make_unique<openai::LatestCall>();
  trackers_ = std::make_unique<episodes::TrackerMap>();
  registry_ =
      std::make_unique<episodes::Registry>(registry_options_for(options_, nullptr, ""),
                                           episodes::EpisodeKeySigner(secret), store_.get());
  pool_ = std::make_unique<WorkPool>(2, "swarm work pool");
  engine_control::SupervisorOptions sup;
  sup.default_engine = options_.engine_binary;
  sup.boot_timeout = std::chrono::milliseconds(int64_t(options_.engine_boot_timeout_s * 1000));
  sup.engine_ranks = options_.engine_ranks;
  sup.stop_grace = std::chrono::milliseconds(int64_t(options_.engine_stop_grace_s * 1000));
  sup.remote_engines = options_.engine_at;
  sup.remote_trainers = options_.trainer_at;  // without --engine-at, the supervisor refuses it
  if (!sup.remote_engines.empty()) {
    sup.engine_token = rpc::resolve_token(options_.engine_token_file);
    if (sup.engine_token.empty()) {
      invalid_argument(
          "--engine-at: engines on other hosts need their token (--engine-token-file, or "
          "AJET_ENGINE_TOKEN)");
    }
    sup.group_timeout = std::chrono::milliseconds(int64_t(options_.engine_group_timeout_s * 1000));
  }
  supervisor_ = std::make_unique<engine_control::EngineSupervisor>(sup, *registry_, *verbose_);
  episodes::TrackerMap* trackers = trackers_.get();
  episodes::VerboseLog* verbose = verbose_.get();
  // Metrics go to TensorBoard in the experiment directory of the synced config (read at each write:
  // start_engine resolves it), while its ajet.trainer_common.logger holds tensorboard.
  metrics_ = std::make_unique<MetricsSink>(*store_, [this] {
    const TrainState t = synced_->get();
    MetricsSink::Target target;
    target.experiment_dir = t.experiment_dir.empty() ? options_.server_dir : t.experiment_dir;
    target.tensorboard = !t.config || config::logger_enabled(*t.config, "tensorboard");
    return target;
  });
  MetricsSink* metrics = metrics_.get();
  WorkPool* pool = pool_.get();
  registry_->set_hooks(episodes::RegistryHooks{
      [trackers](const episodes::EpisodeClosed& closed) { trackers->drop(closed.episode_uuid); },
      [verbose](const std::string& tag, const std::string& message) {
        verbose->add(tag, message, false);
      },
      [metrics](int64_t step, const std::vector<std::pair<std::string, double>>& values,
                double at) { metrics->to_tensorboard(step, values, at); },
      [pool](std::function<void()> task) { pool->post(std::move(task)); }});

  // The batch runner reads the synced state; the life-cycle operations write it.
  synced_ = std::make_unique<SyncedTrain>();
  SyncedTrain* synced = synced_.get();
  engine_control::EngineSupervisor* supervisor = supervisor_.get();
  store::Store* store = store_.get();
  engine_control::TrainerLink link;
  link.model = [synced] { return synced->model(); };
  link.engine = [supervisor] { return supervisor->client(); };
  link.engine_ranks = [supervisor] { return supervisor->rank_clients(); };
  if (supervisor->remote()) {
    link.train_ranks = [supervisor](bool after_failure) {
      return supervisor->train_ranks(after_failure);
    };
    link.group_version = [supervisor] { return supervisor->group_version(); };
    link.step_done = [supervisor](int64_t version, const std::string& checksum) {
      supervisor->note_step(version, checksum);
    };
    link.hold_trainer = [supervisor] { return supervisor->hold_trainer(); };
  }
  // A resumed store's config passed no --teacher-url check: its teacher is dialed only when this
  // front's flags name it.
  link.settings = [synced, allowed = options_.teacher_urls] {
    engine_control::TrainSettings s = synced->settings();
    if (s.teacher) {
      try {
        if (const auto state = synced->get(); state.config)
          check_teacher_allowed(allowed, *state.config);
      } catch (const Error& e) {
        log().error("distillation is off: {}", e.what());
        s.teacher.reset();
      }
    }
    return s;
  };
  link.checkpoint_saved = [supervisor, store](const fs::path& dir) {
    supervisor->set_latest_checkpoint(dir);
    store->put_state(store::kStateLatestCheckpoint,
                     dir.string());  // a restarted front resumes the engine from it
  };
  batches_ = std::make_unique<engine_control::BatchRunner>(*registry_, *store_, *verbose_,
                                                           std::move(link));

  // The port is bound first (port 0: the kernel picks it), so the context is complete when built:
  // its base URL names the bound port. Routes are added before start(), and only then can requests
  // arrive.
  auto router = std::make_shared<http::Router>();
  http::ServerOptions http_options;
  http_options.host = options_.host;
  http_options.port = options_.port;
  http_options.io_threads = options_.io_threads;
  http_options.max_body_bytes = options_.max_body_bytes;
  http_options.max_body_memory_bytes = options_.max_body_memory_bytes;
  http_options.body_memory_name = "ajet-swarm start --max-body-memory-mb";
  http_options.max_connections = options_.max_connections;
  // Each request's head goes to the router first: the route's credential and body limit are checked
  // before its body is read.
  http_ = std::make_unique<http::HttpServer>(
      http_options,
      [router](http::Request request, http::Respond respond) {
        (*router)(std::move(request), std::move(respond));
      },
      [router](const http::RequestHead& head) { return router->check_head(head); });
  ctx_ = std::make_unique<ServerContext>(options_, url() + "/v1", *store_, *registry_, *verbose_,
                                         *pool_, *supervisor_, *trackers_, *latest_, *synced_,
                                         *batches_);
  router->set_defaults(
      command_body(*ctx_));  // routes that name no limit of their own carry no data
  // Every route is a row of the route table (route_table.cc); its handler comes from its
  // routes_*.cc.
  RouteHandlers handlers;
  add_command_handlers(handlers, *ctx_);
  add_metrics_handlers(handlers, *ctx_, *metrics_);
  add_ledger_handlers(handlers, *ctx_);
  add_engine_handlers(handlers, *ctx_);
  add_openai_handlers(handlers, *ctx_);
  add_ui_handlers(handlers);
  add_prometheus_handlers(handlers, *router, *ctx_, *http_);
  add_routes(*router, handlers);
  // A participant's prepared episode outlived its prepare_timeout: its coordinator is asked what
  // the group decided (docs/protocol.md "Episode groups across servers"), on the asker's own
  // threads.
  asker_ = std::make_unique<CoordinatorAsker>(
      CoordinatorAsker::Options{},
      [registry = registry_.get()](const std::string& uuid, const std::string& decision) {
        registry->settle_prepared(uuid, decision);
      });
  janitor_ = std::make_unique<episodes::Janitor>(
      *registry_, std::chrono::milliseconds(int64_t(options_.janitor_interval_s * 1000)),
      [asker = asker_.get()](const episodes::SweepResult& swept) {
        for (const episodes::PendingResolution& pending : swept.to_resolve) asker->ask(pending);
      });
  if (options_.kv_admission) {
    engine_control::AdmissionLoop::Hooks hooks;
    hooks.replicas = [supervisor = supervisor_.get()] { return supervisor->rank_clients(); };
    hooks.rolling = [registry = registry_.get()] {
      return registry->engine_status() == episodes::EnginePhase::kRolling;
    };
    hooks.ceiling = [registry = registry_.get()] { return registry->options().max_env_worker; };
    hooks.apply = [registry = registry_.get()](int64_t cap) { registry->set_admission_cap(cap); };
    admission_ = std::make_unique<engine_control::AdmissionLoop>(
        std::move(hooks), engine_control::AdmissionOptions{}, std::chrono::milliseconds(1000));
    ctx_->admission = admission_.get();
  }
}

SwarmServer::~SwarmServer() {
  stop();
  shutdown(/*save_checkpoint=*/false);
}

uint16_t SwarmServer::port() const { return http_->port(); }

std::string SwarmServer::url() const {
  return fmt::format("http://{}:{}", url_host(options_.host), port());
}

void SwarmServer::handle_signals() {
  if (signals_) return;
  signals_ =
      std::make_unique<StopSignals>([this](int signal, int nth) { on_stop_signal(signal, nth); });
}

void SwarmServer::on_stop_signal(int signal, int nth) {
  const std::string name = stop_signal_name(signal);
  if (nth == 1 && !stopping_.load()) {
    {
      std::lock_guard lock(at_once_mu_);
      lost_at_once_ = ", without saving the steps trained since the last checkpoint";
    }
    say(name +
        ": stopping: requests in flight finish, then the steps trained since the last checkpoint "
        "are saved (a second signal stops at once, without saving)");
    stop();
    return;
  }
  std::string lost;
  {
    std::lock_guard lock(at_once_mu_);
    lost = lost_at_once_;
  }
  say(fmt::format("{} again: stopping at once{}", name, lost));
  std::_Exit(128 + signal);  // no destructor may wait on the engine; it dies with us (PDEATHSIG)
}

void SwarmServer::say(const std::string& line) const {
  if (say_) {
    say_(line);
  } else {
    log().info("{}", line);
  }
}

StartReport SwarmServer::start() {
  StartReport report;
  report.notes = store_notes_;
  ctx_->resume(recovered_);
  if (!options_.conf.empty()) {
    if (registry_->engine_status() == episodes::EnginePhase::kOffline) {
      report.config_warnings =
          ctx_->sync_train_config(read_file(options_.conf), options_.conf.string());
    } else {
      const std::string note = "--conf " + options_.conf.string() +
                               " ignored: the resumed engine runs the stored config";
      verbose_->add("swarm", note);
      report.notes.push_back(note);
    }
  }
  http_->start();
  return report;
}

void SwarmServer::wait() {
  http_->wait();
  shutdown(/*save_checkpoint=*/true);
}

void SwarmServer::stop() {
  stopping_ = true;
  std::lock_guard lock(http_mu_);
  if (http_) http_->stop();
}

void SwarmServer::save_trained_steps() {
  const std::optional<int64_t> unsaved = batches_->unsaved_version();
  const fs::path latest = supervisor_->latest_checkpoint_dir();
  if (!unsaved) {
    {
      std::lock_guard lock(at_once_mu_);
      lost_at_once_.clear();
    }
    say(latest.empty() ? "no step was trained: no checkpoint to save"
                       : "no step trained since the last checkpoint (" + latest.string() +
                             "): nothing to save");
    return;
  }
  const std::string resume_from =
      latest.empty() ? "from the model" : "from the last checkpoint, " + latest.string();
  {
    std::lock_guard lock(at_once_mu_);  // before the line: a signal sent on reading it says this
    lost_at_once_ = fmt::format(
        ", without the checkpoint of step {} (--resume continues {} and trains the steps after it "
        "again from the stored episodes)",
        *unsaved, resume_from);
  }
  say(fmt::format("saving a checkpoint of step {} (a second signal stops at once, without it)",
                  *unsaved));
  try {
    if (auto saved = batches_->save_checkpoint("the front stops")) {
      say(fmt::format(
          "checkpoint of step {} saved in {} (ajet-swarm start --resume continues from it)",
          saved->policy_version, saved->dir.string()));
    } else {
      say(fmt::format(
          "step {} is not saved: the engine is not running ({}); --resume continues {} "
          "and trains the steps after it again from the stored episodes",
          *unsaved, episodes::engine_phase_name(registry_->engine_status()), resume_from));
    }
  } catch (const std::exception& e) {
    say(
        fmt::format("the checkpoint of step {} failed: {}; --resume continues {} and trains the "
                    "steps after it again from the stored episodes",
                    *unsaved, e.what(), resume_from));
  }
  std::lock_guard lock(at_once_mu_);
  lost_at_once_.clear();
}

void SwarmServer::shutdown(bool save_checkpoint) {
  if (shut_down_) return;
  shut_down_ = true;
  stopping_ = true;
  janitor_.reset();
  if (ctx_) ctx_->admission = nullptr;
  admission_.reset();  // its status calls end before the engine goes
  asker_.reset();      // questions to coordinators in flight are abandoned, not waited for
  batches_->stop();    // a step in flight finishes: it is among the steps saved next
  if (save_checkpoint) save_trained_steps();
  batches_.reset();
  supervisor_
      ->stop();   // the engine goes (in-flight calls get their error); the store keeps its status
  pool_.reset();  // finishes queued work
  store_->flush().get();  // end_episode answers waiting for a commit go out while the server exists
  metrics_->flush();      // and /log_metrics answers
  {
    std::lock_guard lock(http_mu_);
    http_.reset();  // stopped already (wait() returned); now nothing can answer any more
  }
  supervisor_.reset();
  registry_.reset();  // waits for its pending store callbacks
  metrics_.reset();   // writes the queued metrics (the registry's last batch numbers too)
  store_->flush().get();
  store_.reset();
}

}  // namespace ajet::swarm
