#include "http/router.h"

#include <atomic>

#include "common/error.h"
#include "http/response.h"

namespace ajet::http {

namespace {

using ObserverClock = std::chrono::steady_clock;

// One request's report to the observer, made exactly once, by whichever path ends the request
// first.
class RouteReport {
 public:
  RouteReport(std::shared_ptr<const RouteObserver> observer, std::string_view route,
              std::string method)
      : observer_(std::move(observer)),
        route_(route),
        method_(std::move(method)),
        start_(ObserverClock::now()) {}

  void done(int status) {
    if (reported_.exchange(true, std::memory_order_acq_rel)) return;
    (*observer_)(RouteOutcome{route_, method_, status, ObserverClock::now() - start_});
  }

 private:
  std::shared_ptr<const RouteObserver> observer_;
  std::string route_;  // a copy: the Router may be gone when a late answer comes
  std::string method_;
  ObserverClock::time_point start_;
  std::atomic<bool> reported_{false};
};

// The deliver a reported stream hands on: the end of the body (nullopt, also what a dropped deliver
// delivers) is reported before the server sees it, so a client that read the whole body finds the
// request counted.
class EndOfStreamWatch final : public detail::OnceTarget<Chunk> {
 public:
  EndOfStreamWatch(Deliver deliver, std::shared_ptr<RouteReport> report, int status)
      : deliver_(std::move(deliver)), report_(std::move(report)), status_(status) {}
  void accept(Chunk chunk) override {
    if (!chunk) report_->done(status_);
    deliver_(std::move(chunk));
  }

 private:
  Deliver deliver_;
  std::shared_ptr<RouteReport> report_;
  int status_;
};

// A streamed body, reported when it ends, is cancelled (the client went away), or is dropped unread
// (a HEAD request).
class ReportedStream final : public BodyStream {
 public:
  ReportedStream(std::shared_ptr<BodyStream> inner, std::shared_ptr<RouteReport> report, int status)
      : inner_(std::move(inner)), report_(std::move(report)), status_(status) {}
  ~ReportedStream() override { report_->done(status_); }
  void next(Deliver deliver) override {
    inner_->next(Deliver(std::make_shared<EndOfStreamWatch>(std::move(deliver), report_, status_)));
  }
  void cancel() override {
    inner_->cancel();
    report_->done(status_);
  }

 private:
  std::shared_ptr<BodyStream> inner_;
  std::shared_ptr<RouteReport> report_;
  int status_;
};

// The Respond a handler gets under an observer: a plain response is reported before the server gets
// it (so the client sees it counted), a streamed one when its stream ends.
class ReportedRespond final : public detail::OnceTarget<Response> {
 public:
  ReportedRespond(Respond respond, std::shared_ptr<RouteReport> report)
      : respond_(std::move(respond)), report_(std::move(report)) {}
  void accept(Response response) override {
    if (response.stream) {
      response.stream =
          std::make_shared<ReportedStream>(std::move(response.stream), report_, response.status);
    } else {
      report_->done(response.status);
    }
    respond_(std::move(response));
  }

 private:
  Respond respond_;
  std::shared_ptr<RouteReport> report_;
};

// "/a/b/" → {"a", "b", ""}: a trailing slash is a segment of its own, so "/x/" does not match "/x".
std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  for (;;) {
    size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool is_param(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

const Router::Route* Router::Methods::find(std::string_view method) const {
  for (const Route& route : routes) {
    if (route.method == method) return &route;
  }
  if (method == "HEAD") return find("GET");
  return nullptr;
}

std::string Router::Methods::allow() const {
  std::string out;
  for (const Route& route : routes) {
    if (!out.empty()) out += ", ";
    out += route.method;
  }
  return out;
}

Router& Router::add(std::string_view method, std::string_view pattern, Handler handler,
                    RouteOptions options) {
  if (pattern.empty() || pattern.front() != '/') {
    invalid_argument("route pattern '" + std::string(pattern) + "' must start with '/'");
  }
  if (method.empty()) invalid_argument("route '" + std::string(pattern) + "' needs a method");
  if (!handler)
    invalid_argument("route " + std::string(method) + " " + std::string(pattern) +
                     " has no handler");
  std::vector<std::string_view> segments = split_path(pattern);
  bool has_param = false;
  for (std::string_view s : segments) {
    if (is_param(s)) {
      has_param = true;
    } else if (s.find('{') != std::string_view::npos || s.find('}') != std::string_view::npos) {
      invalid_argument("route pattern '" + std::string(pattern) + "': segment '" + std::string(s) +
                       "' must be a literal or a whole {name}");
    }
  }
  Methods* methods = nullptr;
  if (!has_param) {
    methods = &exact_[std::string(pattern)];
  } else {
    for (Pattern& p : patterns_) {
      if (p.text == pattern) methods = &p.methods;
    }
    if (!methods) {
      Pattern p;
      p.text = std::string(pattern);
      for (std::string_view s : segments) p.segments.emplace_back(s);
      patterns_.push_back(std::move(p));
      methods = &patterns_.back().methods;
    }
  }
  for (const Route& route : methods->routes) {
    if (route.method == method) {
      invalid_argument("route " + std::string(method) + " " + std::string(pattern) +
                       " is registered twice");
    }
  }
  std::shared_ptr<const BodyRules> body = body_rules(options);
  methods->routes.push_back(
      Route{std::string(method), std::move(handler), std::move(options), std::move(body)});
  return *this;
}

Router& Router::set_defaults(RouteOptions defaults) {
  defaults_ = std::move(defaults);
  rebuild_body_rules();
  return *this;
}

std::shared_ptr<const BodyRules> Router::body_rules(const RouteOptions& options) const {
  const RouteOptions& limit = options.max_body_bytes ? options : defaults_;
  const ErrorShape& shape = options.error_shape ? options.error_shape : defaults_.error_shape;
  if (!limit.max_body_bytes && !shape) return nullptr;  // the server's own rules
  auto rules = std::make_shared<BodyRules>();
  rules->max_body_bytes = limit.max_body_bytes;
  rules->limit_name = limit.limit_name;
  rules->error_shape = shape;
  return rules;
}

void Router::rebuild_body_rules() {
  for (auto& [path, methods] : exact_) {
    for (Route& route : methods.routes) route.body = body_rules(route.options);
  }
  for (Pattern& p : patterns_) {
    for (Route& route : p.methods.routes) route.body = body_rules(route.options);
  }
}

namespace {

Response method_not_allowed(std::string_view method, std::string_view path,
                            const std::string& allow) {
  Response response = error_response(405,
                                     "method " + std::string(method) + " is not allowed on " +
                                         std::string(path) + " (allowed: " + allow + ")",
                                     "invalid_request_error", "method_not_allowed");
  response.headers.add("Allow", allow);
  return response;
}

Response no_route(std::string_view method, std::string_view path) {
  return error_response(404, "no route for " + std::string(method) + " " + std::string(path),
                        "not_found_error", "not_found");
}

}  // namespace

void Router::dispatch(const Methods& methods, Request request, Respond respond) {
  const Route* route = methods.find(request.method);
  if (!route) {
    respond(method_not_allowed(request.method, request.path, methods.allow()));
    return;
  }
  route->handler(std::move(request), std::move(respond));
}

HeadVerdict Router::check_head(const RequestHead& head) const {
  auto [methods, pattern] = match(head.path, nullptr);
  if (!methods) return answered_at_head(pattern, head.method, no_route(head.method, head.path));
  const Route* route = methods->find(head.method);
  if (!route)
    return answered_at_head(pattern, head.method,
                            method_not_allowed(head.method, head.path, methods->allow()));
  if (route->options.check_head) {
    std::optional<Response> answer;
    try {
      answer = route->options.check_head(head);
    } catch (const Error& e) {
      answer = error_response(e);
    } catch (const std::exception& e) {
      answer = error_response(500, std::string("internal error: ") + e.what(), "server_error",
                              "internal");
    }
    if (answer) return answered_at_head(pattern, head.method, std::move(*answer));
  }
  return HeadVerdict{std::nullopt, route->body};
}

HeadVerdict Router::answered_at_head(std::string_view route, std::string_view method,
                                     Response response) const {
  if (observer_) (*observer_)(RouteOutcome{route, method, response.status, {}});
  return HeadVerdict{std::move(response), nullptr};
}

Router& Router::observe(RouteObserver observer) {
  if (!observer) invalid_argument("Router::observe needs an observer");
  observer_ = std::make_shared<const RouteObserver>(std::move(observer));
  return *this;
}

std::pair<const Router::Methods*, std::string_view> Router::match(
    std::string_view path, std::map<std::string, std::string>* params) const {
  if (auto it = exact_.find(path); it != exact_.end()) return {&it->second, it->first};
  if (!patterns_.empty()) {
    std::vector<std::string_view> segments = split_path(path);
    for (const Pattern& p : patterns_) {
      if (p.segments.size() != segments.size()) continue;
      bool matches = true;
      for (size_t i = 0; i < segments.size() && matches; ++i) {
        const std::string& want = p.segments[i];
        matches = is_param(want) ? !segments[i].empty() : want == segments[i];
      }
      if (!matches) continue;
      for (size_t i = 0; i < segments.size() && params; ++i) {
        const std::string& want = p.segments[i];
        if (is_param(want))
          (*params)[want.substr(1, want.size() - 2)] = percent_decode(segments[i], false);
      }
      return {&p.methods, p.text};
    }
  }
  return {nullptr, kUnmatchedRoute};
}

void Router::operator()(Request request, Respond respond) const {
  auto [methods, route] = match(request.path, &request.path_params);
  if (observer_) {
    observed(methods, route, std::move(request), std::move(respond));
  } else if (methods) {
    dispatch(*methods, std::move(request), std::move(respond));
  } else {
    respond(no_route(request.method, request.path));
  }
}

void Router::observed(const Methods* methods, std::string_view route, Request request,
                      Respond respond) const {
  auto report = std::make_shared<RouteReport>(observer_, route, request.method);
  // Our own handle keeps the reported Respond from counting as dropped while a throwing handler
  // unwinds: the exception's answer is given below, as the server would give it (connection.cc).
  Respond reported(std::make_shared<ReportedRespond>(std::move(respond), std::move(report)));
  if (!methods) {
    reported(no_route(request.method, request.path));
    return;
  }
  try {
    dispatch(*methods, std::move(request), reported);
  } catch (const Error& e) {
    reported(error_response(e));
    throw;  // the server logs it; its own answer is refused (already answered)
  } catch (const std::exception& e) {
    reported(error_response(500, std::string("internal error: ") + e.what(), "server_error",
                            "internal"));
    throw;
  } catch (...) {
    reported(error_response(500, "internal error", "server_error", "internal"));
    throw;
  }
}

}  // namespace ajet::http
