// POST /ledger/draw and GET /ledger (docs/protocol.md "The task ledger"): the classic launcher
// records each task it draws before its episodes run; anyone with the admin token reads the ledger
// back, with the summary (trained, dropped by reason, skipped, duplicated). What batches do to the
// rows is written by the batch loop (engine_control/batch_runner.cc), not here.
#include <fmt/format.h>

#include "episodes/registry.h"
#include "http/response.h"
#include "openai/openai_errors.h"
#include "store/store.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"

namespace ajet::swarm {

namespace {

using http::Request;
using http::Respond;

constexpr size_t kMaxDrawsPerRequest = 100000;

int64_t ledger_int_field(const Json& object, const char* name, const std::string& where,
                         int64_t least) {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_number_integer() || it->get<int64_t>() < least) {
    invalid_argument(
        fmt::format("ledger/draw: {}'{}' must be an integer >= {}", where, name, least));
  }
  return it->get<int64_t>();
}

std::string ledger_text_field(const Json& object, const char* name, const std::string& where) {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string() || it->get<std::string>().empty()) {
    invalid_argument(fmt::format("ledger/draw: {}'{}' must be a non-empty string", where, name));
  }
  return it->get<std::string>();
}

// {"step": N, "draws": [{"task_id", "source", "seq", "repeat_in_step"?}]} → ledger rows.
std::vector<store::LedgerRow> draws_from(const Json& body) {
  const int64_t step = ledger_int_field(body, "step", "", 1);
  const auto draws = body.find("draws");
  if (draws == body.end() || !draws->is_array()) {
    invalid_argument("ledger/draw: 'draws' must be an array of {task_id, source, seq}");
  }
  if (draws->size() > kMaxDrawsPerRequest) {
    invalid_argument(fmt::format("ledger/draw: {} draws in one request; at most {}", draws->size(),
                                 kMaxDrawsPerRequest));
  }
  std::vector<store::LedgerRow> rows;
  for (size_t i = 0; i < draws->size(); ++i) {
    const Json& d = (*draws)[i];
    const std::string where = fmt::format("draws[{}].", i);
    if (!d.is_object()) invalid_argument("ledger/draw: " + where + " must be an object");
    store::LedgerRow r;
    r.task_id = ledger_text_field(d, "task_id", where);
    r.source = ledger_text_field(d, "source", where);
    r.seq = ledger_int_field(d, "seq", where, 0);
    r.key = store::draw_key(r.source, r.seq);
    r.drawn_step = step;
    if (d.value("repeat_in_step", false)) {
      r.state = store::kLedgerDropped;
      r.reason = store::kDropRepeatInStep;
      r.step = step;
      r.consumed = 1;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

http::Response ledger_needs_admin(std::string_view route) {
  return openai::openai_error(
      401, std::string(route) + " needs the admin token (Authorization: Bearer <token>)",
      "unauthenticated");
}

}  // namespace

void add_ledger_handlers(RouteHandlers& out, ServerContext& ctx) {
  const size_t limit = ctx.options.max_json_body_bytes;
  out.add(
      "ledger_draw",
      [&ctx, limit](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(ledger_needs_admin("POST /ledger/draw"));
          return;
        }
        answer_errors(respond, [&] {
          std::vector<store::LedgerRow> rows = draws_from(parse_json_body(req, limit));
          const size_t n = rows.size();
          // Answered once the draws are committed: a launcher runs no episode of an unrecorded
          // draw.
          ctx.store.ledger_draw(std::move(rows), [respond, n](std::exception_ptr error) {
            if (!error) {
              respond(http::json_response(Json{{"success", true}, {"recorded", n}}));
              return;
            }
            answer_errors(respond, [&] { std::rethrow_exception(error); });
          });
        });
      },
      admin_only(ctx, "POST /ledger/draw", body_limit(limit, "ajet-swarm start --max-json-mb")));

  out.add(
      "ledger",
      [&ctx](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(ledger_needs_admin("GET /ledger"));
          return;
        }
        const auto rows_param = req.query.find("rows");
        const bool with_rows = rows_param != req.query.end() && rows_param->second == "1";
        ctx.pool.post([&ctx, with_rows, respond] {
          answer_errors(respond, [&] {
            ctx.store.flush().get();  // what the batch loop and a reconcile queued is read too
            const std::vector<store::LedgerRow> rows = ctx.store.ledger_rows();
            const int64_t through = ctx.registry.global_step();
            Json body{{"global_step", through},
                      {"summary", store::summarize(rows, through).to_json()}};
            if (with_rows) {
              Json list = Json::array();
              for (const store::LedgerRow& r : rows) list.push_back(r.to_json());
              body["rows"] = std::move(list);
            }
            respond(http::json_response(body));
          });
        });
      },
      admin_only(ctx, "GET /ledger", command_body(ctx)));
}

}  // namespace ajet::swarm
