// The names under which the front's numbers go into the store's `metrics` table (and TensorBoard):
// every numeric field of a batch's stats flattened with "/"-joined names, and the rule every metric
// name follows (docs/operations.md "Metrics" lists the names). Pure functions, no I/O.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"

namespace ajet::episodes {

using MetricValues = std::vector<std::pair<std::string, double>>;

inline constexpr size_t kMaxMetricNameLength = 200;

// 1-200 characters of [A-Za-z0-9_./@:-].
bool valid_metric_name(std::string_view name);
// `text` made a valid name piece: other characters become '_', at most `max_length` characters ("_"
// when empty). For names built from what clients send (client uuids).
std::string metric_name_piece(std::string_view text, size_t max_length = 64);

// Every finite number of a batch's stats: the engine's train_step reply with "rollout"
// (Batch::summary) added, as Registry::finish_batch stores it (a debug batch: {"rollout": summary}
// alone).
//   rollout/<key>                    the rollout summary (episodes, tasks, reward_mean,
//   success_rate …) rollout/staleness_mean           mean of the per-episode staleness (the
//   per-episode map itself is
//                                    left out: one name per episode would grow without bound)
//   rollout/client/<client>/<key>    each client's share of the batch (episodes, tasks, share)
//   merge/<key>                      how the episodes' calls merged into samples (compression_ratio
//   …) timing/step_s, timing/trainer_s, timing/old_logprob_s, timing/ref_logprob_s,
//   timing/inference_paused_s        the engine's timings of the step
//   perf/train_tokens_per_s          tokens / step_time_s
//   train/data_parallel/world_size, train/data_parallel/rank<r>/<key>
//   train/<key>                      every other number of the engine's reply (loss, kl, entropy,
//                                    grad_norm, lr, clip_fraction, policy_version …); nested
//                                    objects as train/<key>/<sub>
// Booleans, strings and nulls are left out. Sorted by name.
MetricValues batch_metrics(const Json& stats);

}  // namespace ajet::episodes
