// Splits one training batch across data-parallel ranks, balanced by token count and deterministic
// (every rank, and the front, computes the same split from the same batch). No libtorch, no I/O; it
// never reorders tokens and never changes what a sample trains on.
#pragma once

#include <cstdint>
#include <vector>

#include "train_data/advantage.h"
#include "train_data/batch.h"

namespace ajet::train_data {

// parts[r] is rank r's batch. Advantages must come out as on one rank with the whole batch:
//  * group estimators (GRPO, Dr.GRPO, RLOO) only look at their task_id group, so whole groups go to
//    one rank (samples without task_id: whole episodes; without episode_uuid: single samples);
//  * REINFORCE++ normalises over the whole batch, so its advantages are computed here on the whole
//    batch and attached per token (TrainSample::advantages); episodes then split freely, and
//    samples of groups it drops (drop_zero_variance_groups) are left out;
//  * a batch that already carries advantages splits by episode.
// Units go largest first to the rank with the fewest tokens so far (ties: the lower rank), so the
// largest and smallest parts differ by at most the largest unit. Each part keeps the batch's order.
// A rank can get an empty part (fewer units than ranks); it must still call train_step, since every
// rank takes part in every all-reduce.
std::vector<Batch> split_batch(const Batch& batch, int world_size,
                               const AdvantageOptions& advantage);

// Tokens (sum of sample lengths) of each part: what the split balances.
std::vector<int64_t> part_tokens(const std::vector<Batch>& parts);

}  // namespace ajet::train_data
