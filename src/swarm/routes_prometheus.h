// GET /metrics (Prometheus text format 0.0.4, families in front_metrics.h) and GET /version of the
// swarm front. Both are open like /health: they carry counts and names, never episode content or
// keys. A scrape never waits on a slow or dead engine for more than kEngineStatusTimeout, and never
// on an HTTP I/O thread: the engine's `status` call runs on a scrape thread of these routes' own.
#pragma once

#include <chrono>

#include "http/router.h"
#include "http/server.h"
#include "swarm/server_context.h"

namespace ajet::swarm {

// How long a scrape waits for the engine's status reply; past it, ajet_engine_up is 0 for that
// scrape.
inline constexpr std::chrono::milliseconds kEngineStatusTimeout{1'000};

// The swarm HTTP API's version in GET /version: the routes and fields of docs/protocol.md. Raised
// when a change could break a client that worked before (a field removed or retyped, a route gone).
inline constexpr int kSwarmApiVersion = 1;

// Adds the handlers of GET /metrics (prometheus_metrics) and GET /version (version), and makes
// `router` report every request to the metrics (Router::observe: the router must have no other
// observer). `server` is the one serving `router`; both must outlive the routes' requests.
class RouteHandlers;
void add_prometheus_handlers(RouteHandlers& out, http::Router& router, ServerContext& ctx,
                             const http::HttpServer& server);

}  // namespace ajet::swarm
