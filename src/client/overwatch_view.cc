#include "client/overwatch_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "client/swarm_client.h"
#include "common/json.h"
#include "common/time_text.h"
#include "config/backbone.h"

namespace ajet::client {

namespace {

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string clock_text(double unix_seconds) {
  return local_time_text("%H:%M:%S", std::time_t(unix_seconds));
}

size_t utf8_length(unsigned char lead) {
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

// Cuts `text` to `width` columns (one per UTF-8 code point), marking a cut with "…".
std::string fit(const std::string& text, size_t width) {
  size_t points = 0;
  for (size_t i = 0; i < text.size(); i += utf8_length(static_cast<unsigned char>(text[i])))
    points += 1;
  if (points <= width) return text;
  size_t keep = 0;
  for (size_t n = 0; n + 1 < width && keep < text.size(); ++n)
    keep += utf8_length(static_cast<unsigned char>(text[keep]));
  return text.substr(0, std::min(keep, text.size())) + "…";
}

int64_t int_of(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number()) return it->get<int64_t>();
  return 0;
}

double num_of(const Json& j, const char* key, double fallback = 0) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number()) return it->get<double>();
  if (it->is_string()) {  // upstream types running-episode values as strings ("12.3s")
    try {
      return std::stod(it->get<std::string>());
    } catch (...) {
      return fallback;
    }
  }
  return fallback;
}

std::string str_of(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string bar(double fraction, size_t width = 20) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  size_t filled = size_t(std::lround(fraction * double(width)));
  std::string out = "[";
  for (size_t i = 0; i < width; ++i) out += i < filled ? "#" : ".";
  return out + "]";
}

std::string duration_text(double seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  if (seconds < 3600) return fmt::format("{}m{:02}s", int64_t(seconds) / 60, int64_t(seconds) % 60);
  return fmt::format("{}h{:02}m", int64_t(seconds) / 3600, (int64_t(seconds) % 3600) / 60);
}

LineStyle status_style(const std::string& status) {
  if (status == "ENGINE.ROLLING" || status == "ENGINE.ROLLING_POST") return LineStyle::kGood;
  if (status == "ENGINE.OFFLINE" || status == "ENGINE.CANNOT_CONNECT") return LineStyle::kBad;
  return LineStyle::kWarn;
}

struct Progress {
  const char* method;
  const char* label;
  const char* current;
  const char* target;
};

constexpr Progress kProgressRows[] = {
    {"rollout_until_finish_enough_episodes", "Completed episodes", "completed_episodes",
     "completed_episode_target"},
    {"rollout_until_finish_enough_tasks", "Completed tasks", "completed_tasks",
     "completed_task_target"},
    {"rollout_until_finish_enough_non_dummy_tasks", "Completed non-dummy tasks",
     "completed_non_dummy_tasks", "completed_non_dummy_task_target"},
};

}  // namespace

OverwatchSnapshot fetch_overwatch(http::HttpClient& http, const std::string& url,
                                  double refresh_interval, uint64_t requests, uint64_t errors) {
  OverwatchSnapshot s;
  s.url = url;
  s.refresh_interval = refresh_interval;
  s.requests = requests + 1;
  s.errors = errors;
  s.fetched_at = now_unix();
  try {
    // The admin token (AJET_ADMIN_TOKEN(S), as the clients read it) shows every client's id in the
    // pool information; without it other clients' ids are pseudonyms (docs/protocol.md).
    http::Headers headers;
    if (const std::string token = admin_token_for(url); !token.empty())
      headers.add("Authorization", "Bearer " + token);
    auto get = [&](const char* path) {
      http::ClientResponse r = http.get(path, headers);
      Json body = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
      if (r.status != 200 || body.is_discarded()) {
        throw std::runtime_error(fmt::format("GET {} answered HTTP {}", path, r.status));
      }
      return body;
    };
    s.status = get("/get_engine_status");
    s.pool = get("/get_current_batch_rollout_pool_information");
    Json logs = get("/get_verbose_logs");
    s.logs = logs.value("entries", Json::array());
    s.connected = true;
  } catch (const std::exception& e) {
    http.close();
    s.connected = false;
    s.error = e.what();
    s.errors += 1;
  }
  return s;
}

namespace {

// The lines being rendered, each cut to the layout's width.
class Lines {
 public:
  explicit Lines(size_t width) : width_(std::max<size_t>(width, 20)) {}
  void add(const std::string& text, LineStyle style = LineStyle::kNormal) {
    out_.push_back({fit(text, width_), style});
  }
  std::vector<StyledLine> take() { return std::move(out_); }

 private:
  size_t width_;
  std::vector<StyledLine> out_;
};

std::string engine_status_of(const OverwatchSnapshot& s) {
  const std::string status = str_of(s.status, "engine_status");
  return status.empty() ? str_of(s.pool, "engine_status") : status;
}

// Engine status, global step, backbone, booting time; the status detail and the model path.
void add_engine(Lines& lines, const OverwatchSnapshot& s) {
  const Json& p = s.pool;
  const std::string status = engine_status_of(s);
  std::string head =
      fmt::format("Engine: {}  global step {}", status, int_of(s.status, "global_step"));
  if (!str_of(p, "backbone").empty()) head += "  backbone " + str_of(p, "backbone");
  if (auto b = p.find("booting_start_time");
      status == "ENGINE.BOOTING" && b != p.end() && b->is_number()) {
    head += "  booting for " + duration_text(s.fetched_at - b->get<double>());
  }
  lines.add(head, status_style(status));
  if (std::string detail = str_of(s.status, "engine_status_detail"); !detail.empty()) {
    lines.add("  " + detail, LineStyle::kDim);
  }
  if (std::string model = str_of(p, "training_model_path"); !model.empty())
    lines.add("  model " + model, LineStyle::kDim);
}

// Progress toward the next weight update, one row per trigger; the configured one is marked.
void add_progress(Lines& lines, const OverwatchSnapshot& s) {
  const Json& p = s.pool;
  const std::string method = str_of(p, "sample_collection_method");
  lines.add(fmt::format("Progress to the next weight update  (trigger: {})",
                        method.empty() ? "?" : method),
            LineStyle::kSection);
  for (const Progress& row : kProgressRows) {
    int64_t cur = int_of(p, row.current), target = int_of(p, row.target);
    double frac = target > 0 ? double(cur) / double(target) : 0.0;
    bool chosen = method == row.method;
    lines.add(fmt::format("  {:<27}{:>6} / {:<6}{:>5.0f}%  {}{}", row.label, cur, target,
                          100 * frac, bar(frac), chosen ? "  (chosen)" : ""),
              chosen ? LineStyle::kChosen : LineStyle::kNormal);
  }
  const Json clients = p.value("active_clients", Json::array());
  if (method.find("agree_sync_weight") != std::string::npos || !clients.empty()) {
    int64_t agreed = 0;
    for (const auto& c : clients)
      agreed += c.is_object() && c.value("agreed_sync_weight", false) ? 1 : 0;
    bool chosen = method.find("agree_sync_weight") != std::string::npos;
    bool all = method.find("all_clients") != std::string::npos;
    double frac = clients.empty() ? 0.0
                  : all           ? double(agreed) / double(clients.size())
                                  : (agreed > 0 ? 1.0 : 0.0);
    lines.add(
        fmt::format("  {:<27}{:>6} / {:<6}{:>5.0f}%  {}{}", "Clients agreeing to sync", agreed,
                    clients.size(), 100 * frac, bar(frac), chosen ? "  (chosen)" : ""),
        chosen ? LineStyle::kChosen : LineStyle::kNormal);
  }
  const Json details = p.value("completed_tasks_details", Json::object());
  size_t n_tasks = details.is_object() ? details.size() : 0, n_eps = 0;
  for (const auto& [task, eps] : details.items()) n_eps += eps.is_array() ? eps.size() : 0;
  lines.add(fmt::format("  {:<27}{:>6.2f} / {} expected", "Average episodes per task",
                        n_tasks ? double(n_eps) / double(n_tasks) : 0.0,
                        int_of(p, "task_expected_num_repeat")));
  std::string prepared;
  if (int64_t n = int_of(p, "prepared_episodes"); n > 0)
    prepared = fmt::format(" ({} prepared in groups)", n);
  lines.add(
      fmt::format(
          "  pool: {} claimable, {} claimed{} (pool size {})  batches recorded {}, in training {}",
          int_of(p, "registered_episodes"), int_of(p, "claimed_episodes"), prepared,
          int_of(p, "pool_size"), int_of(p, "batches_recorded"), int_of(p, "batches_in_training")),
      LineStyle::kDim);
}

std::string number_or_dash(const Json& j, const char* key, const char* format) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "-";
  return fmt::format(fmt::runtime(format), it->get<double>());
}

// The pool's backbone name (the wire's) is the debug backbone: nothing trains.
bool is_debug_backbone(const std::string& name) {
  try {
    return !config::trains(config::parse_backbone(name));
  } catch (const Error&) {
    return false;  // an older or newer front's name
  }
}

// The newest trained batch of GET /get_engine_status `recent_batches` (this server's model):
// reward, success, loss, KL; a newer batch that was not trained is named with its error.
void add_last_batch(Lines& lines, const OverwatchSnapshot& s) {
  const std::vector<BatchOutcome> recent = parse_recent_batches(s.status);
  const BatchOutcome* trained = nullptr;
  const BatchOutcome* refused = nullptr;  // newer than `trained`
  for (auto b = recent.rbegin(); b != recent.rend(); ++b) {
    if (b->trained) {
      trained = &*b;
      break;
    }
    if (refused == nullptr) refused = &*b;
  }
  if (trained == nullptr && is_debug_backbone(str_of(s.pool, "backbone"))) {
    lines.add(
        fmt::format(
            "Newest trained batch: none (debug backbone: {} batches recorded, nothing trains)",
            int_of(s.pool, "batches_recorded")),
        LineStyle::kDim);
  } else if (trained == nullptr) {
    lines.add("Newest trained batch: none yet", LineStyle::kDim);
  } else {
    const Json stats = trained->stats.is_object() ? trained->stats : Json::object();
    const Json rollout = stats.value("rollout", Json::object());
    auto success = rollout.find("success_rate");
    lines.add(
        fmt::format("Newest trained batch: step {} (batch {})  episodes {}  reward mean {} ± {}  "
                    "success {}  "
                    "loss {}  KL {}",
                    trained->global_step, trained->batch_id, int_of(rollout, "episodes"),
                    number_or_dash(rollout, "reward_mean", "{:+.3f}"),
                    number_or_dash(rollout, "reward_std", "{:.3f}"),
                    success != rollout.end() && success->is_number()
                        ? fmt::format("{:.1f}%", 100 * success->get<double>())
                        : std::string("-"),
                    number_or_dash(stats, "loss", "{:.4f}"), number_or_dash(stats, "kl", "{:.4f}")),
        LineStyle::kGood);
  }
  if (refused != nullptr) {
    lines.add(
        fmt::format("  batch {} (step {}) was not trained: {}: {}", refused->batch_id,
                    refused->global_step, refused->error_code(), str_of(refused->error, "message")),
        LineStyle::kBad);
  }
}

// Each client's share of the current batch (pool info `completed_client_shares`), largest first.
void add_client_shares(Lines& lines, const OverwatchSnapshot& s, size_t max_clients) {
  struct Share {
    std::string client;
    int64_t episodes, tasks;
    double share;
  };
  std::vector<Share> shares;
  const Json all = s.pool.value("completed_client_shares", Json::object());
  for (const auto& [client, d] : all.items()) {
    if (d.is_object())
      shares.push_back({client, int_of(d, "episodes"), int_of(d, "tasks"), num_of(d, "share")});
  }
  std::sort(shares.begin(), shares.end(), [](const Share& a, const Share& b) {
    return a.share != b.share ? a.share > b.share : a.client < b.client;
  });
  lines.add(
      fmt::format("Client shares of this batch ({}{})", shares.size(),
                  shares.size() > max_clients ? fmt::format(", top {} shown", max_clients) : ""),
      LineStyle::kSection);
  for (size_t i = 0; i < shares.size() && i < max_clients; ++i) {
    const Share& c = shares[i];
    lines.add(fmt::format("  {:<34}{:>5.0f}%  {}{:>7} episodes{:>6} tasks", c.client.substr(0, 32),
                          100 * c.share, bar(c.share), c.episodes, c.tasks));
  }
  if (shares.empty()) lines.add("  (none yet)", LineStyle::kDim);
}

// Running episodes, longest idle first.
void add_running(Lines& lines, const OverwatchSnapshot& s, size_t max_episodes) {
  struct Running {
    std::string uuid, client, task, calls;
    double idle, timeout;
  };
  std::vector<Running> running;
  Json run = s.pool.value("running_episode_details",
                          Json::object());  // null when nothing runs, as upstream
  if (!run.is_object()) run = Json::object();
  for (const auto& [uuid, d] : run.items()) {
    if (!d.is_object()) continue;
    running.push_back({uuid, str_of(d, "client_uuid"), str_of(d, "optional_task_id"),
                       str_of(d, "llm_call_count"), num_of(d, "time_since_last_activity"),
                       num_of(d, "discard_episode_timeout")});
  }
  std::sort(running.begin(), running.end(), [](const Running& a, const Running& b) {
    return a.idle != b.idle ? a.idle > b.idle : a.uuid < b.uuid;
  });
  lines.add(fmt::format("Running episodes ({}{})", running.size(),
                        running.size() > max_episodes
                            ? fmt::format(", {} longest idle shown", max_episodes)
                            : ""),
            LineStyle::kSection);
  if (!running.empty()) {
    lines.add(fmt::format("  {:<34}{:>10}{:>10}{:>7}  {:<14}{}", "episode", "idle", "timeout",
                          "calls", "client", "task"),
              LineStyle::kColumns);
  }
  for (size_t i = 0; i < running.size() && i < max_episodes; ++i) {
    const Running& r = running[i];
    bool late = r.timeout > 0 && r.idle > 0.8 * r.timeout;
    lines.add(fmt::format("  {:<34}{:>10}{:>10}{:>7}  {:<14}{}", r.uuid, duration_text(r.idle),
                          duration_text(r.timeout), r.calls, r.client.substr(0, 12), r.task),
              late ? LineStyle::kWarn : LineStyle::kNormal);
  }
}

// Tasks of the current batch, most episodes first, with reward mean ± std.
void add_tasks(Lines& lines, const OverwatchSnapshot& s, size_t max_tasks) {
  struct Task {
    std::string id;
    size_t episodes;
    std::string rewards;
    std::string first;
  };
  std::vector<Task> tasks;
  const Json details = s.pool.value("completed_tasks_details", Json::object());
  const Json stats = s.pool.value("completed_tasks_reward_stats", Json::object());
  for (const auto& [task, eps] : details.items()) {
    Task t{task, eps.is_array() ? eps.size() : 0, "-", ""};
    if (auto st = stats.find(task); st != stats.end() && st->is_object()) {
      t.rewards =
          fmt::format("{:+.3f} ± {:.3f}", num_of(*st, "reward_mean"), num_of(*st, "reward_std"));
    }
    for (size_t i = 0; eps.is_array() && i < eps.size() && i < 3; ++i) {
      if (i > 0) t.first += " ";
      t.first += eps[i].is_string() ? eps[i].get<std::string>().substr(0, 8) : eps[i].dump();
    }
    tasks.push_back(std::move(t));
  }
  std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
    return a.episodes != b.episodes ? a.episodes > b.episodes : a.id < b.id;
  });
  lines.add(fmt::format("Tasks in this batch ({}{})", tasks.size(),
                        tasks.size() > max_tasks ? fmt::format(", top {} shown", max_tasks) : ""),
            LineStyle::kSection);
  if (!tasks.empty()) {
    lines.add(fmt::format("  {:<28}{:>9}  {:<20}{}", "task", "episodes", "reward mean ± std",
                          "first episodes"),
              LineStyle::kColumns);
  }
  const int64_t repeat = int_of(s.pool, "task_expected_num_repeat");
  for (size_t i = 0; i < tasks.size() && i < max_tasks; ++i) {
    const Task& t = tasks[i];
    lines.add(fmt::format("  {:<28}{:>9}  {:<20}{}", t.id.empty() ? "(no task id)" : t.id,
                          t.episodes, t.rewards, t.first),
              repeat > 0 && int64_t(t.episodes) >= repeat ? LineStyle::kGood : LineStyle::kNormal);
  }
}

// Recent verbose log lines, newest last.
void add_logs(Lines& lines, const OverwatchSnapshot& s, size_t max_log_lines) {
  lines.add("Recent log", LineStyle::kSection);
  const size_t n_logs = s.logs.is_array() ? s.logs.size() : 0;
  for (size_t i = n_logs > max_log_lines ? n_logs - max_log_lines : 0; i < n_logs; ++i) {
    const Json& e = s.logs[i];
    if (!e.is_object()) continue;
    lines.add(fmt::format("  {} [{}] {}", clock_text(num_of(e, "timestamp")), str_of(e, "tag"),
                          str_of(e, "message")),
              LineStyle::kDim);
  }
  if (n_logs == 0) lines.add("  (none)", LineStyle::kDim);
}

void add_cannot_connect(Lines& lines, const OverwatchSnapshot& s) {
  lines.add(fmt::format("Engine: ENGINE.CANNOT_CONNECT  ({}); retrying every {:.1f}s", s.error,
                        s.refresh_interval),
            LineStyle::kBad);
}

}  // namespace

std::vector<StyledLine> render_overwatch(const OverwatchSnapshot& s,
                                         const OverwatchLayout& layout) {
  Lines lines(layout.width);
  lines.add(
      fmt::format("AgentJet swarm overwatch  {}  now {}  last update {}  refresh {:.1f}s  requests "
                  "{}  errors {}",
                  s.url, clock_text(now_unix()), s.fetched_at > 0 ? clock_text(s.fetched_at) : "-",
                  s.refresh_interval, s.requests, s.errors),
      LineStyle::kTitle);
  if (!s.connected) {
    add_cannot_connect(lines, s);
    return lines.take();
  }
  add_engine(lines, s);
  lines.add("");
  add_progress(lines, s);
  add_last_batch(lines, s);
  lines.add("");
  add_client_shares(lines, s, layout.max_clients);
  lines.add("");
  add_running(lines, s, layout.max_episodes);
  lines.add("");
  add_tasks(lines, s, layout.max_tasks);
  lines.add("");
  add_logs(lines, s, layout.max_log_lines);
  return lines.take();
}

std::vector<StyledLine> render_overwatch(const std::vector<OverwatchSnapshot>& snapshots,
                                         const OverwatchLayout& layout) {
  if (snapshots.size() == 1) return render_overwatch(snapshots.front(), layout);
  Lines lines(layout.width);
  uint64_t requests = 0, errors = 0;
  double refresh = snapshots.empty() ? 0 : snapshots.front().refresh_interval;
  for (const auto& s : snapshots) {
    requests += s.requests;
    errors += s.errors;
  }
  lines.add(
      fmt::format(
          "AgentJet swarm overwatch  {} servers  now {}  refresh {:.1f}s  requests {}  errors {}",
          snapshots.size(), clock_text(now_unix()), refresh, requests, errors),
      LineStyle::kTitle);
  for (size_t i = 0; i < snapshots.size(); ++i) {
    const OverwatchSnapshot& s = snapshots[i];
    lines.add("");
    lines.add(fmt::format("Server {} of {}: {}  last update {}  requests {}  errors {}", i + 1,
                          snapshots.size(), s.url,
                          s.fetched_at > 0 ? clock_text(s.fetched_at) : "-", s.requests, s.errors),
              LineStyle::kTitle);
    if (!s.connected) {
      add_cannot_connect(lines, s);
      continue;
    }
    add_engine(lines, s);
    add_progress(lines, s);
    add_last_batch(lines, s);
    add_client_shares(lines, s, layout.max_clients);
    const Json run = s.pool.value("running_episode_details", Json::object());
    lines.add(fmt::format("Running episodes: {}", run.is_object() ? run.size() : 0),
              LineStyle::kDim);
  }
  return lines.take();
}

std::string overwatch_text(const OverwatchSnapshot& snapshot, const OverwatchLayout& layout) {
  std::string text;
  for (const auto& line : render_overwatch(snapshot, layout)) text += line.text + "\n";
  return text;
}

std::string overwatch_text(const std::vector<OverwatchSnapshot>& snapshots,
                           const OverwatchLayout& layout) {
  std::string text;
  for (const auto& line : render_overwatch(snapshots, layout)) text += line.text + "\n";
  return text;
}

}  // namespace ajet::client
