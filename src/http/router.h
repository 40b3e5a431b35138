// Routes requests to handlers by method and path: exact paths ("/health") and `{name}` path
// parameters ("/episodes/{episode_uuid}"). Unknown path → 404, known path with another method →
// 405 with `Allow`; both carry the OpenAI error shape. Each route may check a request's head before
// its body is read (a credential) and name its own body limit (check_head(): the server's
// HeadCheck). Built once, then read-only (thread-safe). An observer (observe()) learns each
// request's route pattern, status and duration, for metrics; the Router knows nothing of what it
// does with them.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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
// ("/episodes/{episode_uuid}"), never the raw path, so a label made of it stays bounded; `method`
// is as sent. `elapsed` runs from dispatch to the response handed to the server; for a streamed
// body, to the stream's end (its last chunk produced, or its cancellation when the client went
// away).
struct RouteOutcome {
  std::string_view route;
  std::string_view method;
  int status = 0;
  std::chrono::steady_clock::duration elapsed{};
};
// Called once per request, on whichever thread answered or ended its stream (an I/O thread, a pool
// thread, an engine reader thread): it must be quick and thread-safe, and must not throw.
using RouteObserver = std::function<void(const RouteOutcome&)>;

// What a route asks of its requests before their bodies are read.
struct RouteOptions {
  // The most body bytes the server reads for this route (413 naming the limit beyond; a declared
  // Content-Length is refused before any byte of the body is read). nullopt: the router's default
  // (set_defaults), else the server's max_body_bytes.
  std::optional<size_t> max_body_bytes;
  std::string limit_name;  // named in that 413 with the limit: how to change it ("--max-json-mb")
  ErrorShape error_shape;  // the route's error body for the server's 413/503 (null: the default)
  // Judges the head (method, path, headers) before the body is read: an answer refuses the request
  // now (a missing credential: 401) and its body is never read. Runs on an I/O thread for every
  // request of the route: quick, non-blocking, thread-safe.
  std::function<std::optional<Response>(const RequestHead&)> check_head;
};

class Router {
 public:
  // Registers `handler` for `method` (exact, e.g. "POST") on `pattern`. A `{name}` segment matches
  // one non-empty path segment and lands (percent-decoded) in request.path_params[name]. Exact
  // patterns win over parameterised ones; among those, the first registered wins. HEAD requests
  // use the GET handler (the server sends no body). A duplicate registration throws
  // kInvalidArgument.
  Router& add(std::string_view method, std::string_view pattern, Handler handler,
              RouteOptions options = {});
  Router& get(std::string_view pattern, Handler handler, RouteOptions options = {}) {
    return add("GET", pattern, std::move(handler), std::move(options));
  }
  Router& post(std::string_view pattern, Handler handler, RouteOptions options = {}) {
    return add("POST", pattern, std::move(handler), std::move(options));
  }
  // max_body_bytes, limit_name and error_shape for every route (registered before or after) that
  // names none of its own; check_head is not defaulted.
  Router& set_defaults(RouteOptions defaults);

  // The HeadCheck of a server serving this router: 404/405 for no route, the route's check_head,
  // else the route's body rules. Answers given here are reported to the observer too.
  HeadVerdict check_head(const RequestHead& head) const;

  // Reports every request from now on to `observer` (one observer; set it before serving). Without
  // one, dispatching adds nothing per request.
  Router& observe(RouteObserver observer);

  // Dispatches; a Router is itself a Handler: HttpServer(options, router).
  void operator()(Request request, Respond respond) const;

 private:
  struct Route {
    std::string method;
    Handler handler;
    RouteOptions options;
    std::shared_ptr<const BodyRules> body;  // options merged with the defaults; null: the server's
  };
  struct Methods {
    std::vector<Route> routes;
    const Route* find(std::string_view method) const;
    std::string allow() const;  // "GET, POST"
  };
  struct Pattern {
    std::string text;
    std::vector<std::string> segments;  // literal, or "{name}"
    Methods methods;
  };
  static void dispatch(const Methods& methods, Request request, Respond respond);
  // The methods registered for `path` and the pattern that matched (nullptr: none); fills `params`
  // (when given) from the pattern's `{name}` segments.
  std::pair<const Methods*, std::string_view> match(
      std::string_view path, std::map<std::string, std::string>* params) const;
  // dispatch() through a Respond that reports to the observer (404 for methods == nullptr).
  void observed(const Methods* methods, std::string_view route, Request request,
                Respond respond) const;
  HeadVerdict answered_at_head(std::string_view route, std::string_view method,
                               Response response) const;
  std::shared_ptr<const BodyRules> body_rules(const RouteOptions& options) const;
  void rebuild_body_rules();

  struct PathHash {  // lookups by string_view, without a copy
    using is_transparent = void;
    size_t operator()(std::string_view path) const { return std::hash<std::string_view>{}(path); }
  };
  std::unordered_map<std::string, Methods, PathHash, std::equal_to<>> exact_;
  std::vector<Pattern> patterns_;
  RouteOptions defaults_;
  // Shared with the requests in flight: a late answer may come after the Router is gone.
  std::shared_ptr<const RouteObserver> observer_;
};

}  // namespace ajet::http
