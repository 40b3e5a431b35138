#include "train_data/dist_split.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "common/error.h"

namespace ajet::train_data {

std::vector<Batch> split_batch(const Batch& batch, int world_size,
                               const AdvantageOptions& advantage) {
  if (world_size < 1)
    invalid_argument("split_batch: world_size must be >= 1, got " + std::to_string(world_size));
  const size_t n = batch.samples.size();
  const bool given = batch.has_advantages();
  const bool batch_level = !given && advantage.estimator == AdvantageEstimator::kReinforcePP;

  // Batch-level advantages, exactly as Trainer::train_step computes them on one rank.
  std::vector<std::vector<float>> attached(n);
  std::vector<uint8_t> keep(n, 1);
  const EpisodeIndex episodes = index_episodes(batch);
  if (batch_level) {
    AdvantageResult r = compute_advantages(episodes.rewards, episodes.groups, advantage);
    for (size_t i = 0; i < n; ++i) {
      keep[i] = r.kept[episodes.episode_of[i]];
      attached[i].assign(batch.samples[i].size(),
                         static_cast<float>(r.advantages[episodes.episode_of[i]]));
    }
  }

  // Units that must stay on one rank, in order of first appearance.
  std::map<std::string, size_t> unit_index;
  std::vector<std::vector<size_t>> units;
  std::vector<int64_t> unit_tokens;
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    const TrainSample& s = batch.samples[i];
    std::string key;
    // An empty task_id is a group like any other: compute_advantages puts every such episode in one
    // (upstream's behaviour when clients send none), so the split must keep them on one rank.
    if (!given && !batch_level) {
      key = "group " + s.task_id;
    } else {
      key = "episode " + std::to_string(episodes.episode_of[i]);
    }
    auto [it, fresh] = unit_index.emplace(key, units.size());
    if (fresh) {
      units.emplace_back();
      unit_tokens.push_back(0);
    }
    units[it->second].push_back(i);
    unit_tokens[it->second] += static_cast<int64_t>(s.size());
  }

  // Longest processing time first: largest unit to the least loaded rank.
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return unit_tokens[a] > unit_tokens[b]; });
  std::vector<int64_t> load(static_cast<size_t>(world_size), 0);
  std::vector<int> rank_of(n, -1);
  for (size_t u : order) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[r] += unit_tokens[u];
    for (size_t i : units[u]) rank_of[i] = static_cast<int>(r);
  }

  std::vector<Batch> parts(static_cast<size_t>(world_size));
  for (size_t i = 0; i < n; ++i) {
    if (rank_of[i] < 0) continue;
    TrainSample s = batch.samples[i];
    if (batch_level) s.advantages = std::move(attached[i]);
    parts[static_cast<size_t>(rank_of[i])].samples.push_back(std::move(s));
  }
  return parts;
}

std::vector<int64_t> part_tokens(const std::vector<Batch>& parts) {
  std::vector<int64_t> out;
  for (const auto& p : parts) out.push_back(static_cast<int64_t>(p.tokens()));
  return out;
}

}  // namespace ajet::train_data
