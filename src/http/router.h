// Routes requests to handlers by method and path: exact paths ("/health") and `{name}` path
// parameters ("/episodes/{episode_uuid}"). Unknown path → 404, known path with another method →
// 405 with `Allow`; both carry the OpenAI error shape. Built once, then read-only (thread-safe).
// An observer (observe()) learns each request's route pattern, status and duration, for metrics; the
// Router knows nothing of what it does with them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/message.h"

namespace ajet::http {

// The `route` of a request no pattern matched (answered 404).
inline constexpr std::string_view kUnmatchedRoute = "unmatched";

// One request as the Router saw it. `route` is the registered pattern that matched
// ("/episodes/{episode_uuid}"), never the raw path, so a label made of it stays bounded; `method` is
// as sent. `elapsed` runs from dispatch to the response handed to the server; for a streamed body,
// to the stream's end (its last chunk produced, or its cancellation when the client went away).
struct RouteOutcome {
  std::string_view route;
  std::string_view method;
  int status = 0;
  std::chrono::steady_clock::duration elapsed{};
};
// Called once per request, on whichever thread answered or ended its stream (an I/O thread, a pool
// thread, an engine reader thread): it must be quick and thread-safe, and must not throw.
using RouteObserver = std::function<void(const RouteOutcome&)>;

class Router {
 public:
  // Registers `handler` for `method` (exact, e.g. "POST") on `pattern`. A `{name}` segment matches
  // one non-empty path segment and lands (percent-decoded) in request.path_params[name]. Exact
  // patterns win over parameterised ones; among those, the first registered wins. HEAD requests
  // use the GET handler (the server sends no body). A duplicate registration throws kInvalidArgument.
  Router& add(std::string_view method, std::string_view pattern, Handler handler);
  Router& get(std::string_view pattern, Handler handler) { return add("GET", pattern, std::move(handler)); }
  Router& post(std::string_view pattern, Handler handler) { return add("POST", pattern, std::move(handler)); }

  // Reports every request from now on to `observer` (one observer; set it before serving). Without
  // one, dispatching adds nothing per request.
  Router& observe(RouteObserver observer);

  // Dispatches; a Router is itself a Handler: HttpServer(options, router).
  void operator()(Request request, Respond respond) const;

 private:
  struct Methods {
    std::vector<std::pair<std::string, Handler>> handlers;
    const Handler* find(std::string_view method) const;
    std::string allow() const;  // "GET, POST"
  };
  struct Pattern {
    std::string text;
    std::vector<std::string> segments;  // literal, or "{name}"
    Methods methods;
  };
  static void dispatch(const Methods& methods, Request request, Respond respond);
  // The methods registered for `request`'s path and the pattern that matched (nullptr: none); fills
  // request.path_params.
  std::pair<const Methods*, std::string_view> match(Request& request) const;
  // dispatch() through a Respond that reports to the observer (404 for methods == nullptr).
  void observed(const Methods* methods, std::string_view route, Request request, Respond respond) const;

  std::unordered_map<std::string, Methods> exact_;
  std::vector<Pattern> patterns_;
  // Shared with the requests in flight: a late answer may come after the Router is gone.
  std::shared_ptr<const RouteObserver> observer_;
};

}  // namespace ajet::http
