// The command endpoints that change the server (docs/protocol.md "Engine and admin endpoints";
// admin token when one is configured): /sync_train_config, /sync_train_code, /start_engine,
// /stop_engine. The work (disk, unpacking, process control) runs on the work pool; the I/O thread
// only checks the token and parses the body.
#include <fmt/format.h>

#include "engine_control/supervisor.h"
#include "episodes/registry.h"
#include "http/response.h"
#include "openai/openai_errors.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"

namespace ajet::swarm {

namespace {

using http::Request;
using http::Respond;

bool check_admin(ServerContext& ctx, const Request& req, const Respond& respond,
                 std::string_view what) {
  if (ctx.admin_ok(req)) return true;
  respond(openai::openai_error(
      401,
      fmt::format("{} needs the admin token: send Authorization: Bearer <token> (the token "
                  "given to ajet-swarm start --admin-token / AJET_ADMIN_TOKEN)",
                  what),
      "unauthenticated"));
  return false;
}

// sync_train_config's optional "source": the file the client read yaml_as_string from, named in the
// warnings and errors instead of "sync_train_config yaml_as_string" (their line numbers are the
// file's). Printable text of at most 512 bytes; "" when absent.
std::string sync_source(const Json& body) {
  if (!body.contains("source") || body["source"].is_null()) return "";
  if (!body["source"].is_string())
    invalid_argument("sync_train_config: 'source' must be a string (a file name)");
  const std::string source = body["source"].get<std::string>();
  if (source.size() > 512) invalid_argument("sync_train_config: 'source' is longer than 512 bytes");
  for (unsigned char c : source) {
    if (c < 0x20 || c == 0x7f)
      invalid_argument("sync_train_config: 'source' holds a control character");
  }
  return source;
}

// The one engine that serves named adapters: refused on fronts with several (their adapters would
// have to be made on each, and kept in step), and while no engine runs.
std::shared_ptr<rpc::Client> adapter_engine(ServerContext& ctx, std::string_view what) {
  if (ctx.supervisor.remote() || ctx.supervisor.rank_clients().size() > 1) {
    fail(ErrorCode::kFailedPrecondition,
         std::string(what) +
             ": named adapters are served by a front with one engine (not "
             "--engine-ranks, --engine-at or --trainer-at)");
  }
  std::shared_ptr<rpc::Client> engine = ctx.supervisor.client();
  if (!engine) fail(ErrorCode::kUnavailable, std::string(what) + ": no engine is running");
  return engine;
}

// Calls `method` with `body` on the adapter engine; afterwards the front's list of adapter names
// (what calls' "model" resolves against) is the engine's.
Json call_adapters(ServerContext& ctx, std::string_view what, std::string_view method, Json body) {
  std::shared_ptr<rpc::Client> engine = adapter_engine(ctx, what);
  rpc::Frame request;
  request.method = std::string(method);
  request.body = std::move(body);
  const Json sent = request.body;
  Json reply = engine->call(std::move(request), std::chrono::minutes(10)).done.body;
  // An engine the supervisor restarts gets its adapters again (ServerContext::restore_adapters).
  if (method == rpc::kMethodAdapterCreate) ctx.remember_adapter(sent.value("name", ""), sent);
  if (method == rpc::kMethodAdapterRemove) ctx.forget_adapter(sent.value("name", ""));
  rpc::Frame list;
  list.method = std::string(rpc::kMethodAdapters);
  list.body = Json::object();
  const Json served = method == rpc::kMethodAdapters
                          ? reply
                          : engine->call(std::move(list), std::chrono::seconds(30)).done.body;
  std::vector<std::string> names;
  for (const Json& a : served.value("adapters", Json::array()))
    names.push_back(a.value("name", ""));
  ctx.set_adapter_names(std::move(names));
  return reply;
}

}  // namespace

void add_engine_handlers(RouteHandlers& out, ServerContext& ctx) {
  const size_t limit = ctx.options.max_json_body_bytes;

  out.add(
      "sync_train_config",
      [&ctx, limit](Request req, Respond respond) {
        if (!check_admin(ctx, req, respond, "sync_train_config")) return;
        answer_errors(respond, [&] {
          Json body = parse_json_body(req, limit);
          std::string yaml = get_string(body, "yaml_as_string", "sync_train_config body");
          std::string source = sync_source(body);
          ctx.pool.post([&ctx, yaml = std::move(yaml), source = std::move(source), respond] {
            answer_errors(respond, [&] {
              std::vector<std::string> warnings = ctx.sync_train_config(yaml, source);
              respond(http::json_response(Json{{"success", true}, {"warnings", warnings}}));
            });
          });
        });
      },
      admin_only(ctx, "sync_train_config", body_limit(limit, "ajet-swarm start --max-json-mb")));

  out.add(
      "sync_train_code",
      [&ctx](Request req, Respond respond) {
        if (!check_admin(ctx, req, respond, "sync_train_code")) return;
        auto body = std::make_shared<std::string>(std::move(req.body));
        ctx.pool.post([&ctx, body, respond] {
          answer_errors(respond, [&] {
            engine_control::UnpackedTree tree = ctx.sync_train_code(*body);
            respond(http::json_response(
                Json{{"success", true},
                     {"message",
                      fmt::format(
                          "{} files unpacked into {}; the next start_engine builds the ajet-engine "
                          "target of this tree and runs it",
                          tree.files, tree.root.string())},
                     {"temp_ajet_code_path", tree.root.string()},
                     {"files", tree.files},
                     {"bytes", tree.bytes}}));
          });
        });
      },
      admin_only(ctx, "sync_train_code",
                 body_limit(ctx.options.max_body_bytes, "ajet-swarm start --max-body-mb")));

  out.add(
      "start_engine",
      [&ctx, limit](Request req, Respond respond) {
        if (!check_admin(ctx, req, respond, "start_engine")) return;
        answer_errors(respond, [&] {
          Json body = parse_json_body(req, limit);
          if (body.contains("from_checkpoint") && !body["from_checkpoint"].is_boolean()) {
            invalid_argument("start_engine: 'from_checkpoint' must be true or false");
          }
          const bool from_checkpoint = body.value("from_checkpoint", false);
          ctx.pool.post([&ctx, respond, from_checkpoint] {
            answer_errors(respond, [&] {
              int64_t pid = ctx.start_engine(
                  from_checkpoint ? "start_engine from_checkpoint" : "start_engine",
                  from_checkpoint);
              Json body = {{"success", true}, {"engine_run", ctx.train().engine_run}};
              if (pid > 0) body["pid"] = pid;
              respond(http::json_response(body));
            });
          });
        });
      },
      admin_only(ctx, "start_engine", command_body(ctx)));

  out.add(
      "stop_engine",
      [&ctx, limit](Request req, Respond respond) {
        if (!check_admin(ctx, req, respond, "stop_engine")) return;
        answer_errors(respond, [&] {
          const std::string engine_run =
              engine_run_field(parse_json_body(req, limit), "stop_engine body");
          ctx.pool.post([&ctx, respond, engine_run] {
            answer_errors(respond, [&] {
              ctx.stop_engine("stop_engine", engine_run);
              respond(http::json_response(Json{{"success", true}}));
            });
          });
        });
      },
      admin_only(ctx, "stop_engine", command_body(ctx)));

  // Engine replicas on other hosts (ajet-swarm start --engine-at): list, add, remove.
  out.add(
      "engine_replicas",
      [&ctx](Request req, Respond respond) {
        if (!check_admin(ctx, req, respond, "GET /engines")) return;
        answer_errors(respond,
                      [&] { respond(http::json_response(ctx.supervisor.engines_json())); });
      },
      admin_only(ctx, "GET /engines", command_body(ctx)));
  for (const bool add : {true, false}) {
    const char* name = add ? "add_engine_replica" : "remove_engine_replica";
    const std::string what = add ? "POST /engines" : "POST /engines/remove";
    out.add(
        name,
        [&ctx, limit, add, what](Request req, Respond respond) {
          if (!check_admin(ctx, req, respond, what)) return;
          answer_errors(respond, [&] {
            const Json body = parse_json_body(req, limit);
            const std::string address = get_string(body, "address", what + " body");
            // "role": "trainer" registers a trainer rank (disaggregated fronts), else a replica.
            std::string role = "replica";
            if (add) {
              if (auto r = get_optional_string(body, "role", what + " body")) role = *r;
              if (role != "replica" && role != "trainer") {
                invalid_argument(what + " body: 'role' must be \"replica\" or \"trainer\", got \"" +
                                 role + "\"");
              }
            }
            // On the work pool: removing closes the replica's connection, which waits for its
            // reader thread.
            ctx.pool.post([&ctx, respond, add, address, role] {
              answer_errors(respond, [&] {
                if (add) {
                  ctx.supervisor.add_engine(address, role == "trainer");
                } else {
                  ctx.supervisor.remove_engine(address);
                }
                respond(http::json_response(Json{{"success", true}, {"address", address}}));
              });
            });
          });
        },
        admin_only(ctx, what, command_body(ctx)));
  }

  // Named LoRA adapters on the engine's base: list, create (or load), save, remove.
  out.add(
      "adapters",
      [&ctx](Request req, Respond respond) {
        if (!check_admin(ctx, req, respond, "GET /adapters")) return;
        ctx.pool.post([&ctx, respond] {
          answer_errors(respond, [&] {
            Json reply = call_adapters(ctx, "GET /adapters", rpc::kMethodAdapters, Json::object());
            if (auto model = ctx.model()) reply["model"] = model->served_name;
            respond(http::json_response(reply));
          });
        });
      },
      admin_only(ctx, "GET /adapters", command_body(ctx)));
  struct AdapterRoute {
    const char* name;
    const char* what;
    std::string_view method;
  };
  for (const AdapterRoute& r :
       {AdapterRoute{"adapter_create", "POST /adapters", rpc::kMethodAdapterCreate},
        AdapterRoute{"adapter_save", "POST /adapters/save", rpc::kMethodAdapterSave},
        AdapterRoute{"adapter_remove", "POST /adapters/remove", rpc::kMethodAdapterRemove},
        AdapterRoute{"adapter_evict", "POST /adapters/evict", rpc::kMethodAdapterEvict}}) {
    out.add(
        r.name,
        [&ctx, limit, r](Request req, Respond respond) {
          if (!check_admin(ctx, req, respond, r.what)) return;
          answer_errors(respond, [&] {
            Json body = parse_json_body(req, limit);
            ctx.pool.post([&ctx, respond, r, body = std::move(body)]() mutable {
              answer_errors(respond, [&] {
                respond(http::json_response(call_adapters(ctx, r.what, r.method, std::move(body))));
              });
            });
          });
        },
        admin_only(ctx, r.what, command_body(ctx)));
  }
}

}  // namespace ajet::swarm
