#include "classic/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "common/error.h"
#include "common/fs.h"

namespace ajet::classic {

namespace {
bool success_of(const EpisodeResult& r) {
  return r.report.output.is_success.value_or(r.report.output.reward >= 1.0);
}
}  // namespace

GroupCounts count_groups(const std::vector<EpisodeResult>& results) {
  std::map<std::string, std::pair<double, bool>>
      first_and_equal;  // task id -> (first reward, all equal)
  for (const auto& r : results) {
    if (!r.ended || r.job.task == nullptr) continue;
    const double reward = r.report.output.reward;
    auto [it, fresh] = first_and_equal.try_emplace(r.job.task->task_id, reward, true);
    if (!fresh && reward != it->second.first) it->second.second = false;
  }
  GroupCounts c;
  for (const auto& [task, v] : first_and_equal) {
    c.groups += 1;
    c.informative += v.second ? 0 : 1;
  }
  return c;
}

RolloutSummary summarize(const std::vector<EpisodeResult>& results) {
  RolloutSummary s;
  double reward_sum = 0;
  int64_t successes = 0;
  std::map<std::string, std::pair<double, int64_t>> metric_sums;
  std::map<std::string, int64_t> terms;
  for (const auto& r : results) {
    if (!r.ended) {
      s.failed += 1;
      continue;
    }
    s.episodes += 1;
    reward_sum += r.report.output.reward;
    successes += success_of(r) ? 1 : 0;
    s.llm_calls += r.report.llm_calls;
    s.completion_tokens += r.report.completion_tokens;
    terms[r.report.termination.empty() ? "unknown" : r.report.termination] += 1;
    for (const auto& [k, v] : r.report.output.log_metrics.items()) {
      if (!v.is_number()) continue;
      auto& acc = metric_sums[k];
      acc.first += v.get<double>();
      acc.second += 1;
    }
  }
  if (s.episodes > 0) {
    s.reward_mean = reward_sum / double(s.episodes);
    s.success_rate = double(successes) / double(s.episodes);
  }
  for (const auto& [k, n] : terms) s.terminations[k] = n;
  for (const auto& [k, acc] : metric_sums) s.log_metrics[k] = acc.first / double(acc.second);
  return s;
}

ValidationSummary summarize_validation(const std::vector<EpisodeResult>& greedy,
                                       const std::vector<EpisodeResult>& sampled, int64_t k) {
  ValidationSummary v;
  v.k = k;
  std::set<std::string> tasks;
  int64_t g_ok = 0, g_n = 0;
  double g_reward = 0;
  for (const auto& r : greedy) {
    tasks.insert(r.job.task->task_id);
    g_n += 1;
    if (r.ended) {
      g_ok += success_of(r) ? 1 : 0;
      g_reward += r.report.output.reward;
    }
  }
  std::map<std::string, bool> any_success;
  int64_t s_ok = 0, s_n = 0;
  for (const auto& r : sampled) {
    tasks.insert(r.job.task->task_id);
    bool ok = r.ended && success_of(r);
    s_n += 1;
    s_ok += ok ? 1 : 0;
    any_success[r.job.task->task_id] = any_success[r.job.task->task_id] || ok;
  }
  v.tasks = int64_t(tasks.size());
  if (g_n > 0) {
    v.greedy_success = double(g_ok) / double(g_n);
    v.greedy_reward = g_reward / double(g_n);
  }
  if (s_n > 0) v.sampled_success = double(s_ok) / double(s_n);
  if (!any_success.empty()) {
    int64_t passed = 0;
    for (const auto& [t, ok] : any_success) passed += ok ? 1 : 0;
    v.pass_at_k = double(passed) / double(any_success.size());
  }
  return v;
}

Json trainer_metrics(const Json& status_body, const Json& pool_info) {
  static const std::vector<std::string> kContainers = {"last_train_stats", "train_stats", "trainer",
                                                       "last_batch_stats"};
  static const std::vector<std::string> kWanted = {
      "loss",    "kl",     "entropy", "merge",  "ratio",   "clip", "grad",
      "lr",      "tokens", "version", "groups", "samples", "time", "rollout_logprob",
      "distill", "madness"};
  const Json* found = nullptr;
  for (const Json* body : {&status_body, &pool_info}) {
    if (!body->is_object()) continue;
    for (const auto& c : kContainers) {
      auto it = body->find(c);
      if (it != body->end() && it->is_object()) {
        found = &*it;
        break;
      }
    }
    if (found) break;
  }
  Json out = Json::object();
  if (!found) return out;
  // Flatten one level of nesting ("train": {"loss": ..}) into "train/loss"; a step of named
  // adapters ("adapters": {"solver": {"loss": ..}}) gives each its own series, "loss@solver".
  std::function<void(const Json&, const std::string&, int)> walk =
      [&](const Json& j, const std::string& prefix, int depth) {
        for (const auto& [k, v] : j.items()) {
          if (prefix.empty() && k == "adapters" && v.is_object()) {
            for (const auto& [adapter, m] : v.items()) {
              if (!m.is_object()) continue;
              Json renamed = Json::object();
              for (const auto& [key, value] : m.items()) renamed[key + "@" + adapter] = value;
              walk(renamed, "", 2);
            }
            continue;
          }
          std::string name = prefix.empty() ? k : prefix + "/" + k;
          if (v.is_object() && depth < 2) {
            walk(v, name, depth + 1);
          } else if (v.is_number()) {
            for (const auto& w : kWanted) {
              if (name.find(w) != std::string::npos) {
                out[name] = v;
                break;
              }
            }
          }
        }
      };
  walk(*found, "", 0);
  return out;
}

std::string progress_bar(int64_t step, int64_t total_steps, int64_t done, int64_t total,
                         double reward_mean, double tokens_per_s, int width) {
  return progress_bar(StepProgress{step, total_steps, {}, {}}, done, total, reward_mean,
                      tokens_per_s, width);
}

std::string progress_bar(const StepProgress& progress, int64_t done, int64_t total,
                         double reward_mean, double tokens_per_s, int width) {
  int filled = total > 0 ? int(std::lround(double(width) * double(done) / double(total))) : width;
  filled = std::clamp(filled, 0, width);
  return fmt::format("step {} [{}{}] {}/{} episodes  reward {:.3f}  {:.0f} tok/s", progress.label(),
                     std::string(size_t(filled), '#'), std::string(size_t(width - filled), '.'),
                     done, total, reward_mean, tokens_per_s);
}

namespace {
// The first trainer metric whose name ends with one of `names`.
std::optional<double> pick(const Json& trainer, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    for (const auto& [k, v] : trainer.items()) {
      std::string key = k;
      std::string want = n;
      if (key == want || (key.size() > want.size() &&
                          key.compare(key.size() - want.size(), want.size(), want) == 0 &&
                          key[key.size() - want.size() - 1] == '/')) {
        return v.get<double>();
      }
    }
  }
  return std::nullopt;
}
std::string opt(const char* label, std::optional<double> v, const char* format) {
  if (!v) return fmt::format("  {} -", label);
  return fmt::format("  {} ", label) + fmt::format(fmt::runtime(format), *v);
}
}  // namespace

std::string step_line(const Json& record, int64_t total_steps) {
  return step_line(record, fmt::format("{}/{}", record.at("step").get<int64_t>(), total_steps));
}

std::string step_line(const Json& record, const std::string& progress_label) {
  const Json& r = record.at("rollout");
  const Json trainer = record.value("trainer", Json::object());
  std::string line = fmt::format("step {}  reward {:.3f}  success {:.1f}%", progress_label,
                                 r.value("reward_mean", 0.0), 100.0 * r.value("success_rate", 0.0));
  line += opt("loss", pick(trainer, {"loss", "pg_loss", "policy_loss"}), "{:.4f}");
  line += opt("kl", pick(trainer, {"kl", "kl_loss", "ppo_kl"}), "{:.4f}");
  line += opt("entropy", pick(trainer, {"entropy"}), "{:.3f}");
  line +=
      opt("merge", pick(trainer, {"merge_ratio", "compression_ratio", "merge_speedup"}), "{:.2f}x");
  if (const Json sampling = record.value("sampling", Json::object());
      sampling.value("gen_batches", 1) > 1) {
    line += fmt::format("  signal groups {}/{}", sampling.value("informative_groups", 0),
                        sampling.value("groups", 0));
  }
  // async: how many policy versions the batch's episodes lagged the trainer, mean/max.
  if (const Json stale = record.value("staleness", Json()); stale.is_object()) {
    const Json mean = stale.value("mean", Json()), most = stale.value("max", Json());
    line += fmt::format("  staleness {}/{}",
                        mean.is_number() ? fmt::format("{:.2f}", mean.get<double>()) : "-",
                        most.is_number() ? std::to_string(most.get<int64_t>()) : "-");
  }
  line += fmt::format("  {:.1f} s", record.value("step_time_s", 0.0));
  return line;
}

std::string validation_line(const Json& record) {
  const Json& v = record.at("validation");
  return fmt::format(
      "val @ step {}  greedy {:.1f}%  pass@{} {:.1f}%  sampled {:.1f}%  ({} tasks, {:.1f} s)",
      record.at("step").get<int64_t>(), 100.0 * v.value("greedy_success", 0.0), v.value("k", 0),
      100.0 * v.value("pass_at_k", 0.0), 100.0 * v.value("sampled_success", 0.0),
      v.value("tasks", 0), record.value("time_s", 0.0));
}

namespace {
// The change between two validation summaries, e.g. "sampled 48.5% -> 77.0% (+28.5), greedy …".
std::string validation_change(const Json& a, const Json& b) {
  auto change = [&](const char* key) {
    const double x = 100.0 * a.value(key, 0.0), y = 100.0 * b.value(key, 0.0);
    return fmt::format("{:.1f}% -> {:.1f}% ({:+.1f})", x, y, y - x);
  };
  return fmt::format("sampled {}, greedy {}, pass@{} {}", change("sampled_success"),
                     change("greedy_success"), b.value("k", 0), change("pass_at_k"));
}

// The first and the last validation record among `records` (null, null when there is none).
std::pair<const Json*, const Json*> first_and_last_validation(const std::vector<Json>& records) {
  const Json* first = nullptr;
  const Json* last = nullptr;
  for (const Json& r : records) {
    if (r.value("kind", "") != "validation" || !r.contains("validation")) continue;
    if (first == nullptr) first = &r;
    last = &r;
  }
  return {first, last};
}
}  // namespace

std::string learning_summary(const std::vector<Json>& records) {
  const auto [first, last] = first_and_last_validation(records);
  if (first == nullptr || first == last) return "";
  return fmt::format("held-out success, step {} -> {}: {}", first->at("step").get<int64_t>(),
                     last->at("step").get<int64_t>(),
                     validation_change(first->at("validation"), last->at("validation")));
}

std::vector<std::string> cocktail_learning_summary(const std::vector<Json>& records) {
  const auto [first, last] = first_and_last_validation(records);
  std::vector<std::string> lines;
  if (first == nullptr || first == last || !first->contains("cocktail") ||
      !last->contains("cocktail"))
    return lines;
  for (const auto& [name, b] : last->at("cocktail").items()) {
    if (!first->at("cocktail").contains(name)) continue;
    lines.push_back(fmt::format("held-out success of {}, step {} -> {}: {}", name,
                                first->at("step").get<int64_t>(), last->at("step").get<int64_t>(),
                                validation_change(first->at("cocktail")[name], b)));
  }
  return lines;
}

std::string cocktail_step_line(const Json& record) {
  std::string line = "  tasks:";
  std::string sep = " ";
  const Json tasks = record.value("cocktail", Json::object());
  for (const auto& [name, t] : tasks.items()) {
    line += fmt::format("{}{} {} ({:.0f}%)", sep, name, t.value("tasks", 0),
                        100.0 * t.value("share", 0.0));
    if (t.contains("reward_mean") && t["reward_mean"].is_number()) {
      line += fmt::format(" reward {:.3f} success {:.1f}%", t["reward_mean"].get<double>(),
                          100.0 * t["success_rate"].get<double>());
    }
    sep = " | ";
  }
  return line;
}

std::string cocktail_validation_line(const Json& record) {
  std::string line = "  val per task:";
  std::string sep = " ";
  const Json tasks = record.value("cocktail", Json::object());
  for (const auto& [name, v] : tasks.items()) {
    line += fmt::format("{}{} greedy {:.1f}% pass@{} {:.1f}% sampled {:.1f}% ({})", sep, name,
                        100.0 * v.value("greedy_success", 0.0), v.value("k", 0),
                        100.0 * v.value("pass_at_k", 0.0), 100.0 * v.value("sampled_success", 0.0),
                        v.value("tasks", 0));
    sep = " | ";
  }
  return line;
}

Json rollout_json(const RolloutSummary& s) {
  return Json{{"episodes", s.episodes},         {"failed", s.failed},
              {"reward_mean", s.reward_mean},   {"success_rate", s.success_rate},
              {"llm_calls", s.llm_calls},       {"completion_tokens", s.completion_tokens},
              {"terminations", s.terminations}, {"log_metrics", s.log_metrics}};
}

Json validation_json(const ValidationSummary& s) {
  return Json{{"tasks", s.tasks},
              {"greedy_success", s.greedy_success},
              {"greedy_reward", s.greedy_reward},
              {"k", s.k},
              {"sampled_success", s.sampled_success},
              {"pass_at_k", s.pass_at_k}};
}

void append_jsonl(const std::filesystem::path& path, const Json& record) {
  std::ofstream out(path, std::ios::app);
  if (!out) fail(ErrorCode::kIo, "cannot append to " + path.string());
  out << record.dump() << '\n';
}

}  // namespace ajet::classic
