// The swarm command API for clients (docs/protocol.md "Command API"): episodes, pool information,
// logs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "engine_control/supervisor.h"
#include "episodes/episode_key.h"
#include "episodes/registry.h"
#include "episodes/verbose_log.h"
#include "http/response.h"
#include "openai/openai_call.h"
#include "openai/openai_errors.h"
#include "store/episode_list.h"
#include "store/store.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"
#include "tracking/episode_json.h"
#include "tracking/episode_tracker.h"

namespace ajet::swarm {

namespace {

using http::Request;
using http::Respond;

std::string size_text(size_t bytes) {
  if (bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

// GET /episodes/{uuid}: the tracker's episode document, built on the work pool (store reads).
// `id`: the episode's uuid or a prefix only its uuid starts with (404 for none, 400 when shared).
void episode_document(ServerContext& ctx, const std::string& id, Respond respond) {
  ctx.pool.post([&ctx, id, respond] {
    answer_errors(respond, [&] {
      ctx.store.flush().get();  // calls queued before this request are visible
      const std::string uuid = ctx.store.resolve_episode_uuid(id);
      std::optional<store::EpisodeRow> row = ctx.store.get_episode(uuid);
      if (!row) fail(ErrorCode::kNotFound, "Episode " + uuid + " is not in the store.");
      std::vector<store::CallRow> rows = ctx.store.get_calls(uuid);
      std::shared_ptr<const episodes::ModelContext> model = ctx.model();
      const tracking::ChatFormat* format = model ? model->format.get() : nullptr;
      tracking::MergeOptions options = model ? model->merge_options : tracking::MergeOptions{};
      if (format == nullptr) options.compare_level = tracking::CompareLevel::kToken;
      std::vector<tracking::CallRecord> calls = tracking::calls_from_rows(rows, format);
      tracking::EpisodeInfo info{row->uuid, row->task_id, row->reward.value_or(0.0)};
      tracking::MergedEpisode merged = tracking::merge_episode(info, calls, options);
      tracking::EpisodeView view = tracking::EpisodeView::from_row(*row);
      view.dropped_calls = ctx.store.get_dropped_calls(uuid);
      respond(http::json_response(
          tracking::episode_json(view, calls, merged, model ? model->tokenizer.get() : nullptr)));
    });
  });
}

// GET /episodes: one page of episode summaries (store/episode_list.h), read on the work pool.
void episode_page(ServerContext& ctx, const Request& request, Respond respond) {
  store::EpisodePageRequest page =
      store::episode_page_request_from_params(request.query);  // 400 on bad input
  ctx.pool.post([&ctx, page = std::move(page), respond] {
    answer_errors(respond, [&] {
      ctx.store.flush().get();  // episodes claimed or ended before this request are listed
      respond(http::json_response(store::episode_page_json(ctx.store.list_episodes(page))));
    });
  });
}

void check_json_body_size(const Request& request, size_t limit) {
  if (request.body.size() > limit) {
    fail(ErrorCode::kResourceExhausted,
         fmt::format("request body of {} bytes exceeds the limit for JSON bodies ({})",
                     request.body.size(), size_text(limit)));
  }
}

template <class J>
J require_object(J body) {
  if (!body.is_object())
    invalid_argument("request body must be a JSON object, got " +
                     std::string(json_type_name(body)));
  return body;
}

http::Handler command(ServerContext& ctx,
                      std::function<void(const Request&, const Respond&)> handle) {
  return command_handler(ctx.pool, std::move(handle));
}

http::Response command_error(const episodes::CommandError& error) {
  if (error.status == 409) return openai::openai_error(409, error.message, "conflict");
  return openai::error_for(Error(error.code, error.message));
}

// The episode commands are bound to their episode: its key, or the admin token (episode_key.h).
void require_episode_key(const ServerContext& ctx, const Request& req,
                         const std::string& episode_uuid, std::string_view command) {
  if (ctx.admin_token_given(req)) return;
  episodes::check_episode_command_key(ctx.registry.signer(), req.headers.get("Authorization"),
                                      episode_uuid, command,
                                      ctx.options.allow_keyless_episode_commands);
}

// Who reads a public view: the admin token shows every id; `client_uuid` (a query parameter or a
// body field) shows the caller's own.
episodes::ViewScope view_scope(const ServerContext& ctx, const Request& req, const Json* body) {
  episodes::ViewScope scope;
  scope.all_ids = ctx.admin_token_given(req);
  if (auto it = req.query.find("client_uuid"); it != req.query.end())
    scope.client_uuid = it->second;
  if (body != nullptr) {
    if (auto c = body->find("client_uuid"); c != body->end() && c->is_string())
      scope.client_uuid = c->get<std::string>();
  }
  return scope;
}

// A participant's coordinator must be one of --peer, unless the admin token is sent: the refusal,
// if any.
std::optional<std::string> coordinator_refusal(const ServerContext& ctx, const Request& req,
                                               const episodes::EpisodeGroup& group) {
  if (group.is_coordinator() || group.is_local_participant() ||
      ctx.is_peer(group.coordinator_url) || ctx.admin_token_given(req))
    return std::nullopt;
  return fmt::format(
      "prepare_end_episode body: group.coordinator_url {} is not on this front's allow-list of "
      "coordinators, its peers ({}); start the front with `ajet-swarm start --peer {}`, or send "
      "the "
      "admin token",
      group.coordinator_url,
      ctx.options.peers.empty() ? std::string("none configured")
                                : fmt::format("{}", fmt::join(ctx.options.peers, ", ")),
      group.coordinator_url);
}

}  // namespace

http::Handler command_handler(WorkPool& pool,
                              std::function<void(const Request&, const Respond&)> handle,
                              size_t inline_limit) {
  return [&pool, inline_limit, handle = std::move(handle)](Request req, Respond respond) {
    if (req.body.size() <= inline_limit) {
      handle(req, respond);
      return;
    }
    auto request = std::make_shared<Request>(std::move(req));
    pool.post([handle, request, respond] { handle(*request, respond); });
  };
}

std::string engine_run_field(const Json& body, std::string_view where) {
  const auto it = body.find("engine_run");
  if (it == body.end()) return "";
  if (!it->is_string() || it->get<std::string>().empty()) {
    invalid_argument(std::string(where) +
                     ": field 'engine_run' must be the non-empty string start_engine answered");
  }
  return it->get<std::string>();
}

Json parse_json_body(const Request& request, size_t limit) {
  check_json_body_size(request, limit);
  bool blank = true;
  for (char c : request.body) blank = blank && (c == ' ' || c == '\n' || c == '\r' || c == '\t');
  if (blank) return Json::object();
  return require_object(parse_json(request.body, "request body"));
}

nlohmann::ordered_json parse_ordered_json_body(const Request& request, size_t limit) {
  check_json_body_size(request, limit);
  return require_object(parse_ordered_json(request.body, "request body"));
}

void answer_errors(const Respond& respond, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    respond(openai::error_for(e));
  } catch (const std::exception& e) {
    log().error("route: {}", e.what());
    respond(openai::openai_error(500, std::string("internal error: ") + e.what(), "internal"));
  }
}

void add_command_handlers(RouteHandlers& out, ServerContext& ctx) {
  const size_t limit = ctx.options.max_json_body_bytes;
  auto claim = command(ctx, [&ctx, limit](const Request& req, const Respond& respond) {
    answer_errors(respond, [&] {
      const Json body = parse_json_body(req, limit);
      episodes::ClaimRequest claim = episodes::ClaimRequest::from_json(body);
      // (ext) "engine_run": claim only from the engine that start_engine started (a client whose
      // engine another client replaced must not roll out for the new one).
      if (const std::string engine_run = engine_run_field(body, "claim_episode body");
          ctx.engine_replaced(engine_run)) {
        respond(openai::openai_error(409,
                                     "claim_episode: the engine is engine_run " +
                                         ctx.running_engine_run() + " now, not " + engine_run +
                                         ": another start_engine replaced it",
                                     "engine_replaced"));
        return;
      }
      respond(http::json_response(ctx.registry.claim_episode(claim).to_json()));
    });
  });
  out.add("claim_episode", claim, command_body(ctx));

  const size_t kept = ctx.options.max_episode_metadata_bytes;
  // end_episode's body is its metadata and log_metrics (each at most --max-episode-metadata-mb) and
  // a few ids: the route reads no more than that (and never more than --max-json-mb).
  const http::RouteOptions end_body =
      limit <= 2 * kept + kCommandBodyBytes
          ? body_limit(limit, "ajet-swarm start --max-json-mb")
          : body_limit(2 * kept + kCommandBodyBytes,
                       "twice ajet-swarm start --max-episode-metadata-mb, plus 64 KiB");
  out.add("end_episode",
          command(ctx,
                  [&ctx, limit, kept](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      episodes::EndRequest end = episodes::EndRequest::from_json(
                          parse_json_body(req, limit), "end_episode", kept);
                      require_episode_key(ctx, req, end.episode_uuid, "end_episode");
                      // `done` runs inline, on the work pool or on the store's writer thread;
                      // respond is thread-safe.
                      ctx.registry.end_episode(
                          std::move(end), [respond](std::optional<episodes::CommandError> error) {
                            if (!error) {
                              respond(http::json_response(Json{{"success", true}}));
                            } else {
                              respond(command_error(*error));
                            }
                          });
                    });
                  }),
          episode_command(ctx, "end_episode", end_body));

  // Episode groups across servers (docs/protocol.md): prepare, commit, and the coordinator's side.
  out.add("prepare_end_episode",
          command(ctx,
                  [&ctx, limit, kept](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      episodes::PrepareRequest prepare =
                          episodes::PrepareRequest::from_json(parse_json_body(req, limit), kept);
                      require_episode_key(ctx, req, prepare.end.episode_uuid,
                                          "prepare_end_episode");
                      if (prepare.group.is_local_participant() &&
                          !prepare.group.coordinator_episode_key.empty()) {
                        // Whoever holds the coordinator episode's key may name it (one agent
                        // with two clients); without one, only the same client's episode.
                        try {
                          prepare.coordinator_key_verified =
                              ctx.registry.signer()
                                  .verify(prepare.group.coordinator_episode_key)
                                  .episode_uuid == prepare.group.coordinator_episode_uuid;
                        } catch (const Error&) {
                          // Not that episode's key: the registry's same-client rule decides.
                        }
                      }
                      if (std::optional<std::string> refusal =
                              coordinator_refusal(ctx, req, prepare.group)) {
                        respond(openai::openai_error(403, *refusal, "coordinator_not_allowed"));
                        return;
                      }
                      ctx.registry.prepare_end_episode(
                          std::move(prepare), [respond](std::optional<episodes::CommandError> error,
                                                        episodes::PrepareResponse answer) {
                            if (!error) {
                              respond(http::json_response(answer.to_json()));
                            } else {
                              respond(command_error(*error));
                            }
                          });
                    });
                  }),
          episode_command(ctx, "prepare_end_episode", end_body));

  out.add("commit_episode",
          command(ctx,
                  [&ctx, limit](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      episodes::EpisodeRef commit = episodes::EpisodeRef::from_json(
                          parse_json_body(req, limit), "commit_episode", /*client_required=*/true);
                      require_episode_key(ctx, req, commit.episode_uuid, "commit_episode");
                      ctx.registry.commit_episode(
                          commit, [respond](std::optional<episodes::CommandError> error) {
                            if (!error) {
                              respond(http::json_response(Json{{"success", true}}));
                            } else {
                              respond(command_error(*error));
                            }
                          });
                    });
                  }),
          episode_command(ctx, "commit_episode", command_body(ctx)));

  // Asked by a participant's front with the coordinator episode's key (it aborts an uncommitted
  // episode).
  out.add("resolve_episode_group",
          command(ctx,
                  [&ctx, limit](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      episodes::ResolveRequest resolve =
                          episodes::ResolveRequest::from_json(parse_json_body(req, limit));
                      require_episode_key(ctx, req, resolve.episode_uuid, "resolve_episode_group");
                      ctx.pool.post([&ctx, resolve, respond] {  // may read the store
                        answer_errors(respond, [&] {
                          respond(http::json_response(
                              Json{{"decision", ctx.registry.resolve_group(resolve)}}));
                        });
                      });
                    });
                  }),
          episode_command(ctx, "resolve_episode_group", command_body(ctx)));

  out.add("abort_episode",
          command(ctx,
                  [&ctx, limit](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      episodes::AbortRequest abort =
                          episodes::AbortRequest::from_json(parse_json_body(req, limit));
                      require_episode_key(ctx, req, abort.episode_uuid, "abort_episode");
                      ctx.registry.abort_episode(abort);
                      respond(http::json_response(Json{{"success", true}}));
                    });
                  }),
          episode_command(ctx, "abort_episode", command_body(ctx)));

  out.add("can_continue_episode",
          command(ctx,
                  [&ctx, limit](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      bool ok = ctx.registry.can_continue_episode(
                          episodes::EpisodeRef::from_json(parse_json_body(req, limit)));
                      respond(http::json_response(Json{{"can_continue", ok}}));
                    });
                  }),
          command_body(ctx));

  out.add("get_episode_buffer",
          command(ctx,
                  [&ctx, limit](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      const Json body = parse_json_body(req, limit);
                      respond(http::json_response(
                          ctx.registry.episode_buffer(view_scope(ctx, req, &body))));
                    });
                  }),
          command_body(ctx));

  out.add("pool_information", [&ctx](Request req, Respond respond) {
    answer_errors(respond, [&] {
      respond(http::json_response(ctx.registry.pool_info(view_scope(ctx, req, nullptr))));
    });
  });

  out.add("agree_sync_weight",
          command(ctx,
                  [&ctx, limit](const Request& req, const Respond& respond) {
                    answer_errors(respond, [&] {
                      episodes::AgreeRequest agree =
                          episodes::AgreeRequest::from_json(parse_json_body(req, limit));
                      respond(http::json_response(ctx.registry.agree_sync_weight(agree).to_json()));
                    });
                  }),
          command_body(ctx));

  out.add("engine_status", [&ctx](Request req, Respond respond) {
    Json body = ctx.registry.engine_status_json(view_scope(ctx, req, nullptr));
    const std::filesystem::path checkpoint = ctx.supervisor.latest_checkpoint_dir();
    body["latest_checkpoint"] = checkpoint.empty() ? Json(nullptr) : Json(checkpoint.string());
    const std::string engine_run = ctx.running_engine_run();
    body["engine_run"] = engine_run.empty() ? Json(nullptr) : Json(engine_run);
    respond(http::json_response(body));
  });

  out.add("experiment_dir", [&ctx](Request, Respond respond) {
    TrainState t = ctx.train();
    respond(http::json_response(
        Json{{"server_experiment_dir",
              t.experiment_dir.empty() ? Json(nullptr) : Json(t.experiment_dir.string())}}));
  });

  out.add("verbose_logs", [&ctx](Request, Respond respond) {
    respond(http::json_response(ctx.verbose.to_json()));
  });

  out.add(
      "replay_latest_llm_call",
      [&ctx](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(openai::openai_error(
              401, "replay_latest_llm_call needs the admin token (Authorization: Bearer <token>)",
              "unauthenticated"));
          return;
        }
        std::optional<Json> latest = ctx.latest.get();
        if (!latest) {
          respond(openai::openai_error(404, "No LLM call has been made yet.", "not_found"));
          return;
        }
        respond(http::json_response(*latest));
      },
      admin_only(ctx, "replay_latest_llm_call", command_body(ctx)));

  out.add("health", [](Request, Respond respond) {
    respond(http::json_response(Json{{"status", "ok"}}));
  });
  // The root answers like /health: clients probe it before their first call (Claude Code sends HEAD
  // /, which the router answers from this GET without the body).
  out.add("root", [](Request, Respond respond) {
    respond(http::json_response(Json{{"status", "ok"}, {"service", "ajet-swarm"}, {"ui", "/ui/"}}));
  });

  out.add(
      "episode_page",
      [&ctx](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(openai::openai_error(
              401, "GET /episodes needs the admin token (Authorization: Bearer <token>)",
              "unauthenticated"));
          return;
        }
        answer_errors(respond, [&] { episode_page(ctx, req, respond); });
      },
      admin_only(ctx, "GET /episodes", command_body(ctx)));

  out.add(
      "episode_document",
      [&ctx](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(openai::openai_error(
              401, "GET /episodes/{uuid} needs the admin token (Authorization: Bearer <token>)",
              "unauthenticated"));
          return;
        }
        episode_document(ctx, req.path_params.at("episode_uuid"), respond);
      },
      admin_only(ctx, "GET /episodes/{uuid}", command_body(ctx)));
}

}  // namespace ajet::swarm
