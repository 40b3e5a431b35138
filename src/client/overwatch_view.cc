#include "client/overwatch_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "common/time_text.h"

namespace ajet::client {

namespace {

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string clock_text(double unix_seconds) { return local_time_text("%H:%M:%S", std::time_t(unix_seconds)); }

size_t utf8_length(unsigned char lead) { return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1; }

// Cuts `text` to `width` columns (one per UTF-8 code point), marking a cut with "…".
std::string fit(const std::string& text, size_t width) {
  size_t points = 0;
  for (size_t i = 0; i < text.size(); i += utf8_length(static_cast<unsigned char>(text[i]))) points += 1;
  if (points <= width) return text;
  size_t keep = 0;
  for (size_t n = 0; n + 1 < width && keep < text.size(); ++n) keep += utf8_length(static_cast<unsigned char>(text[keep]));
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
    {"rollout_until_finish_enough_episodes", "Completed episodes", "completed_episodes", "completed_episode_target"},
    {"rollout_until_finish_enough_tasks", "Completed tasks", "completed_tasks", "completed_task_target"},
    {"rollout_until_finish_enough_non_dummy_tasks", "Completed non-dummy tasks", "completed_non_dummy_tasks",
     "completed_non_dummy_task_target"},
};

}  // namespace

OverwatchSnapshot fetch_overwatch(http::HttpClient& http, const std::string& url, double refresh_interval,
                                  uint64_t requests, uint64_t errors) {
  OverwatchSnapshot s;
  s.url = url;
  s.refresh_interval = refresh_interval;
  s.requests = requests + 1;
  s.errors = errors;
  s.fetched_at = now_unix();
  try {
    auto get = [&](const char* path) {
      http::ClientResponse r = http.get(path);
      Json body = Json::parse(r.body, nullptr, false);
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

std::vector<StyledLine> render_overwatch(const OverwatchSnapshot& s, const OverwatchLayout& layout) {
  std::vector<StyledLine> out;
  const size_t w = std::max<size_t>(layout.width, 20);
  auto add = [&](std::string text, LineStyle style = LineStyle::kNormal) { out.push_back({fit(text, w), style}); };

  add(fmt::format("AgentJet swarm overwatch  {}  now {}  last update {}  refresh {:.1f}s  requests {}  errors {}", s.url,
                  clock_text(now_unix()), s.fetched_at > 0 ? clock_text(s.fetched_at) : "-", s.refresh_interval,
                  s.requests, s.errors),
      LineStyle::kTitle);
  if (!s.connected) {
    add(fmt::format("Engine: ENGINE.CANNOT_CONNECT  ({}); retrying every {:.1f}s", s.error, s.refresh_interval),
        LineStyle::kBad);
    return out;
  }
  const Json& p = s.pool;
  const std::string status = str_of(s.status, "engine_status").empty() ? str_of(p, "engine_status")
                                                                       : str_of(s.status, "engine_status");
  std::string head = fmt::format("Engine: {}  global step {}", status, int_of(s.status, "global_step"));
  if (!str_of(p, "backbone").empty()) head += "  backbone " + str_of(p, "backbone");
  if (auto b = p.find("booting_start_time"); status == "ENGINE.BOOTING" && b != p.end() && b->is_number()) {
    head += "  booting for " + duration_text(s.fetched_at - b->get<double>());
  }
  add(head, status_style(status));
  if (std::string detail = str_of(s.status, "engine_status_detail"); !detail.empty()) add("  " + detail, LineStyle::kDim);
  if (std::string model = str_of(p, "training_model_path"); !model.empty()) add("  model " + model, LineStyle::kDim);

  // Progress toward the next weight update, one row per trigger; the configured one is marked.
  const std::string method = str_of(p, "sample_collection_method");
  add("");
  add(fmt::format("Progress to the next weight update  (trigger: {})", method.empty() ? "?" : method),
      LineStyle::kSection);
  for (const Progress& row : kProgressRows) {
    int64_t cur = int_of(p, row.current), target = int_of(p, row.target);
    double frac = target > 0 ? double(cur) / double(target) : 0.0;
    bool chosen = method == row.method;
    add(fmt::format("  {:<27}{:>6} / {:<6}{:>5.0f}%  {}{}", row.label, cur, target, 100 * frac, bar(frac),
                    chosen ? "  (chosen)" : ""),
        chosen ? LineStyle::kChosen : LineStyle::kNormal);
  }
  const Json clients = p.value("active_clients", Json::array());
  if (method.find("agree_sync_weight") != std::string::npos || !clients.empty()) {
    int64_t agreed = 0;
    for (const auto& c : clients) agreed += c.is_object() && c.value("agreed_sync_weight", false) ? 1 : 0;
    bool chosen = method.find("agree_sync_weight") != std::string::npos;
    bool all = method.find("all_clients") != std::string::npos;
    double frac = clients.empty() ? 0.0 : all ? double(agreed) / double(clients.size()) : (agreed > 0 ? 1.0 : 0.0);
    add(fmt::format("  {:<27}{:>6} / {:<6}{:>5.0f}%  {}{}", "Clients agreeing to sync", agreed, clients.size(),
                    100 * frac, bar(frac), chosen ? "  (chosen)" : ""),
        chosen ? LineStyle::kChosen : LineStyle::kNormal);
  }
  const Json details = p.value("completed_tasks_details", Json::object());
  size_t n_tasks = details.is_object() ? details.size() : 0, n_eps = 0;
  for (const auto& [task, eps] : details.items()) n_eps += eps.is_array() ? eps.size() : 0;
  add(fmt::format("  {:<27}{:>6.2f} / {} expected", "Average episodes per task",
                  n_tasks ? double(n_eps) / double(n_tasks) : 0.0, int_of(p, "task_expected_num_repeat")));
  add(fmt::format("  pool: {} claimable, {} claimed (pool size {})  batches recorded {}, in training {}",
                  int_of(p, "registered_episodes"), int_of(p, "claimed_episodes"), int_of(p, "pool_size"),
                  int_of(p, "batches_recorded"), int_of(p, "batches_in_training")),
      LineStyle::kDim);

  // Running episodes, longest idle first.
  struct Running {
    std::string uuid, client, task, calls;
    double idle, timeout;
  };
  std::vector<Running> running;
  Json run = p.value("running_episode_details", Json::object());  // null when nothing runs, as upstream
  if (!run.is_object()) run = Json::object();
  for (const auto& [uuid, d] : run.items()) {
    if (!d.is_object()) continue;
    running.push_back({uuid, str_of(d, "client_uuid"), str_of(d, "optional_task_id"), str_of(d, "llm_call_count"),
                       num_of(d, "time_since_last_activity"), num_of(d, "discard_episode_timeout")});
  }
  std::sort(running.begin(), running.end(), [](const Running& a, const Running& b) {
    return a.idle != b.idle ? a.idle > b.idle : a.uuid < b.uuid;
  });
  add("");
  add(fmt::format("Running episodes ({}{})", running.size(),
                  running.size() > layout.max_episodes ? fmt::format(", {} longest idle shown", layout.max_episodes) : ""),
      LineStyle::kSection);
  if (!running.empty()) {
    add(fmt::format("  {:<34}{:>10}{:>10}{:>7}  {:<14}{}", "episode", "idle", "timeout", "calls", "client", "task"),
        LineStyle::kColumns);
  }
  for (size_t i = 0; i < running.size() && i < layout.max_episodes; ++i) {
    const Running& r = running[i];
    bool late = r.timeout > 0 && r.idle > 0.8 * r.timeout;
    add(fmt::format("  {:<34}{:>10}{:>10}{:>7}  {:<14}{}", r.uuid, duration_text(r.idle), duration_text(r.timeout),
                    r.calls, r.client.substr(0, 12), r.task),
        late ? LineStyle::kWarn : LineStyle::kNormal);
  }

  // Tasks of the current batch, most episodes first, with reward mean ± std.
  struct Task {
    std::string id;
    size_t episodes;
    std::string rewards;
    std::string first;
  };
  std::vector<Task> tasks;
  const Json stats = p.value("completed_tasks_reward_stats", Json::object());
  for (const auto& [task, eps] : details.items()) {
    Task t{task, eps.is_array() ? eps.size() : 0, "-", ""};
    if (auto st = stats.find(task); st != stats.end() && st->is_object()) {
      t.rewards = fmt::format("{:+.3f} ± {:.3f}", num_of(*st, "reward_mean"), num_of(*st, "reward_std"));
    }
    for (size_t i = 0; eps.is_array() && i < eps.size() && i < 3; ++i) {
      t.first += (i ? " " : "") + (eps[i].is_string() ? eps[i].get<std::string>().substr(0, 8) : eps[i].dump());
    }
    tasks.push_back(std::move(t));
  }
  std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
    return a.episodes != b.episodes ? a.episodes > b.episodes : a.id < b.id;
  });
  add("");
  add(fmt::format("Tasks in this batch ({}{})", tasks.size(),
                  tasks.size() > layout.max_tasks ? fmt::format(", top {} shown", layout.max_tasks) : ""),
      LineStyle::kSection);
  if (!tasks.empty()) {
    add(fmt::format("  {:<28}{:>9}  {:<20}{}", "task", "episodes", "reward mean ± std", "first episodes"),
        LineStyle::kColumns);
  }
  const int64_t repeat = int_of(p, "task_expected_num_repeat");
  for (size_t i = 0; i < tasks.size() && i < layout.max_tasks; ++i) {
    const Task& t = tasks[i];
    add(fmt::format("  {:<28}{:>9}  {:<20}{}", t.id.empty() ? "(no task id)" : t.id, t.episodes, t.rewards, t.first),
        repeat > 0 && int64_t(t.episodes) >= repeat ? LineStyle::kGood : LineStyle::kNormal);
  }

  // Recent verbose log lines, newest last.
  add("");
  add("Recent log", LineStyle::kSection);
  const size_t n_logs = s.logs.is_array() ? s.logs.size() : 0;
  for (size_t i = n_logs > layout.max_log_lines ? n_logs - layout.max_log_lines : 0; i < n_logs; ++i) {
    const Json& e = s.logs[i];
    if (!e.is_object()) continue;
    add(fmt::format("  {} [{}] {}", clock_text(num_of(e, "timestamp")), str_of(e, "tag"), str_of(e, "message")),
        LineStyle::kDim);
  }
  if (n_logs == 0) add("  (none)", LineStyle::kDim);
  return out;
}

std::string overwatch_text(const OverwatchSnapshot& snapshot, const OverwatchLayout& layout) {
  std::string text;
  for (const auto& line : render_overwatch(snapshot, layout)) text += line.text + "\n";
  return text;
}

}  // namespace ajet::client
