// The OpenAI-compatible API (docs/protocol.md "OpenAI-compatible API"): /v1/chat/completions,
// /v1/completions, /v1/models, /v1/responses (openai/openai_responses.h) and Anthropic's
// /v1/messages (openai/anthropic_messages.h), with the episode key as the Bearer token (or
// x-api-key). On the prompt pool (never an I/O thread): verify the key (HMAC), parse and validate
// the body, render the prompt token-in/token-out through the episode's tracker, then hand the
// engine request to an LlmCall (openai/openai_call.h), which answers when tokens arrive.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/json.h"
#include "common/log.h"
#include "engine_control/supervisor.h"
#include "episodes/registry.h"
#include "episodes/tracker_map.h"
#include "http/response.h"
#include "openai/anthropic_messages.h"
#include "openai/openai_call.h"
#include "openai/openai_errors.h"
#include "openai/openai_params.h"
#include "openai/openai_responses.h"
#include "swarm/call_log.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"
#include "tracking/prompt.h"

namespace ajet::swarm {

namespace {

using http::Request;
using http::Respond;

// The text the generation prompt adds after the assistant header (e.g. Qwen3's empty think block).
std::string generation_tail(const episodes::ModelContext& model,
                            const tracking::RenderedPrompt& prompt) {
  std::span<const text::TokenId> ids(prompt.ids);
  std::string text = model.tokenizer->decode(ids.subspan(size_t(prompt.generation_prompt_begin)));
  if (text.rfind(model.format->assistant_header, 0) == 0)
    text.erase(0, model.format->assistant_header.size());
  return text;
}

std::string_view route_name(openai::CallSetup::Kind kind) {
  switch (kind) {
    case openai::CallSetup::Kind::kChat: return "POST /v1/chat/completions";
    case openai::CallSetup::Kind::kCompletion: return "POST /v1/completions";
    case openai::CallSetup::Kind::kMessages: return "POST /v1/messages";
    case openai::CallSetup::Kind::kResponses: return "POST /v1/responses";
  }
  return "POST /v1";
}

void serve_generation(ServerContext& ctx, Request req, Respond respond,
                      openai::CallSetup::Kind kind, openai::Heartbeats& heartbeats) {
  openai::CallSetup setup;
  setup.kind = kind;
  setup.started = std::chrono::steady_clock::now();
  setup.started_at = episodes::system_clock_seconds();
  const bool messages = kind == openai::CallSetup::Kind::kMessages;
  const bool responses = kind == openai::CallSetup::Kind::kResponses;
  const bool chat = kind != openai::CallSetup::Kind::kCompletion;  // Messages runs as a chat

  // Anthropic's SDKs send the key in x-api-key; Authorization works for every endpoint.
  std::optional<std::string_view> key = messages ? req.headers.get("x-api-key") : std::nullopt;
  if (!key) key = req.headers.get("Authorization");
  // The --inference key: an untracked call (no episode, nothing stored, never trained on).
  const bool untracked = ctx.inference_key_ok(key);
  episodes::EpisodeKeyClaims claims;
  if (!untracked) claims = ctx.registry.signer().verify(key.value_or(""));
  text::OrderedJson body = parse_ordered_json_body(req, ctx.options.max_json_body_bytes);
  openai::FieldNames
      names;  // errors name the fields the client sent, not the chat fields they became
  openai::ConversionNotes notes;
  if (messages) {
    body = openai::anthropic_to_chat_body(body, &notes);
    names = openai::anthropic_field_names();
  }
  if (responses) {
    body = openai::responses_to_chat_body(body, &setup.responses_tools, &notes);
    names = openai::responses_field_names();
  }
  log_conversion_notes(route_name(kind), notes);
  // The episode stores the chat body a Messages or Responses call became: every view of the episode
  // (GET /episodes/{uuid}, ajet episode show, /ui/) reads its conversation from the stored request.
  std::string stored_body;
  if (messages || responses)
    stored_body = body.dump(-1, ' ', false, text::OrderedJson::error_handler_t::replace);
  setup.params =
      chat ? openai::parse_chat_params(body, names) : openai::parse_completion_params(body);
  openai::CompletionPrompt completion;
  if (chat) {
    setup.request = text::parse_chat_request(body);
    if (kind == openai::CallSetup::Kind::kChat)
      openai::check_tool_results(setup.request);  // the adapters check their own
  } else {
    completion = openai::parse_completion_prompt(body);
  }
  body = text::OrderedJson();  // the parsed request is all that is needed from here

  // All n choices at once, within the episode's limits (checked against what it has recorded).
  std::vector<episodes::LlmCallTicket> tickets;
  try {
    if (!untracked)
      tickets = ctx.registry.begin_llm_calls(
          claims.episode_uuid, episodes::CallReservation{setup.params.n, int64_t(req.body.size()),
                                                         ctx.options.max_episode_calls,
                                                         int64_t(ctx.options.max_episode_bytes)});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnavailable) throw;
    const int retry_after = episodes::retry_after_seconds(ctx.registry.engine_status());
    log_refused_call(route_name(kind), 503, e.what());
    respond(messages ? openai::anthropic_error(503, e.what(), retry_after)
                     : openai::unavailable_response(e.what(), retry_after));
    return;
  }
  if (!untracked) {
    setup.in_flight = std::make_shared<episodes::CallInFlight>(ctx.registry, claims.episode_uuid);
    for (const episodes::LlmCallTicket& ticket : tickets) setup.in_flight->add(ticket.call_index);
  }
  std::shared_ptr<const episodes::ModelContext> model = ctx.model();
  if (!model) fail(ErrorCode::kUnavailable, "no model is loaded (start_engine first)");
  setup.model = model;
  std::optional<std::string_view> header_agent = req.headers.get("X-Agent-Name");
  std::optional<std::string_view> model_field;
  if (!setup.params.model.empty()) model_field = setup.params.model;
  setup.agent_name =
      episodes::resolve_agent_name(claims, header_agent, model_field, model->agent_names);

  if (!untracked) {
    episodes::TrackedEpisode tracked = ctx.trackers.get_or_create(claims.episode_uuid, model);
    // An end or abort between begin_llm_call and here ran the close hook (which drops the
    // episode's tracker) before this tracker existed: drop it again, or it would stay until the
    // next engine start. The call goes on with its own reference and is not recorded
    // (record_llm_call refuses it).
    if (!ctx.registry.is_live(claims.episode_uuid)) ctx.trackers.drop(claims.episode_uuid);
    setup.tracker = tracked.tracker;
  }
  if (chat) {
    tracking::PromptOptions options = model->prompt_options;
    options.enable_thinking = setup.params.enable_thinking;
    setup.prompt = setup.tracker
                       ? setup.tracker->render(setup.agent_name, setup.request, options)
                       : tracking::render_prompt(*model->format, setup.request, options, nullptr);
    setup.generation_prompt_tail = generation_tail(*model, setup.prompt);
    setup.parse_tools =
        !setup.request.tools.empty() && setup.params.tool_choice != openai::ToolChoice::kNone;
  } else {
    setup.prompt.ids =
        completion.text ? model->tokenizer->encode(*completion.text) : completion.ids;
    for (size_t i = 0; i < setup.prompt.ids.size(); ++i) {
      if (!model->tokenizer->valid_id(setup.prompt.ids[i])) {
        invalid_argument(
            fmt::format("request body: field 'prompt[{}]' = {} is not a token id of this model", i,
                        setup.prompt.ids[i]));
      }
    }
    setup.prompt.generation_prompt_begin = int32_t(setup.prompt.ids.size());
  }

  const bool train = !untracked && tickets.front().episode_type == "train";
  setup.generate =
      openai::resolve_generation(setup.params, model->sampling, train, setup.prompt.ids.size());
  setup.generate.prompt = setup.prompt.ids;
  setup.generate.stop_token_ids = chat ? model->chat_stop_ids : model->completion_stop_ids;
  openai::check_token_entries(setup.params, setup.generate, ctx.options.max_request_token_entries);
  setup.generate.tag = untracked
                           ? std::string("inference")
                           : fmt::format("{}#{}", claims.episode_uuid, tickets.front().call_index);
  setup.generate.adapter = ctx.adapter_of_model(setup.params.model, model->served_name);
  // An adapter the claim assigned the episode, unless the call names one itself.
  if (setup.generate.adapter.empty() && !claims.adapter.empty()) {
    const std::vector<std::string> served = ctx.adapter_names();
    if (std::find(served.begin(), served.end(), claims.adapter) == served.end()) {
      fail(ErrorCode::kNotFound, "the episode's adapter '" + claims.adapter +
                                     "' (its claim_episode's \"adapter\") is not served; GET "
                                     "/adapters lists those that are");
    }
    setup.generate.adapter = claims.adapter;
  }
  setup.tickets = std::move(tickets);
  setup.length_is_clients =
      setup.params.max_tokens
          ? setup.generate.max_tokens == *setup.params.max_tokens
          : kind == openai::CallSetup::Kind::kChat || kind == openai::CallSetup::Kind::kCompletion;

  setup.request_body = std::move(req.body);
  setup.stored_request_body = std::move(stored_body);
  setup.client_cancel = req.cancel;  // a hang-up aborts the engine request
  setup.stream_backlog_bytes = ctx.options.max_stream_backlog_bytes;
  setup.meta.id = openai::new_response_id(messages    ? "msg_"
                                          : responses ? "resp_"
                                          : chat      ? "chatcmpl-"
                                                      : "cmpl-");
  setup.meta.created = int64_t(setup.started_at);
  setup.meta.model = setup.params.model.empty() ? model->served_name : setup.params.model;

  // The replica is picked last, so a call refused above never counts as its load.
  engine_control::ReplicaChoice replica =
      ctx.router.route(untracked ? std::string() : claims.episode_uuid,
                       ctx.supervisor.rank_clients(), setup.params.n);
  setup.replica_lease = std::move(replica.lease);
  const bool heartbeat = messages && setup.params.stream;
  auto call = std::make_shared<openai::LlmCall>(
      std::move(setup), openai::CallServices{ctx.registry, ctx.latest, &ctx.call_metrics}, respond);
  if (heartbeat) heartbeats.add(call);
  call->start(replica.client);
}

http::Response prompt_queue_full(size_t max_queued, bool anthropic) {
  const std::string message = fmt::format(
      "the front has {} requests waiting for the prompt pool, as many as it queues (ajet-swarm "
      "start "
      "--max-queued-prompts); retry shortly",
      max_queued);
  http::Response r = anthropic ? openai::anthropic_error(503, message)
                               : openai::openai_error(503, message, "prompt_queue_full");
  http::set_retry_after(r, std::chrono::seconds(1));
  return r;
}

// A refusal before the call starts: answered in the endpoint's envelope (Anthropic's SDKs read
// Anthropic's) and logged, rate-limited, since the operator sees nothing of it otherwise.
void generation_route(ServerContext& ctx, Request req, Respond respond,
                      openai::CallSetup::Kind kind, openai::Heartbeats& heartbeats) {
  const bool anthropic = kind == openai::CallSetup::Kind::kMessages;
  auto refuse = [&](http::Response r, std::string_view message) {
    log_refused_call(route_name(kind), r.status, message);
    respond(std::move(r));
  };
  try {
    serve_generation(ctx, std::move(req), respond, kind, heartbeats);
  } catch (const Error& e) {
    refuse(anthropic ? openai::anthropic_error_for(e) : openai::error_for(e), e.what());
  } catch (const std::exception& e) {
    log().error("route: {}", e.what());
    const std::string message = std::string("internal error: ") + e.what();
    refuse(anthropic ? openai::anthropic_error(500, message)
                     : openai::openai_error(500, message, "internal"),
           message);
  }
}

// POST /v1/messages/count_tokens: the prompt a Messages body renders to, counted with the served
// model's tokenizer and chat template (nothing is tracked: no episode call is made).
void count_tokens_route(ServerContext& ctx, const Request& req, const Respond& respond) {
  try {
    std::optional<std::string_view> key = req.headers.get("x-api-key");
    if (!key) key = req.headers.get("Authorization");
    // An episode's key or the inference key (ajet-swarm start --inference-key, what `ajet proxy`
    // counts under): counting tracks nothing either way.
    if (!ctx.inference_key_ok(key)) ctx.registry.signer().verify(key.value_or(""));
    const text::OrderedJson body = openai::anthropic_to_chat_body(
        parse_ordered_json_body(req, ctx.options.max_json_body_bytes), nullptr, true);
    const openai::OpenAiParams params =
        openai::parse_chat_params(body, openai::anthropic_field_names());
    const text::ChatRequest request = text::parse_chat_request(body);
    std::shared_ptr<const episodes::ModelContext> model = ctx.model();
    if (!model) fail(ErrorCode::kUnavailable, "no model is loaded (start_engine first)");
    tracking::PromptOptions options = model->prompt_options;
    options.enable_thinking = params.enable_thinking;
    const tracking::RenderedPrompt prompt =
        tracking::render_prompt(*model->format, request, options, nullptr);
    respond(http::json_response(Json{{"input_tokens", int64_t(prompt.ids.size())}}));
  } catch (const Error& e) {
    log_refused_call("POST /v1/messages/count_tokens", episodes::http_status_for(e.code()),
                     e.what());
    respond(openai::anthropic_error_for(e));
  } catch (const std::exception& e) {
    log().error("route: {}", e.what());
    respond(openai::anthropic_error(500, std::string("internal error: ") + e.what()));
  }
}

}  // namespace

void add_openai_handlers(RouteHandlers& out, ServerContext& ctx) {
  // Parsing a body, rendering its chat template and tokenizing the prompt take time in proportion
  // to the prompt (seconds for megabytes), so they run on this pool and never on an HTTP I/O
  // thread: /health and the command API stay responsive under large prompts. The routes own it; the
  // server destroys them (and so joins it) before anything a queued call uses.
  auto prompts =
      std::make_shared<WorkPool>(std::max(2u, std::thread::hardware_concurrency()), "prompt pool");
  // Streamed Messages calls show a sign of life every 5 s while nothing is generated.
  auto heartbeats = std::make_shared<openai::Heartbeats>(std::chrono::seconds(5));
  // Requests waiting for the pool (their key was checked from the header): at most
  // max_queued_prompts, so a flood of valid keys cannot queue bodies without bound.
  auto waiting = std::make_shared<std::atomic<size_t>>(0);
  for (auto [name, kind] : {std::pair{"chat_completions", openai::CallSetup::Kind::kChat},
                            std::pair{"completions", openai::CallSetup::Kind::kCompletion},
                            std::pair{"messages", openai::CallSetup::Kind::kMessages},
                            std::pair{"responses", openai::CallSetup::Kind::kResponses}}) {
    const bool anthropic = kind == openai::CallSetup::Kind::kMessages;
    out.add(
        name,
        [&ctx, prompts, heartbeats, waiting, kind = kind, anthropic](Request req, Respond respond) {
          if (waiting->fetch_add(1) >= ctx.options.max_queued_prompts) {
            waiting->fetch_sub(1);
            http::Response full = prompt_queue_full(ctx.options.max_queued_prompts, anthropic);
            log_refused_call(route_name(kind), full.status,
                             "the prompt pool's queue is full (--max-queued-prompts)");
            respond(std::move(full));
            return;
          }
          prompts->post([&ctx, heartbeats, waiting, kind, req = std::move(req),
                         respond = std::move(respond)]() mutable {
            waiting->fetch_sub(1);
            if (req.cancel && req.cancel->cancelled())
              return;  // the client hung up while it waited
            generation_route(ctx, std::move(req), std::move(respond), kind, *heartbeats);
          });
        },
        episode_key_only(ctx, anthropic, std::string(route_name(kind))));
  }
  out.add(
      "count_tokens",
      [&ctx, prompts, waiting](Request req, Respond respond) {
        if (waiting->fetch_add(1) >= ctx.options.max_queued_prompts) {
          waiting->fetch_sub(1);
          respond(prompt_queue_full(ctx.options.max_queued_prompts, true));
          return;
        }
        prompts->post(
            [&ctx, waiting, req = std::move(req), respond = std::move(respond)]() mutable {
              waiting->fetch_sub(1);
              if (req.cancel && req.cancel->cancelled()) return;
              count_tokens_route(ctx, req, respond);
            });
      },
      episode_key_only(ctx, true, "POST /v1/messages/count_tokens"));
  out.add(
      "models",
      [&ctx](Request req, Respond respond) {
        answer_errors(respond, [&] {
          ctx.registry.signer().verify(req.headers.get("Authorization").value_or(""));
          Json data = Json::array();
          if (std::shared_ptr<const episodes::ModelContext> model = ctx.model()) {
            const int64_t created = int64_t(episodes::system_clock_seconds());
            data.push_back({{"id", model->served_name},
                            {"object", "model"},
                            {"created", created},
                            {"owned_by", "agentjet"}});
            // Each named adapter as "<served name>:<adapter>", what a call names to use it.
            for (const std::string& adapter : ctx.adapter_names()) {
              data.push_back({{"id", model->served_name + ":" + adapter},
                              {"object", "model"},
                              {"created", created},
                              {"owned_by", "agentjet"},
                              {"parent", model->served_name}});
            }
          }
          respond(http::json_response(Json{{"object", "list"}, {"data", std::move(data)}}));
        });
      },
      episode_key_only(ctx, false, "GET /v1/models"));
}

}  // namespace ajet::swarm
