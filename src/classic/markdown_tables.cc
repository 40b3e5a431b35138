#include "classic/markdown_tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "common/error.h"

namespace ajet::classic {

namespace {

bool episode_succeeded(const EpisodeResult& r) {
  return r.ended && r.report.output.is_success.value_or(r.report.output.reward >= 1.0);
}

struct MeanStd {
  double mean = 0;
  double std = 0;
};

MeanStd ended_rewards(const std::vector<EpisodeResult>& results) {
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (const auto& r : results) {
    if (!r.ended) continue;
    sum += r.report.output.reward;
    n += 1;
  }
  if (n == 0) return {};
  const double mean = sum / double(n);
  for (const auto& r : results) {
    if (r.ended) sq += (r.report.output.reward - mean) * (r.report.output.reward - mean);
  }
  return {mean, std::sqrt(sq / double(n))};
}

std::string md_cell(double v) { return fmt::format("{:.4f}", v); }

std::string md_table(const std::vector<std::string>& header,
                     const std::vector<std::vector<std::string>>& rows) {
  std::string out = "|";
  std::string rule = "|";
  for (size_t i = 0; i < header.size(); ++i) {
    out += " " + header[i] + " |";
    rule += i == 0 ? ":--|" : "--:|";
  }
  out += "\n" + rule + "\n";
  for (const auto& row : rows) {
    out += "|";
    for (const auto& cell : row) out += " " + cell + " |";
    out += "\n";
  }
  return out;
}

}  // namespace

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n - c < k) return 1.0;
  double all_fail = 1.0;  // C(n-c, k) / C(n, k)
  for (int64_t i = n - c + 1; i <= n; ++i) all_fail *= 1.0 - double(k) / double(i);
  return 1.0 - all_fail;
}

PassTable pass_table(const std::vector<EpisodeResult>& greedy,
                     const std::vector<EpisodeResult>& sampled) {
  const std::vector<EpisodeResult>& samples = sampled.empty() ? greedy : sampled;
  std::map<std::string, std::pair<int64_t, int64_t>> per_task;  // task id -> (samples, successes)
  for (const auto& r : samples) {
    auto& [n, c] = per_task[r.job.task->task_id];
    n += 1;
    c += episode_succeeded(r) ? 1 : 0;
  }
  PassTable t;
  t.total_tasks = int64_t(per_task.size());
  for (const auto& [task, nc] : per_task) {
    t.pass_n = std::max(t.pass_n, nc.first);
    t.num_all_success_tasks += nc.second == nc.first ? 1 : 0;
    t.num_pass_n_tasks += nc.second > 0 ? 1 : 0;
  }
  for (int64_t k = 1; k <= std::min<int64_t>(t.pass_n, 8); k *= 2) {
    double sum = 0;
    int64_t tasks = 0;
    for (const auto& [task, nc] : per_task) {
      if (nc.first < k)
        continue;  // a task with fewer samples (some never ran) has no estimate at k
      sum += pass_at_k(nc.first, nc.second, k);
      tasks += 1;
    }
    t.task_pass_rate.emplace_back(k, tasks > 0 ? sum / double(tasks) : 0.0);
  }
  const MeanStd rewards = ended_rewards(samples);
  t.mean_reward = rewards.mean;
  t.std_reward = rewards.std;
  int64_t greedy_ok = 0;
  for (const auto& r : greedy) greedy_ok += episode_succeeded(r) ? 1 : 0;
  t.greedy_success = greedy.empty() ? 0.0 : double(greedy_ok) / double(greedy.size());
  return t;
}

RolloutTable rollout_table(const std::vector<EpisodeResult>& results) {
  RolloutTable t;
  int64_t successes = 0;
  for (const auto& r : results) {
    if (!r.ended) continue;
    t.episodes += 1;
    successes += episode_succeeded(r) ? 1 : 0;
  }
  const MeanStd rewards = ended_rewards(results);
  t.reward_mean = rewards.mean;
  t.reward_std = rewards.std;
  t.success_rate = t.episodes > 0 ? double(successes) / double(t.episodes) : 0.0;
  return t;
}

std::string validation_markdown(int64_t step,
                                const std::vector<std::pair<std::string, PassTable>>& rows) {
  // Columns for every k some row has (rows of one validation share pass_n).
  std::vector<int64_t> ks;
  for (const auto& [name, t] : rows) {
    for (const auto& [k, rate] : t.task_pass_rate) {
      if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
    }
  }
  std::sort(ks.begin(), ks.end());
  std::vector<std::string> header = {"task", "pass_n", "total_tasks", "num_all_success_tasks",
                                     "num_pass_n_tasks"};
  for (int64_t k : ks) header.push_back(fmt::format("task_pass_rate@{}", k));
  header.insert(header.end(), {"mean_reward", "std_reward", "greedy_success"});
  std::vector<std::vector<std::string>> cells;
  for (const auto& [name, t] : rows) {
    std::vector<std::string> row = {name, std::to_string(t.pass_n), std::to_string(t.total_tasks),
                                    std::to_string(t.num_all_success_tasks),
                                    std::to_string(t.num_pass_n_tasks)};
    for (int64_t k : ks) {
      auto it = std::find_if(t.task_pass_rate.begin(), t.task_pass_rate.end(),
                             [&](const auto& p) { return p.first == k; });
      row.push_back(it == t.task_pass_rate.end() ? "-" : md_cell(it->second));
    }
    row.insert(row.end(),
               {md_cell(t.mean_reward), md_cell(t.std_reward), md_cell(t.greedy_success)});
    cells.push_back(std::move(row));
  }
  return fmt::format("\n### Validation at step {}\n\n", step) + md_table(header, cells);
}

std::string train_markdown(int64_t step,
                           const std::vector<std::pair<std::string, RolloutTable>>& rows) {
  const std::vector<std::string> header = {"task", "episodes", "reward_mean", "reward_std",
                                           "success_rate"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& [name, t] : rows) {
    cells.push_back({name, std::to_string(t.episodes), md_cell(t.reward_mean),
                     md_cell(t.reward_std), md_cell(t.success_rate)});
  }
  return fmt::format("\n### Training step {}\n\n", step) + md_table(header, cells);
}

void append_markdown(const std::filesystem::path& path, const std::string& section) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::app);
  if (!out) fail(ErrorCode::kIo, "cannot append to " + path.string());
  out << section;
  if (!out.flush()) fail(ErrorCode::kIo, "cannot write " + path.string());
}

}  // namespace ajet::classic
