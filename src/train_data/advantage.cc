#include "train_data/advantage.h"

#include <cmath>
#include <map>

#include "common/error.h"

namespace ajet::train_data {

std::string_view estimator_name(AdvantageEstimator estimator) {
  switch (estimator) {
    case AdvantageEstimator::kGrpo: return "grpo";
    case AdvantageEstimator::kDrGrpo: return "drgrpo";
    case AdvantageEstimator::kRloo: return "rloo";
    case AdvantageEstimator::kReinforcePP: return "reinforce_pp";
  }
  return "?";
}

AdvantageEstimator estimator_from_name(std::string_view name) {
  if (name == "grpo") return AdvantageEstimator::kGrpo;
  if (name == "drgrpo" || name == "dr_grpo") return AdvantageEstimator::kDrGrpo;
  if (name == "rloo") return AdvantageEstimator::kRloo;
  if (name == "reinforce_pp" || name == "reinforce_plus_plus")
    return AdvantageEstimator::kReinforcePP;
  invalid_argument("unknown advantage estimator '" + std::string(name) +
                   "' (grpo, drgrpo, rloo, reinforce_pp)");
}

namespace {

struct Moments {
  double mean = 0;
  double std = 0;  // unbiased; 0 for fewer than 2 values
};

Moments moments(std::span<const double> rewards, const std::vector<size_t>& members) {
  Moments m;
  const double n = static_cast<double>(members.size());
  for (size_t i : members) m.mean += rewards[i];
  m.mean /= n;
  if (members.size() > 1) {
    double ss = 0;
    for (size_t i : members) ss += (rewards[i] - m.mean) * (rewards[i] - m.mean);
    m.std = std::sqrt(ss / (n - 1));
  }
  return m;
}

bool all_equal(std::span<const double> rewards, const std::vector<size_t>& members) {
  for (size_t i : members) {
    if (rewards[i] != rewards[members.front()]) return false;
  }
  return true;
}

}  // namespace

AdvantageResult compute_advantages(std::span<const double> rewards,
                                   std::span<const std::string> groups,
                                   const AdvantageOptions& options) {
  if (rewards.size() != groups.size()) {
    invalid_argument("advantages: " + std::to_string(rewards.size()) + " rewards but " +
                     std::to_string(groups.size()) + " group ids");
  }
  for (size_t i = 0; i < rewards.size(); ++i) {
    if (!std::isfinite(rewards[i]))
      invalid_argument("advantages: reward of episode " + std::to_string(i) + " is not finite");
  }
  AdvantageResult r;
  r.advantages.assign(rewards.size(), 0.0);
  r.kept.assign(rewards.size(), 1);
  std::map<std::string_view, std::vector<size_t>> by_group;  // ordered: deterministic iteration
  for (size_t i = 0; i < groups.size(); ++i) by_group[groups[i]].push_back(i);
  r.groups = static_cast<int64_t>(by_group.size());

  for (const auto& [group, members] : by_group) {
    if (!all_equal(rewards, members)) continue;
    ++r.zero_variance_groups;
    if (options.drop_zero_variance_groups) {
      for (size_t i : members) r.kept[i] = 0;
    }
  }
  if (options.estimator == AdvantageEstimator::kReinforcePP) {
    // Over the episodes that are trained: dropped groups (dynamic sampling) leave the batch before
    // its statistics are taken, as verl's filter runs before the advantages.
    std::vector<size_t> kept;
    for (size_t i = 0; i < rewards.size(); ++i) {
      if (r.kept[i]) kept.push_back(i);
    }
    if (!kept.empty()) {
      const Moments m = moments(rewards, kept);
      for (size_t i : kept) r.advantages[i] = (rewards[i] - m.mean) / (m.std + options.epsilon);
    }
    return r;
  }
  for (const auto& [group, members] : by_group) {
    if (members.size() < 2) continue;
    const Moments m = moments(rewards, members);
    const double n = static_cast<double>(members.size());
    for (size_t i : members) {
      const double centred = rewards[i] - m.mean;
      switch (options.estimator) {
        case AdvantageEstimator::kGrpo:
          r.advantages[i] = centred / (m.std + options.epsilon);
          break;
        case AdvantageEstimator::kDrGrpo: r.advantages[i] = centred; break;
        case AdvantageEstimator::kRloo: r.advantages[i] = centred * n / (n - 1); break;
        case AdvantageEstimator::kReinforcePP: break;
      }
    }
  }
  return r;
}

}  // namespace ajet::train_data
