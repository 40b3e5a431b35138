// Routes requests to handlers by method and path: exact paths ("/health") and `{name}` path
// parameters ("/episodes/{episode_uuid}"). Unknown path → 404, known path with another method →
// 405 with `Allow`; both carry the OpenAI error shape. Built once, then read-only (thread-safe).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/message.h"

namespace ajet::http {

class Router {
 public:
  // Registers `handler` for `method` (exact, e.g. "POST") on `pattern`. A `{name}` segment matches
  // one non-empty path segment and lands (percent-decoded) in request.path_params[name]. Exact
  // patterns win over parameterised ones; among those, the first registered wins. HEAD requests
  // use the GET handler (the server sends no body). A duplicate registration throws kInvalidArgument.
  Router& add(std::string_view method, std::string_view pattern, Handler handler);
  Router& get(std::string_view pattern, Handler handler) { return add("GET", pattern, std::move(handler)); }
  Router& post(std::string_view pattern, Handler handler) { return add("POST", pattern, std::move(handler)); }

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

  std::unordered_map<std::string, Methods> exact_;
  std::vector<Pattern> patterns_;
};

}  // namespace ajet::http
