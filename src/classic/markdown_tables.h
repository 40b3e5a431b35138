// Upstream's Markdown logs for research agents (ajet.trainer_common.val_print_to_markdown_file_path
// / train_print_to_markdown_file_path): per validation a pass@k table, per training step a rollout
// table, each appended to its file as one section. Upstream's field names are the column names
// (pass_n, total_tasks, num_all_success_tasks, num_pass_n_tasks, task_pass_rate@k, mean_reward,
// std_reward), so agents that read upstream's files find the same words. Pure functions besides the
// one appender.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "classic/episode_runner.h"

namespace ajet::classic {

// The unbiased pass@k estimate for one task with n samples of which c succeeded:
// 1 - C(n-c, k) / C(n, k) (Chen et al. 2021), computed as 1 - prod_{i=n-c+1..n} (1 - k/i). 1 when
// fewer than k samples failed; requires 1 <= k <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

// One validation's pass@k numbers over the sampled episodes (val_pass_n per task, at the rollout
// temperature); greedy_success from the greedy ones.
struct PassTable {
  int64_t pass_n = 0;  // samples per task (the most any task had)
  int64_t total_tasks = 0;
  int64_t num_all_success_tasks = 0;  // tasks whose samples all succeeded
  int64_t num_pass_n_tasks = 0;       // tasks with at least one success
  std::vector<std::pair<int64_t, double>>
      task_pass_rate;      // (k, mean over tasks of pass_at_k) for k = 1, 2, 4, 8 <= pass_n
  double mean_reward = 0;  // over the sampled episodes that ended
  double std_reward = 0;   // population standard deviation
  double greedy_success = 0;
};
PassTable pass_table(const std::vector<EpisodeResult>& greedy,
                     const std::vector<EpisodeResult>& sampled);

// One step's rollout numbers (ended episodes; success: is_success, else reward >= 1).
struct RolloutTable {
  int64_t episodes = 0;
  double reward_mean = 0;
  double reward_std = 0;
  double success_rate = 0;
};
RolloutTable rollout_table(const std::vector<EpisodeResult>& results);

// "\n### Validation at step 3\n\n| task | pass_n | … |\n|:--|--:…|\n| all | 4 | … |\n" — one row
// per (name, table), "all" first in a cocktail.
std::string validation_markdown(int64_t step,
                                const std::vector<std::pair<std::string, PassTable>>& rows);
std::string train_markdown(int64_t step,
                           const std::vector<std::pair<std::string, RolloutTable>>& rows);

// Appends `section` (creating the file and its directory). Throws Error(kIo) naming the path.
void append_markdown(const std::filesystem::path& path, const std::string& section);

}  // namespace ajet::classic
