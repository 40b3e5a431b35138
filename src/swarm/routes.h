// The swarm front's HTTP routes (docs/protocol.md): the command API, the admin endpoints that
// change the engine, and the OpenAI-compatible API. Handlers run on HTTP I/O threads and never
// block there: store reads, archives and process control go to ServerContext::pool.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "http/message.h"
#include "http/router.h"
#include "swarm/server_context.h"

namespace ajet::swarm {

// The handlers of the front's routes, each under the name the route table gives it
// (swarm/route_table.cc: method, path, auth and purpose of every route). Each routes_*.cc adds its
// own; add_routes registers them on the router from the table.
class RouteHandlers {
 public:
  struct Named {
    http::Handler handler;
    http::RouteOptions options;  // what the route checks before its body is read
  };
  // Adds `handler` as `name`; a name added twice throws Error(kInternal).
  void add(std::string name, http::Handler handler, http::RouteOptions options = {});
  const Named* find(std::string_view name) const;  // null when absent
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Named, std::less<>> named_;
};

// The command API (routes_command.cc): claim_episode, end_episode, prepare_end_episode,
// commit_episode, resolve_episode_group, abort_episode, can_continue_episode, get_episode_buffer,
// pool_information, agree_sync_weight, engine_status, experiment_dir, verbose_logs,
// replay_latest_llm_call, health, root, episode_page, episode_document.
void add_command_handlers(RouteHandlers& out, ServerContext& ctx);
// The endpoints that change the engine (routes_engine.cc): sync_train_config, sync_train_code,
// start_engine, stop_engine (admin token when configured).
void add_engine_handlers(RouteHandlers& out, ServerContext& ctx);
// The OpenAI / Anthropic API (routes_openai.cc): chat_completions, completions, messages,
// responses, count_tokens, models.
void add_openai_handlers(RouteHandlers& out, ServerContext& ctx);
// log_metrics (numbers into the store and TensorBoard) and metrics_history (every series back
// out), both behind the admin token (routes_metrics_log.cc).
class MetricsSink;
void add_metrics_handlers(RouteHandlers& out, ServerContext& ctx, MetricsSink& sink);
// The task ledger (routes_ledger.cc): ledger_draw (a launcher records its draws) and ledger (the
// rows and their summary), both behind the admin token.
void add_ledger_handlers(RouteHandlers& out, ServerContext& ctx);
// The web pages under /ui/ (web/: dashboard, episodes, token viewer): ui_redirect, ui_index,
// ui_asset. Their data comes from the admin-token routes, so the pages carry nothing secret.
void add_ui_handlers(RouteHandlers& out);

// ---- what a route checks before its body is read (route_checks.cc) ----
// The body limit of the command routes that carry a few ids (claim, can_continue, abort, commit,
// …).
inline constexpr size_t kCommandBodyBytes = 64 << 10;
// A body of at most `bytes`, named by `limit_name` in the 413 (e.g. "--max-json-mb"); errors the
// server makes for the route in the command API's shape (openai_error).
http::RouteOptions body_limit(size_t bytes, std::string limit_name);
// The commands' limit: kCommandBodyBytes, or the JSON limit when that is lower.
http::RouteOptions command_body(const ServerContext& ctx);
// The admin token (when one is configured) before the body: 401 naming `what` without it.
http::RouteOptions admin_only(const ServerContext& ctx, std::string what, http::RouteOptions limit);
// The episode key (Authorization, or for Anthropic's API x-api-key too) before the body, in that
// API's error shape; the body at most max_json_body_bytes. Refusals are logged (rate-limited) under
// `route` ("POST /v1/messages").
http::RouteOptions episode_key_only(const ServerContext& ctx, bool anthropic, std::string route);
// An episode command's credentials before the body (the admin token, or a key this server signed;
// the handler checks that the key is the body's episode's), unless --allow-keyless-episode-commands
// lets a request without any through.
http::RouteOptions episode_command(const ServerContext& ctx, std::string command,
                                   http::RouteOptions limit);

// A JSON request body ({} when empty); Error(kInvalidArgument) for bad JSON or a body that is not
// an object, kResourceExhausted naming `limit` for an oversize body.
Json parse_json_body(const http::Request& request, size_t limit);
// The body's optional "engine_run" (ext: stop_engine, claim_episode): "" when absent; anything but
// a non-empty string throws Error(kInvalidArgument) naming `where`.
std::string engine_run_field(const Json& body, std::string_view where);
// The same for the OpenAI routes, keeping the order of keys (a tool schema is rendered as sent) and
// with no default: an empty body is bad JSON.
nlohmann::ordered_json parse_ordered_json_body(const http::Request& request, size_t limit);
// Runs `fn`; an ajet::Error (or any exception) it throws becomes the error response.
void answer_errors(const http::Respond& respond, const std::function<void()>& fn);

// A command body up to this size is parsed on the I/O thread; a larger one on the work pool, so
// that parsing megabytes of JSON never stalls the other connections of an I/O thread.
inline constexpr size_t kInlineCommandBodyBytes = 64u << 10;
// A command route's handler: runs `handle` on the I/O thread for a body of at most `inline_limit`
// bytes, on `pool` for a larger one (parsing and all: `handle` must not assume its thread).
class WorkPool;
http::Handler command_handler(
    WorkPool& pool, std::function<void(const http::Request&, const http::Respond&)> handle,
    size_t inline_limit = kInlineCommandBodyBytes);

}  // namespace ajet::swarm
