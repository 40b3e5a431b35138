// The metric families of the swarm front's GET /metrics (docs/operations.md "Prometheus metrics"):
// HTTP requests per route, the registry's episodes and batch progress, LLM calls and tokens, queue
// depths, the engine's own figures (from its `status` reply) and the process. Each writer turns a
// plain snapshot into Prometheus text; none of them locks anything but its own HttpMetrics, blocks,
// or talks to the engine (routes_prometheus.cc gathers the snapshots).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "common/json.h"
#include "common/prometheus_text.h"
#include "engine_control/admission.h"
#include "engine_control/replica_router.h"
#include "episodes/registry.h"
#include "http/router.h"
#include "http/server.h"
#include "openai/call_metrics.h"

namespace ajet::swarm {

// Requests per (route pattern, method, status) and their durations per route, fed by the Router's
// observer from any thread. Labels stay bounded: routes are the registered patterns (or
// "unmatched"), methods outside the usual seven count as "other".
class HttpMetrics {
 public:
  void record(const http::RouteOutcome& outcome);
  // ajet_http_requests_total, ajet_http_request_duration_seconds, ajet_http_connections_open,
  // ajet_http_connections_total.
  void write(prometheus::TextBuilder& out, const http::ServerStats& server) const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t>
      requests_;                                            // (route, method, status)
  std::map<std::string, prometheus::Histogram> durations_;  // route → seconds
};

// What the front knows without asking the engine; each part is read with one short lock.
struct FrontFigures {
  episodes::RegistryFigures registry;
  openai::CallMetrics::Snapshot calls;
  size_t work_pool_queued = 0;  // the front's WorkPool (store reads, archives, engine start/stop)
  size_t store_queued_writes = 0;  // the store's writer queue
};

// ajet_build_info.
void write_build_info(prometheus::TextBuilder& out);
// Engine status, global step, episodes, batch progress, clients, LLM calls and tokens, queues.
void write_front_figures(prometheus::TextBuilder& out, const FrontFigures& figures);
// ajet_engine_up (1 with a status reply, else 0) and, with a reply, the engine's figures:
// sequences, KV cache blocks, token counters (engine/service.cc EngineService::status()). A field
// the reply lacks (an older engine, the echo test double) leaves its family out.
void write_engine_figures(prometheus::TextBuilder& out, const std::optional<Json>& status);
// Engine replicas on other hosts (GET /engines' body, engine_control::RemoteGroup::json): the
// group's generation and policy version, and per replica slot whether it is a member, whether it
// is served calls, and how often it was lost and joined.
void write_replica_group_figures(prometheus::TextBuilder& out, const Json& group);

// With several engine replicas: the route policy, calls routed to each replica and its sequences in
// flight, episodes placed and moved, and each replica's own token counters from its `status` reply
// (`statuses` in rank order, nullopt for one that did not answer).
void write_replica_figures(prometheus::TextBuilder& out, engine_control::RoutePolicy policy,
                           const engine_control::RouterFigures& routed,
                           const std::vector<std::optional<Json>>& statuses);
// The KV-pressure admission cap on claimed episodes, the pool size it stays under, the fullest
// replica's KV usage at the last reading, and the controller's decisions.
void write_admission_figures(prometheus::TextBuilder& out,
                             const engine_control::AdmissionFigures& figures);
// process_*: resident and virtual memory, CPU seconds, start time, open and maximum file
// descriptors, threads (from /proc/self; families that cannot be read are left out).
void write_process_figures(prometheus::TextBuilder& out);

}  // namespace ajet::swarm
