// What the front's routes ask of a request before its body is read (http::RouteOptions): the admin
// token, the episode key, and each route's body limit. These run on an I/O thread for every request
// of their route: an HMAC check or a string comparison, nothing that blocks.
#include <fmt/format.h>

#include "episodes/registry.h"
#include "http/response.h"
#include "openai/openai_errors.h"
#include "swarm/call_log.h"
#include "swarm/routes.h"

namespace ajet::swarm {

namespace {

http::ErrorShape command_shape() {
  return [](int status, const std::string& message, const std::string& code) {
    return openai::openai_error(status, message, code);
  };
}

}  // namespace

http::RouteOptions body_limit(size_t bytes, std::string limit_name) {
  http::RouteOptions options;
  options.max_body_bytes = bytes;
  options.limit_name = std::move(limit_name);
  options.error_shape = command_shape();
  return options;
}

http::RouteOptions command_body(const ServerContext& ctx) {
  if (ctx.options.max_json_body_bytes < kCommandBodyBytes) {
    return body_limit(ctx.options.max_json_body_bytes, "ajet-swarm start --max-json-mb");
  }
  return body_limit(kCommandBodyBytes, "the command API's fixed limit");
}

http::RouteOptions admin_only(const ServerContext& ctx, std::string what,
                              http::RouteOptions limit) {
  limit.check_head = [&ctx, what = std::move(what)](
                         const http::RequestHead& head) -> std::optional<http::Response> {
    if (ctx.admin_ok(head)) return std::nullopt;
    return openai::openai_error(
        401,
        fmt::format("{} needs the admin token: send Authorization: Bearer <token> (the token given "
                    "to ajet-swarm start --admin-token / AJET_ADMIN_TOKEN)",
                    what),
        "unauthenticated");
  };
  return limit;
}

http::RouteOptions episode_command(const ServerContext& ctx, std::string command,
                                   http::RouteOptions limit) {
  limit.check_head = [&ctx, command = std::move(command)](
                         const http::RequestHead& head) -> std::optional<http::Response> {
    if (ctx.admin_token_given(head)) return std::nullopt;
    const std::optional<std::string_view> key = head.headers.get("Authorization");
    try {
      // Which episode the key is for is known only from the body; here the key must be this
      // server's.
      std::string episode = "<the body's episode_uuid>";
      if (key) {
        try {
          episode = ctx.registry.signer().verify(*key).episode_uuid;
        } catch (const Error&) {
        }
      }
      episodes::check_episode_command_key(ctx.registry.signer(), key, episode, command,
                                          ctx.options.allow_keyless_episode_commands);
      return std::nullopt;
    } catch (const Error& e) {
      return openai::error_for(e);
    }
  };
  return limit;
}

http::RouteOptions episode_key_only(const ServerContext& ctx, bool anthropic, std::string route) {
  http::RouteOptions options =
      body_limit(ctx.options.max_json_body_bytes, "ajet-swarm start --max-json-mb");
  // The server's own refusals of the route (413 body over the limit, 503 over the body budget), in
  // the API's shape and logged like the route's other refusals.
  options.error_shape = [anthropic, route](int status, const std::string& message,
                                           const std::string& code) {
    log_refused_call(route, status, message);
    return anthropic ? openai::anthropic_error(status, message)
                     : openai::openai_error(status, message, code);
  };
  options.check_head = [&ctx, anthropic,
                        route](const http::RequestHead& head) -> std::optional<http::Response> {
    // Anthropic's SDKs send the key in x-api-key; Authorization works for every endpoint.
    std::optional<std::string_view> key = anthropic ? head.headers.get("x-api-key") : std::nullopt;
    if (!key) key = head.headers.get("Authorization");
    if (ctx.inference_key_ok(key)) return std::nullopt;  // an untracked call
    try {
      ctx.registry.signer().verify(key.value_or(""));
      return std::nullopt;
    } catch (const Error& e) {
      log_refused_call(route, 401, e.what());
      return anthropic ? openai::anthropic_error(401, e.what()) : openai::error_for(e);
    }
  };
  return options;
}

}  // namespace ajet::swarm
