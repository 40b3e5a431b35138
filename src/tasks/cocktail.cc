#include "tasks/cocktail.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "common/error.h"

namespace ajet::tasks {

namespace {

// Progress through the schedule at `step`: 0 at step 1, 1 from end_step + 1 on.
double schedule_progress(const config::CocktailScheduleConfig& schedule, int64_t step) {
  const int64_t end_step = std::max<int64_t>(1, schedule.end_step.value_or(1));
  return std::clamp(double(step - 1) / double(end_step), 0.0, 1.0);
}

}  // namespace

double first_task_share(const config::CocktailConfig& cocktail, int64_t step) {
  const config::CocktailScheduleConfig& s = cocktail.schedule;
  if (s.type == "fixed") {
    double sum = 0;
    for (const auto& t : cocktail.tasks) sum += t.weight;
    return cocktail.tasks.empty() || sum <= 0 ? 1.0 : cocktail.tasks.front().weight / sum;
  }
  const double start = s.start.value_or(1.0);
  if (s.type == "constant") return start;
  const double end = s.end.value_or(start);
  const double t = schedule_progress(s, step);
  if (s.type == "linear") return start + (end - start) * t;
  if (s.type == "cos") return end + (start - end) * 0.5 * (1.0 + std::cos(M_PI * t));
  invalid_argument(
      "ajet.task_reader.cocktail.schedule.type must be fixed, constant, linear or cos, got '" +
      s.type + "'");
}

std::vector<double> cocktail_shares(const config::CocktailConfig& cocktail, int64_t step) {
  const size_t n = cocktail.tasks.size();
  std::vector<double> shares(n, 0.0);
  if (n == 0) return shares;
  const double first = std::clamp(first_task_share(cocktail, step), 0.0, 1.0);
  shares[0] = first;
  double rest_weight = 0;
  for (size_t i = 1; i < n; ++i) rest_weight += cocktail.tasks[i].weight;
  for (size_t i = 1; i < n; ++i) {
    shares[i] = rest_weight > 0 ? (1.0 - first) * cocktail.tasks[i].weight / rest_weight : 0.0;
  }
  if (rest_weight <= 0) shares[0] = 1.0;  // nothing else can take the rest
  return shares;
}

std::vector<int64_t> split_by_shares(const std::vector<double>& shares, int64_t total) {
  std::vector<int64_t> counts(shares.size(), 0);
  if (shares.empty() || total <= 0) return counts;
  const double sum = std::accumulate(shares.begin(), shares.end(), 0.0);
  if (sum <= 0) invalid_argument("split_by_shares: the shares must not all be 0");
  // 1. Each task's exact quota and its whole part.
  std::vector<double> remainder(shares.size());
  int64_t given = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    // Rounded to 1e-9 so that 0.3 * 10 = 2.9999999999999996 counts as the 3 it means.
    const double quota = std::round(double(total) * std::max(0.0, shares[i]) / sum * 1e9) / 1e9;
    counts[i] = int64_t(std::floor(quota));
    remainder[i] = quota - double(counts[i]);
    given += counts[i];
  }
  // 2. The tasks left over, one each to the largest remainders (ties: the earlier task).
  std::vector<size_t> order(shares.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; given < total; k = (k + 1) % order.size(), ++given) counts[order[k]] += 1;
  return counts;
}

std::vector<CocktailSource> load_cocktail(const config::CocktailConfig& cocktail,
                                          const std::filesystem::path& base_dir) {
  std::vector<CocktailSource> sources;
  std::unordered_map<std::string, size_t> owner;  // training task id -> the task that has it
  for (size_t i = 0; i < cocktail.tasks.size(); ++i) {
    const std::string name = config::cocktail_task_name(cocktail.tasks[i]);
    const std::string key = fmt::format("ajet.task_reader.cocktail.tasks[{}] ({})", i, name);
    CocktailSource source{name, {}};
    try {
      source.sets = load_tasks(cocktail.tasks[i].source, base_dir);
    } catch (const Error& e) {
      throw Error(e.code(), key + ": " + e.what());
    }
    if (source.sets.training.empty()) {
      invalid_argument(key + " yields no training tasks (after filters)");
    }
    for (const Task& t : source.sets.training) {
      if (auto [it, fresh] = owner.emplace(t.task_id, i); !fresh) {
        invalid_argument(fmt::format(
            "{} and ajet.task_reader.cocktail.tasks[{}] ({}) share the training task id "
            "'{}'; the tasks of a cocktail must be distinct",
            key, it->second, sources[it->second].name, t.task_id));
      }
    }
    sources.push_back(std::move(source));
  }
  return sources;
}

}  // namespace ajet::tasks
