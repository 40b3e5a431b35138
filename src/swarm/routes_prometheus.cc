// GET /metrics and GET /version (routes_prometheus.h). A scrape reads the front's figures on the
// I/O thread (each behind one short lock, like every command route), then, when an engine is
// connected, asks it for its `status` on the scrape thread and answers from there.
#include "swarm/routes_prometheus.h"

#include <memory>
#include <optional>

#include "common/build_info.h"
#include "common/log.h"
#include "common/prometheus_text.h"
#include "engine_control/supervisor.h"
#include "episodes/registry.h"
#include "http/response.h"
#include "rpc/frame.h"
#include "rpc/messages.h"
#include "store/store.h"
#include "swarm/front_metrics.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"
#include "tracking/episode_json.h"

namespace ajet::swarm {

namespace {

// The engine's `status` reply body, or nullopt when it failed or took longer than `timeout`.
std::optional<Json> engine_status_reply(const std::shared_ptr<rpc::Client>& engine,
                                        std::chrono::milliseconds timeout) {
  try {
    rpc::Client::CallResult r = engine->call(rpc::make_status_request(), timeout);
    if (r.done.body.is_object()) return std::move(r.done.body);
  } catch (const std::exception& e) {
    log().debug("GET /metrics: the engine's status call failed: {}", e.what());
  }
  return std::nullopt;
}

http::Response exposition(prometheus::TextBuilder& out) {
  return http::text_response(out.take(), 200, prometheus::kContentType);
}

}  // namespace

void add_prometheus_handlers(RouteHandlers& out, http::Router& router, ServerContext& ctx,
                             const http::HttpServer& server) {
  auto http_metrics = std::make_shared<HttpMetrics>();
  router.observe(
      [http_metrics](const http::RouteOutcome& outcome) { http_metrics->record(outcome); });
  // One thread: concurrent scrapes queue behind each other, so a hung engine costs each at most
  // kEngineStatusTimeout and never more than one waiting status call at a time.
  auto scrapes = std::make_shared<WorkPool>(1, "metrics scrape");

  out.add("prometheus_metrics",
          [&ctx, &server, http_metrics, scrapes](http::Request, http::Respond respond) {
            prometheus::TextBuilder out;
            write_process_figures(out);
            write_build_info(out);
            http_metrics->write(out, server.stats());
            FrontFigures front;
            front.registry = ctx.registry.figures();
            front.calls = ctx.call_metrics.snapshot();
            front.work_pool_queued = ctx.pool.queued();
            front.store_queued_writes = ctx.store.queued_writes();
            write_front_figures(out, front);
            if (const engine_control::AdmissionLoop* admission = ctx.admission.load())
              write_admission_figures(out, admission->figures());
            if (ctx.supervisor.remote())
              write_replica_group_figures(out, ctx.supervisor.engines_json());
            std::shared_ptr<rpc::Client> engine = ctx.supervisor.client();
            std::vector<std::shared_ptr<rpc::Client>> ranks = ctx.supervisor.rank_clients();
            const engine_control::RoutePolicy policy = ctx.router.policy();
            engine_control::RouterFigures routed = ctx.router.figures();
            if (!engine) {
              write_engine_figures(out, std::nullopt);
              write_replica_figures(out, policy, routed, {});
              respond(exposition(out));
              return;
            }
            // The task holds nothing of the front but the engines' clients: it may run after the
            // server stopped.
            scrapes->post([out = std::move(out), engine, ranks = std::move(ranks), policy,
                           routed = std::move(routed), respond]() mutable {
              std::optional<Json> first = engine_status_reply(engine, kEngineStatusTimeout);
              write_engine_figures(out, first);
              std::vector<std::optional<Json>> statuses;
              for (size_t i = 0; i < ranks.size(); ++i) {
                if (ranks[i] == engine) {
                  statuses.push_back(first);
                } else {
                  statuses.push_back(ranks[i] ? engine_status_reply(ranks[i], kEngineStatusTimeout)
                                              : std::nullopt);
                }
              }
              write_replica_figures(out, policy, routed, statuses);
              respond(exposition(out));
            });
          });

  out.add("version", [](http::Request, http::Respond respond) {
    const BuildInfo& b = build_info();
    respond(http::json_response(Json{{"version", std::string(b.version)},
                                     {"git_commit", std::string(b.git_commit)},
                                     {"build_type", std::string(b.build_type)},
                                     {"protocol",
                                      {{"swarm_api", kSwarmApiVersion},
                                       {"engine_rpc", rpc::kProtocolVersion},
                                       {"episode_json", tracking::kEpisodeJsonVersion}}}}));
  });
}

}  // namespace ajet::swarm
