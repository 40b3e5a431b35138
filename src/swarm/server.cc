#include "swarm/server.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "http/router.h"
#include "http/server.h"
#include "store/store.h"
#include "swarm/batch_runner.h"
#include "swarm/janitor.h"
#include "swarm/openai_call.h"
#include "swarm/registry.h"
#include "swarm/routes.h"
#include "swarm/supervisor.h"
#include "swarm/tracker_map.h"
#include "swarm/verbose_log.h"
#include "swarm/work_pool.h"

namespace ajet::swarm {

namespace fs = std::filesystem;

fs::path sibling_engine_binary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "ajet-engine";
  return self.parent_path() / "ajet-engine";
}

namespace {

std::string url_host(const std::string& host) {
  if (host == "0.0.0.0" || host.empty()) return "127.0.0.1";
  if (host == "::") return "[::1]";
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

}  // namespace

SwarmServer::SwarmServer(ServerOptions options) : options_(std::move(options)) {
  fs::create_directories(options_.server_dir);
  options_.server_dir = fs::absolute(options_.server_dir);
  if (options_.store_path.empty()) options_.store_path = options_.server_dir / "swarm.sqlite";
  if (options_.engine_binary.empty()) options_.engine_binary = sibling_engine_binary();

  store_ = std::make_unique<store::Store>(options_.store_path);
  const std::string secret = store_->load_or_create_secret();
  recovered_ = store_->recover();

  verbose_ = std::make_unique<VerboseLog>();
  latest_ = std::make_unique<LatestCall>();
  trackers_ = std::make_unique<TrackerMap>();
  registry_ = std::make_unique<Registry>(RegistryOptions{}, EpisodeKeySigner(secret), store_.get());
  pool_ = std::make_unique<WorkPool>(2, "swarm work pool");
  SupervisorOptions sup;
  sup.default_engine = options_.engine_binary;
  sup.boot_timeout = std::chrono::milliseconds(int64_t(options_.engine_boot_timeout_s * 1000));
  sup.engine_ranks = options_.engine_ranks;
  sup.stop_grace = std::chrono::milliseconds(int64_t(options_.engine_stop_grace_s * 1000));
  supervisor_ = std::make_unique<EngineSupervisor>(sup, *registry_, *verbose_);
  ctx_ = std::make_unique<ServerContext>(options_, *store_, *registry_, *verbose_, *pool_, *supervisor_, *trackers_,
                                         *latest_);
  TrackerMap* trackers = trackers_.get();
  VerboseLog* verbose = verbose_.get();
  registry_->set_hooks(RegistryHooks{
      [trackers](const EpisodeClosed& closed) { trackers->drop(closed.episode_uuid); },
      [verbose](const std::string& tag, const std::string& message) { verbose->add(tag, message, false); }});

  http::Router router;
  add_command_routes(router, *ctx_);
  add_engine_routes(router, *ctx_);
  add_openai_routes(router, *ctx_);
  http::ServerOptions http_options;
  http_options.host = options_.host;
  http_options.port = options_.port;
  http_options.io_threads = options_.io_threads;
  http_options.max_body_bytes = options_.max_body_bytes;
  http_ = std::make_unique<http::HttpServer>(http_options, std::move(router));
  ctx_->base_url = url() + "/v1";

  ServerContext* ctx = ctx_.get();
  EngineSupervisor* supervisor = supervisor_.get();
  store::Store* store = store_.get();
  TrainerLink link;
  link.model = [ctx] { return ctx->model(); };
  link.engine = [supervisor] { return supervisor->client(); };
  link.engine_ranks = [supervisor] { return supervisor->rank_clients(); };
  link.settings = [ctx] { return ctx->train_settings(); };
  link.checkpoint_saved = [supervisor, store](const fs::path& dir) {
    supervisor->set_latest_checkpoint(dir);
    store->put_state(store::kStateLatestCheckpoint, dir.string());  // a restarted front resumes the engine from it
  };
  batches_ = std::make_unique<BatchRunner>(*registry_, *store_, *verbose_, std::move(link));
  ctx_->batches = batches_.get();
  janitor_ = std::make_unique<Janitor>(*registry_,
                                       std::chrono::milliseconds(int64_t(options_.janitor_interval_s * 1000)));
}

SwarmServer::~SwarmServer() {
  stop();
  shutdown();
}

uint16_t SwarmServer::port() const { return http_->port(); }

std::string SwarmServer::url() const { return fmt::format("http://{}:{}", url_host(options_.host), port()); }

void SwarmServer::handle_signals() { http_->handle_signals(); }

void SwarmServer::start() {
  ctx_->resume(recovered_);
  if (!options_.conf.empty()) {
    if (registry_->engine_status() == EngineStatus::kOffline) {
      ctx_->sync_train_config(read_file(options_.conf));
    } else {
      verbose_->add("swarm", "--conf " + options_.conf.string() + " ignored: the resumed engine runs the stored config");
    }
  }
  http_->start();
}

void SwarmServer::wait() {
  http_->wait();
  shutdown();
}

void SwarmServer::stop() {
  if (http_) http_->stop();
}

void SwarmServer::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  janitor_.reset();
  batches_.reset();
  supervisor_->stop();  // the engine goes (in-flight calls get their error); the store keeps its status
  pool_.reset();        // finishes queued work
  store_->flush().get();  // end_episode answers waiting for a commit go out while the server exists
  http_.reset();        // stopped already (wait() returned); now nothing can answer any more
  supervisor_.reset();
  registry_.reset();    // waits for its pending store callbacks
  store_->flush().get();
  store_.reset();
}

}  // namespace ajet::swarm
