#include "classic/run_metrics.h"

#include <fmt/format.h>

#include <cmath>

namespace ajet::classic {

namespace {

// A finite number at `from[key]` into out[name]; nothing for null, strings or objects.
void copy_number(Json& out, const std::string& name, const Json& from, const char* key) {
  if (!from.is_object()) return;
  auto it = from.find(key);
  if (it == from.end() || !it->is_number() || !std::isfinite(it->get<double>())) return;
  out[name] = it->get<double>();
}

void put_number(Json& out, const std::string& name, double value) {
  if (std::isfinite(value)) out[name] = value;
}

// "" for the whole run, "@task" for one task of a cocktail.
std::string task_suffix(const std::string& task) {
  return task == "all" ? "" : "@" + metric_piece(task);
}

}  // namespace

std::string metric_piece(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '-';
    out.push_back(ok ? c : '_');
  }
  return out.empty() ? "_" : out;
}

Json train_step_metrics(const Json& record, bool with_success_rate) {
  Json out = Json::object();
  const Json rollout = record.value("rollout", Json::object());
  copy_number(out, "rollout/llm_calls", rollout, "llm_calls");
  copy_number(out, "rollout/completion_tokens", rollout, "completion_tokens");
  copy_number(out, "rollout/failed", rollout, "failed");
  if (with_success_rate) copy_number(out, "rollout/success_rate", rollout, "success_rate");
  const Json terminations = rollout.value("terminations", Json::object());
  for (const auto& [kind, count] : terminations.items()) {
    if (count.is_number())
      put_number(out, "rollout/termination/" + metric_piece(kind), count.get<double>());
  }
  const Json log_metrics = rollout.value("log_metrics", Json::object());
  for (const auto& [name, mean] : log_metrics.items()) {
    if (mean.is_number()) put_number(out, "workflow/" + metric_piece(name), mean.get<double>());
  }
  copy_number(out, "timing/rollout_s", record, "rollout_time_s");
  copy_number(out, "timing/train_wait_s", record, "train_wait_s");
  copy_number(out, "timing/launcher_step_s", record, "step_time_s");
  copy_number(out, "perf/rollout_tokens_per_s", record, "tokens_per_s");
  copy_number(out, "progress/epoch", record, "epoch");
  const Json sampling = record.value("sampling", Json::object());
  for (const char* key : {"gen_batches", "groups", "informative_groups"}) {
    copy_number(out, std::string("sampling/") + key, sampling, key);
  }
  const Json cocktail = record.value("cocktail", Json::object());
  for (const auto& [task, numbers] : cocktail.items()) {
    for (const char* key :
         {"share", "tasks_per_batch", "tasks", "episodes", "reward_mean", "success_rate"}) {
      copy_number(out, fmt::format("rollout/{}{}", key, task_suffix(task)), numbers, key);
    }
  }
  return out;
}

Json validation_metrics(const Json& record,
                        const std::vector<std::pair<std::string, PassTable>>& tables) {
  Json out = Json::object();
  auto summary_numbers = [&](const Json& v, const std::string& suffix) {
    for (const char* key : {"greedy_success", "greedy_reward", "sampled_success", "tasks"}) {
      copy_number(out, fmt::format("val/{}{}", key, suffix), v, key);
    }
    if (v.is_object() && v.value("k", Json()).is_number_integer()) {
      copy_number(out, fmt::format("val/pass_at_{}{}", v["k"].get<int64_t>(), suffix), v,
                  "pass_at_k");
    }
  };
  summary_numbers(record.value("validation", Json::object()), "");
  const Json cocktail = record.value("cocktail", Json::object());
  for (const auto& [task, v] : cocktail.items()) summary_numbers(v, task_suffix(task));
  for (const auto& [task, t] : tables) {
    const std::string suffix = task_suffix(task);
    for (const auto& [k, rate] : t.task_pass_rate)
      put_number(out, fmt::format("val/pass_at_{}{}", k, suffix), rate);
    put_number(out, "val/all_success_tasks" + suffix, double(t.num_all_success_tasks));
    put_number(out, "val/pass_n_tasks" + suffix, double(t.num_pass_n_tasks));
    put_number(out, "val/reward_mean" + suffix, t.mean_reward);
    put_number(out, "val/reward_std" + suffix, t.std_reward);
  }
  return out;
}

}  // namespace ajet::classic
