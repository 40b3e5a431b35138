#include "swarm/route_table.h"

#include <array>
#include <set>
#include <string>

#include "common/error.h"
#include "swarm/routes.h"

namespace ajet::swarm {

namespace {

// clang-format off
constexpr std::array kRoutes = {
  // ---- the command API (routes_command.cc) ----
  Route{"POST", "/claim_episode",          "claim_episode",          RouteAuth::kNone,           "claims an episode of the pool for a client; answers its episode key"},
  Route{"POST", "/begin_episode",          "claim_episode",          RouteAuth::kNone,           "(ext) an alias of /claim_episode"},
  Route{"POST", "/end_episode",            "end_episode",            RouteAuth::kEpisodeCommand, "ends an episode: its metadata, reward and metrics into the batch (or discarded)"},
  Route{"POST", "/prepare_end_episode",    "prepare_end_episode",    RouteAuth::kEpisodeCommand, "(ext) the first phase of ending an episode of a group across servers"},
  Route{"POST", "/commit_episode",         "commit_episode",         RouteAuth::kEpisodeCommand, "(ext) commits a prepared episode (the group's coordinator decided)"},
  Route{"POST", "/resolve_episode_group",  "resolve_episode_group",  RouteAuth::kEpisodeCommand, "(ext) a participant's front asks this coordinator what its group decided"},
  Route{"POST", "/abort_episode",          "abort_episode",          RouteAuth::kEpisodeCommand, "ends an episode without a result (it counts for nothing)"},
  Route{"POST", "/can_continue_episode",   "can_continue_episode",   RouteAuth::kNone,           "whether an episode is still claimed (by that client)"},
  Route{"POST", "/get_episode_buffer",     "get_episode_buffer",     RouteAuth::kNone,           "the registered and claimed episodes (others' ids pseudonymous without the admin token)"},
  Route{"GET",  "/get_current_batch_rollout_pool_information", "pool_information", RouteAuth::kNone, "the pool and the batch being collected, in figures"},
  Route{"POST", "/agree_sync_weight",      "agree_sync_weight",      RouteAuth::kNone,           "a client agrees to the weight sync (agree-based sample collection)"},
  Route{"GET",  "/get_engine_status",      "engine_status",          RouteAuth::kNone,           "the engine's ENGINE.* status, global step, checkpoint and engine_run"},
  Route{"GET",  "/get_server_experiment_dir", "experiment_dir",      RouteAuth::kNone,           "the experiment directory of the synced config"},
  Route{"GET",  "/get_verbose_logs",       "verbose_logs",           RouteAuth::kNone,           "the newest 200 lines of the front's verbose log"},
  Route{"POST", "/replay_latest_llm_call", "replay_latest_llm_call", RouteAuth::kAdmin,          "the latest LLM call, as recorded (request and answer)"},
  Route{"GET",  "/health",                 "health",                 RouteAuth::kNone,           "liveness: {\"status\": \"ok\"}"},
  Route{"GET",  "/",                       "root",                   RouteAuth::kNone,           "like /health, with the service name and the UI's path (HEAD / too)"},
  Route{"GET",  "/episodes",               "episode_page",           RouteAuth::kAdmin,          "(ext) a page of episode summaries"},
  Route{"GET",  "/episodes/{episode_uuid}", "episode_document",      RouteAuth::kAdmin,          "(ext) one episode's document (docs/tracking.md)"},
  // ---- numbers posted by a launcher (routes_metrics_log.cc) ----
  Route{"POST", "/log_metrics",            "log_metrics",            RouteAuth::kAdmin,          "(ext) numbers of a step into the store and TensorBoard"},
  Route{"GET",  "/metrics_history",        "metrics_history",        RouteAuth::kAdmin,          "(ext) every logged series back out"},
  // ---- the task ledger (routes_ledger.cc) ----
  Route{"POST", "/ledger/draw",            "ledger_draw",            RouteAuth::kAdmin,          "(ext) a launcher records the tasks it drew for a step"},
  Route{"GET",  "/ledger",                 "ledger",                 RouteAuth::kAdmin,          "(ext) the task ledger: every task drawn, trained or dropped, with its summary"},
  // ---- the engine and its training config (routes_engine.cc) ----
  Route{"POST", "/sync_train_config",      "sync_train_config",      RouteAuth::kAdmin,          "stores the training config (YAML) the engine will run with"},
  Route{"POST", "/sync_train_code",        "sync_train_code",        RouteAuth::kAdmin,          "stores the training code (a zip) the engine is built from"},
  Route{"POST", "/start_engine",           "start_engine",           RouteAuth::kAdmin,          "starts (or replaces) the engine with the synced config and code"},
  Route{"POST", "/stop_engine",            "stop_engine",            RouteAuth::kAdmin,          "stops the engine; the front goes ENGINE.OFFLINE"},
  Route{"GET",  "/engines",                "engine_replicas",        RouteAuth::kAdmin,          "(ext) the engine replicas on other hosts (--engine-at), their state and rank"},
  Route{"POST", "/engines",                "add_engine_replica",     RouteAuth::kAdmin,          "(ext) registers an engine replica on another host; it joins at the next step"},
  Route{"POST", "/engines/remove",         "remove_engine_replica",  RouteAuth::kAdmin,          "(ext) an engine replica leaves: no calls from now, out of the group at the next step"},
  Route{"GET",  "/adapters",               "adapters",               RouteAuth::kAdmin,          "(ext) the named LoRA adapters the engine serves on its base"},
  Route{"POST", "/adapters",               "adapter_create",         RouteAuth::kAdmin,          "(ext) creates an adapter (or loads a PEFT directory) while the engine runs"},
  Route{"POST", "/adapters/save",          "adapter_save",           RouteAuth::kAdmin,          "(ext) writes an adapter in PEFT layout (or merged into the base)"},
  Route{"POST", "/adapters/remove",        "adapter_remove",         RouteAuth::kAdmin,          "(ext) removes an adapter once its running calls ended"},
  Route{"POST", "/adapters/evict",         "adapter_evict",          RouteAuth::kAdmin,          "(ext) moves an adapter out to disk now (it comes back on demand)"},
  // ---- the OpenAI / Anthropic API (routes_openai.cc) ----
  Route{"POST", "/v1/chat/completions",    "chat_completions",       RouteAuth::kEpisodeKey,     "OpenAI chat completions, tracked in the key's episode"},
  Route{"POST", "/v1/completions",         "completions",            RouteAuth::kEpisodeKey,     "(ext) OpenAI text completions, tracked in the key's episode"},
  Route{"POST", "/v1/messages",            "messages",               RouteAuth::kEpisodeKey,     "Anthropic Messages, tracked in the key's episode"},
  Route{"POST", "/v1/responses",           "responses",              RouteAuth::kEpisodeKey,     "OpenAI Responses, tracked in the key's episode"},
  Route{"POST", "/v1/messages/count_tokens", "count_tokens",         RouteAuth::kEpisodeKey,     "Anthropic: the prompt's token count (nothing is tracked)"},
  Route{"GET",  "/v1/models",              "models",                 RouteAuth::kEpisodeKey,     "(ext) the served model, once one is loaded"},
  // ---- the web pages (routes_ui.cc) ----
  Route{"GET",  "/ui",                     "ui_redirect",            RouteAuth::kNone,           "redirects to /ui/"},
  Route{"GET",  "/ui/",                    "ui_index",               RouteAuth::kNone,           "the dashboard page"},
  Route{"GET",  "/ui/{file}",              "ui_asset",               RouteAuth::kNone,           "the pages and their scripts and styles (web/)"},
  // ---- monitoring (routes_prometheus.cc) ----
  Route{"GET",  "/metrics",                "prometheus_metrics",     RouteAuth::kNone,           "(ext) Prometheus exposition of the front, its HTTP and the engine"},
  Route{"GET",  "/version",                "version",                RouteAuth::kNone,           "(ext) the build and the protocol versions"},
};
// clang-format on

}  // namespace

std::string_view route_auth_name(RouteAuth auth) {
  switch (auth) {
    case RouteAuth::kNone: return "none";
    case RouteAuth::kAdmin: return "admin";
    case RouteAuth::kEpisodeCommand: return "episode command";
    case RouteAuth::kEpisodeKey: return "episode key";
  }
  return "?";
}

std::span<const Route> route_table() { return kRoutes; }

void RouteHandlers::add(std::string name, http::Handler handler, http::RouteOptions options) {
  if (named_.contains(name)) fail(ErrorCode::kInternal, "route handler '" + name + "' added twice");
  named_.emplace(std::move(name), Named{std::move(handler), std::move(options)});
}

const RouteHandlers::Named* RouteHandlers::find(std::string_view name) const {
  auto it = named_.find(name);
  return it == named_.end() ? nullptr : &it->second;
}

std::vector<std::string> RouteHandlers::names() const {
  std::vector<std::string> out;
  for (const auto& [name, named] : named_) out.push_back(name);
  return out;
}

void add_routes(http::Router& router, const RouteHandlers& handlers) {
  std::set<std::string_view> named;
  for (const Route& route : kRoutes) {
    const RouteHandlers::Named* h = handlers.find(route.handler);
    if (h == nullptr) {
      fail(ErrorCode::kInternal, "route table: " + std::string(route.method) + " " +
                                     std::string(route.path) + " names handler '" +
                                     std::string(route.handler) + "', which no routes_*.cc added");
    }
    router.add(route.method, route.path, h->handler, h->options);
    named.insert(route.handler);
  }
  for (const std::string& name : handlers.names()) {
    if (!named.contains(name))
      fail(ErrorCode::kInternal, "route table: no route for handler '" + name + "'");
  }
}

}  // namespace ajet::swarm
