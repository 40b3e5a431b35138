// Multi-task "cocktail" training: several task sources, each with its own training tasks and
// validation set, mixed per step by a schedule of the first task's share (upstream's cocktail v2).
// Pure and deterministic: the same config and step give the same shares and counts. Nothing here
// draws tasks or knows about episodes; classic/task_mix.h does the drawing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "tasks/reader.h"

namespace ajet::tasks {

// The first task's share of step `step` (1-based), t = min((step - 1) / end_step, 1):
//   fixed     weight[0] / sum of weights
//   constant  start
//   linear    start + (end - start) * t
//   cos       end + (start - end) * (1 + cos(pi * t)) / 2
// So step 1 gets `start` and every step from end_step + 1 on gets `end`.
double first_task_share(const config::CocktailConfig& cocktail, int64_t step);

// Every task's share of step `step`, summing to 1: the first by the schedule, the others the rest
// in proportion to their weights (fixed: all by weight).
std::vector<double> cocktail_shares(const config::CocktailConfig& cocktail, int64_t step);

// Splits `total` tasks by `shares` (largest remainder): each gets floor(total * share), the tasks
// left over go one each to the largest fractional parts, ties to the earlier task. The counts sum
// to `total` and each is within 1 of total * share; with two tasks the first gets round(total *
// share).
std::vector<int64_t> split_by_shares(const std::vector<double>& shares, int64_t total);

// One loaded task of a cocktail: its name (config::cocktail_task_name) and its two task sets.
struct CocktailSource {
  std::string name;
  TaskSets sets;
};

// Loads every task of the cocktail with load_tasks (relative files against base_dir). Throws
// Error(kInvalidArgument) naming the task when one yields no training tasks, or when two tasks
// share a training task id (the front groups episodes by task id, so a shared id would merge two
// groups).
std::vector<CocktailSource> load_cocktail(const config::CocktailConfig& cocktail,
                                          const std::filesystem::path& base_dir = {});

}  // namespace ajet::tasks
