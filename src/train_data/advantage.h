// Advantage estimators for the GRPO family: one scalar per episode from the episode rewards of its
// group (task_id). Pure arithmetic, no libtorch, no I/O; it never looks at tokens. Statistics are
// over episodes, not samples, so an episode merged into one sample and the same episode split into
// one sample per call get the same advantage (see train/trainer.h, "merging invariance").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::train_data {

enum class AdvantageEstimator {
  kGrpo,         // (r - mean) / (std + eps), std unbiased (torch.std); a group of one gets 0
  kDrGrpo,       // r - mean (no std normalisation); a group of one gets 0
  kRloo,         // r - mean of the other members = n/(n-1) (r - mean); a group of one gets 0
  kReinforcePP,  // REINFORCE++: (r - batch mean) / (batch std + eps) over every episode of the
                 // batch
};

std::string_view estimator_name(AdvantageEstimator estimator);
// "grpo" | "drgrpo" | "rloo" | "reinforce_pp" (the config's names); throws Error(kInvalidArgument).
AdvantageEstimator estimator_from_name(std::string_view name);

struct AdvantageOptions {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  double epsilon = 1e-6;
  // Groups whose rewards are all equal (including groups of one) carry no signal for the group
  // estimators; when set they are marked dropped and the trainer leaves their samples out entirely.
  bool drop_zero_variance_groups = false;
};

struct AdvantageResult {
  std::vector<double> advantages;  // (E,) per episode
  std::vector<uint8_t> kept;       // (E,) 0 when the episode's group was dropped
  int64_t groups = 0;
  int64_t zero_variance_groups = 0;  // all rewards equal (a group of one counts)
};

// rewards, groups: (E,) one entry per episode; `groups` holds the task ids. Rewards may be any real
// number; a non-finite reward throws Error(kInvalidArgument) naming the episode index.
AdvantageResult compute_advantages(std::span<const double> rewards,
                                   std::span<const std::string> groups,
                                   const AdvantageOptions& options);

}  // namespace ajet::train_data
