#include "http/router.h"

#include "common/error.h"
#include "http/response.h"

namespace ajet::http {

namespace {

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

const Handler* Router::Methods::find(std::string_view method) const {
  for (const auto& [m, handler] : handlers) {
    if (m == method) return &handler;
  }
  if (method == "HEAD") return find("GET");
  return nullptr;
}

std::string Router::Methods::allow() const {
  std::string out;
  for (const auto& [m, handler] : handlers) {
    if (!out.empty()) out += ", ";
    out += m;
  }
  return out;
}

Router& Router::add(std::string_view method, std::string_view pattern, Handler handler) {
  if (pattern.empty() || pattern.front() != '/') {
    invalid_argument("route pattern '" + std::string(pattern) + "' must start with '/'");
  }
  if (method.empty()) invalid_argument("route '" + std::string(pattern) + "' needs a method");
  if (!handler) invalid_argument("route " + std::string(method) + " " + std::string(pattern) + " has no handler");
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
  for (const auto& [m, h] : methods->handlers) {
    if (m == method) {
      invalid_argument("route " + std::string(method) + " " + std::string(pattern) + " is registered twice");
    }
  }
  methods->handlers.emplace_back(std::string(method), std::move(handler));
  return *this;
}

void Router::dispatch(const Methods& methods, Request request, Respond respond) {
  const Handler* handler = methods.find(request.method);
  if (!handler) {
    Response response = error_response(
        405, "method " + request.method + " is not allowed on " + request.path + " (allowed: " + methods.allow() + ")",
        "invalid_request_error", "method_not_allowed");
    response.headers.add("Allow", methods.allow());
    respond(std::move(response));
    return;
  }
  (*handler)(std::move(request), std::move(respond));
}

void Router::operator()(Request request, Respond respond) const {
  if (auto it = exact_.find(request.path); it != exact_.end()) {
    dispatch(it->second, std::move(request), std::move(respond));
    return;
  }
  if (!patterns_.empty()) {
    std::vector<std::string_view> segments = split_path(request.path);
    for (const Pattern& p : patterns_) {
      if (p.segments.size() != segments.size()) continue;
      bool match = true;
      for (size_t i = 0; i < segments.size() && match; ++i) {
        const std::string& want = p.segments[i];
        match = is_param(want) ? !segments[i].empty() : want == segments[i];
      }
      if (!match) continue;
      for (size_t i = 0; i < segments.size(); ++i) {
        const std::string& want = p.segments[i];
        if (is_param(want)) {
          request.path_params[want.substr(1, want.size() - 2)] = percent_decode(segments[i], false);
        }
      }
      dispatch(p.methods, std::move(request), std::move(respond));
      return;
    }
  }
  respond(error_response(404, "no route for " + request.method + " " + request.path, "not_found_error", "not_found"));
}

}  // namespace ajet::http
