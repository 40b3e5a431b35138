// POST /log_metrics and GET /metrics_history (docs/protocol.md "Metrics"): numbers from outside the
// front (the classic launcher's rollout and validation summaries, any admin's script) into the
// store's `metrics` table and TensorBoard, and every series back out for the dashboard.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

#include "episodes/batch_metrics.h"
#include "episodes/registry.h"
#include "http/response.h"
#include "openai/openai_errors.h"
#include "store/store.h"
#include "swarm/metrics_sink.h"
#include "swarm/routes.h"
#include "swarm/work_pool.h"

namespace ajet::swarm {

namespace {

using http::Request;
using http::Respond;

constexpr size_t kMaxNamesPerLog = 1000;
constexpr size_t kMaxNamesPerHistory = 32;

std::string quoted_prefix(std::string_view name) {
  constexpr size_t kShown = 60;
  std::string out =
      "'";  // appended piece by piece: GCC 12 warns (-Wrestrict) on "'" + std::string(...)
  out.append(name.substr(0, kShown));
  out += name.size() > kShown ? "…'" : "'";
  return out;
}

// The body's step: a non-negative integer.
int64_t logged_step(const Json& body) {
  auto it = body.find("step");
  if (it == body.end())
    invalid_argument("log_metrics: 'step' is required (a non-negative integer)");
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())) {
    return it->get<int64_t>();
  }
  if (it->is_number_integer() && it->get<int64_t>() >= 0) return it->get<int64_t>();
  invalid_argument("log_metrics: 'step' must be a non-negative integer, got " + it->dump());
}

// {"step": N, "metrics": {"name": number, ...}} checked whole before anything is written.
episodes::MetricValues logged_values(const Json& body) {
  for (const auto& [key, value] : body.items()) {
    if (key != "step" && key != "metrics") {
      invalid_argument("log_metrics: unknown field " + quoted_prefix(key) +
                       " (the body is {\"step\": N, \"metrics\": "
                       "{\"name\": number, ...}})");
    }
  }
  auto it = body.find("metrics");
  if (it == body.end() || !it->is_object()) {
    invalid_argument(
        std::string("log_metrics: 'metrics' must be an object of name -> number, got ") +
        (it == body.end() ? std::string("nothing") : std::string(json_type_name(*it))));
  }
  if (it->empty()) invalid_argument("log_metrics: 'metrics' is empty; send at least one name");
  if (it->size() > kMaxNamesPerLog) {
    invalid_argument(fmt::format("log_metrics: 'metrics' holds {} names; at most {} per request",
                                 it->size(), kMaxNamesPerLog));
  }
  episodes::MetricValues values;
  for (const auto& [name, value] : it->items()) {
    if (name.size() > episodes::kMaxMetricNameLength) {
      invalid_argument(fmt::format("log_metrics: metric name {} is {} characters long; at most {}",
                                   quoted_prefix(name), name.size(),
                                   episodes::kMaxMetricNameLength));
    }
    if (!episodes::valid_metric_name(name)) {
      invalid_argument("log_metrics: metric name " + quoted_prefix(name) +
                       " must be 1-200 characters of A-Z a-z 0-9 _ . / @ : -");
    }
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      invalid_argument("log_metrics: metrics['" + name + "'] must be a finite number, got " +
                       value.dump());
    }
    values.emplace_back(name, value.get<double>());
  }
  return values;
}

int64_t after_step_param(const Request& request) {
  auto it = request.query.find("after_step");
  if (it == request.query.end()) return -1;
  const std::string& text = it->second;
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) {
    invalid_argument("metrics_history: after_step must be an integer, got " + quoted_prefix(text));
  }
  return value;
}

std::vector<std::string> history_names(const std::string& list) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    names.push_back(
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (names.size() > kMaxNamesPerHistory) {
    invalid_argument(fmt::format("metrics_history: {} names asked; at most {} per request",
                                 names.size(), kMaxNamesPerHistory));
  }
  for (const std::string& name : names) {
    if (!episodes::valid_metric_name(name)) {
      invalid_argument("metrics_history: name " + quoted_prefix(name) +
                       " is not a metric name (1-200 characters of A-Z a-z 0-9 _ . / @ : -, names "
                       "separated by ',')");
    }
  }
  return names;
}

Json history_json(ServerContext& ctx, const std::optional<std::vector<std::string>>& names,
                  int64_t after_step) {
  Json out = Json::object();
  if (!names) {
    Json list = Json::array();
    for (const store::MetricSeriesInfo& info : ctx.store.list_metric_names()) {
      list.push_back(
          Json{{"name", info.name}, {"points", info.points}, {"last_step", info.last_step}});
    }
    out["names"] = std::move(list);
  } else {
    Json series = Json::object();
    for (const std::string& name : *names) {
      Json points = Json::array();
      for (const store::MetricRow& row : ctx.store.get_metrics_after(name, after_step)) {
        points.push_back(Json::array({row.step, row.value, row.created_at}));
      }
      series[name] = std::move(points);
    }
    out["series"] = std::move(series);
  }
  out["global_step"] = ctx.registry.global_step();
  return out;
}

http::Response needs_admin(std::string_view route) {
  return openai::openai_error(
      401, std::string(route) + " needs the admin token (Authorization: Bearer <token>)",
      "unauthenticated");
}

}  // namespace

void add_metrics_handlers(RouteHandlers& out, ServerContext& ctx, MetricsSink& sink) {
  const size_t limit = ctx.options.max_json_body_bytes;
  out.add(
      "log_metrics",
      [&ctx, &sink, limit](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(needs_admin("POST /log_metrics"));
          return;
        }
        answer_errors(respond, [&] {
          const Json body = parse_json_body(req, limit);
          const int64_t step = logged_step(body);
          episodes::MetricValues values = logged_values(body);
          const size_t written = values.size();
          // Answered once the store committed the numbers (and the event file has them).
          sink.record(step, std::move(values), episodes::system_clock_seconds(),
                      [respond, step, written](std::exception_ptr error) {
                        if (!error) {
                          respond(http::json_response(
                              Json{{"success", true}, {"step", step}, {"written", written}}));
                          return;
                        }
                        answer_errors(respond, [&] { std::rethrow_exception(error); });
                      });
        });
      },
      admin_only(ctx, "POST /log_metrics", body_limit(limit, "ajet-swarm start --max-json-mb")));

  out.add(
      "metrics_history",
      [&ctx](Request req, Respond respond) {
        if (!ctx.admin_ok(req)) {
          respond(needs_admin("GET /metrics_history"));
          return;
        }
        answer_errors(respond, [&] {
          std::optional<std::vector<std::string>> names;
          if (auto it = req.query.find("name"); it != req.query.end())
            names = history_names(it->second);
          const int64_t after_step = after_step_param(req);
          ctx.pool.post([&ctx, names = std::move(names), after_step, respond] {
            answer_errors(respond, [&] {
              ctx.store.flush().get();  // the registry's queued batch numbers are listed too
              respond(http::json_response(history_json(ctx, names, after_step)));
            });
          });
        });
      },
      admin_only(ctx, "GET /metrics_history", command_body(ctx)));
}

}  // namespace ajet::swarm
