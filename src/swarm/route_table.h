// Every HTTP route of the front in one place (route_table.cc): method, path, the name of its
// handler, what it checks before the body and a line on what it is for. The handlers stay in their
// files (routes_*.cc), each adding itself to RouteHandlers under its name; the server registers the
// routes by walking the table (add_routes), so a route exists exactly when it has a row.
// docs/protocol.md describes each route; this table is the index into the code.
#pragma once

#include <span>
#include <string_view>

#include "http/router.h"

namespace ajet::swarm {

class RouteHandlers;

// What a route asks for before its body is read (docs/protocol.md "Authentication").
enum class RouteAuth {
  kNone,            // nothing (the admin token may widen what a view shows)
  kAdmin,           // the admin token, when one is configured
  kEpisodeCommand,  // the episode's key or the admin token (--allow-keyless-episode-commands: none)
  kEpisodeKey,      // an episode key this server signed (the OpenAI / Anthropic API)
};
std::string_view route_auth_name(
    RouteAuth auth);  // "none" | "admin" | "episode command" | "episode key"

struct Route {
  std::string_view method;   // "GET" | "POST" (a GET route answers HEAD too)
  std::string_view path;     // a `{name}` segment matches one path segment (http/router.h)
  std::string_view handler;  // its name in RouteHandlers; two paths may share one (an alias)
  RouteAuth auth;
  std::string_view purpose;
};

// The front's routes in registration order (the first registered wins among equal patterns).
std::span<const Route> route_table();

// Registers every route of the table on `router` with its handler from `handlers`. Throws
// Error(kInternal) for a row whose handler was never added, or a handler that no row names.
void add_routes(http::Router& router, const RouteHandlers& handlers);

}  // namespace ajet::swarm
