// What one train_step consumes: samples with token ids, loss mask, behaviour logprobs, policy
// versions, reward, per-episode weight and group (task_id). Conversions from the tracking module's
// merged samples and from the engine RPC's train_step batch, and validation that names the bad
// sample and field. No libtorch here; it never computes anything.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ajet::rpc {
struct TrainBatch;
}
namespace ajet::tracking {
struct Sample;
}

namespace ajet::train_data {

struct TrainSample {
  std::string episode_uuid;  // advantages are per episode; empty: the sample is its own episode
  std::string task_id;       // the advantage group
  double reward = 0;  // the episode's reward (every sample of an episode must carry the same)
  double weight = 1;  // per-episode weighting: 1 / (samples of the episode)
  std::vector<int32_t> token_ids;  // (L,)
  std::vector<uint8_t> loss_mask;  // (L,) 1 = trained; position 0 must be 0 (nothing predicts it)
  std::vector<float> logprobs;     // (L,) behaviour logprobs of generated tokens (0 elsewhere)
  std::vector<int32_t> policy_versions;  // (L,) or empty: weights version of each generated token
  // (L,) optional: advantages given by the caller (e.g. a rank-0 or front-side estimator). When
  // every sample of a batch has them, rewards are not used for advantages.
  std::vector<float> advantages;
  // On-policy distillation, filled by the front's teacher client (engine_control/teacher.h): (L,)
  // the teacher's logprob of each token, NaN where it has none; empty: no teacher for this sample
  // (it then has no distillation term). With teacher_top_k K > 0, (L * K,) the teacher's best ids
  // (-1: none) and their logprobs at each position.
  std::vector<float> teacher_logprobs;
  int32_t teacher_top_k = 0;
  std::vector<int32_t> teacher_top_ids;
  std::vector<float> teacher_top_logprobs;

  size_t size() const { return token_ids.size(); }
  size_t trained_tokens() const;
};

struct Batch {
  std::vector<TrainSample> samples;

  size_t tokens() const;          // sum of sample lengths
  size_t trained_tokens() const;  // sum of loss masks
  bool has_advantages() const;    // every sample carries per-token advantages
  bool has_teacher() const;       // some sample carries teacher logprobs
};

// The episodes of a batch in order of first appearance: the unit of the advantages. Samples that
// share an episode_uuid are one episode; a sample without one is an episode of its own.
struct EpisodeIndex {
  std::vector<double> rewards;      // (E,) each episode's reward (its first sample's)
  std::vector<std::string> groups;  // (E,) its task_id, the advantage group
  std::vector<size_t> episode_of;   // (N,) the episode of each sample
};
EpisodeIndex index_episodes(const Batch& batch);

// Checks lengths, 0/1 masks, ids in [0, vocab_size), finite logprobs/rewards/weights >= 0, a 0 mask
// at position 0, equal rewards within an episode; throws Error(kInvalidArgument) naming sample and
// field.
void validate_batch(const Batch& batch, int64_t vocab_size);

// Merged samples of the tracking module (reward, weight, task_id, episode_uuid carried over);
// samples that are not trainable are skipped.
Batch batch_from_samples(std::span<const tracking::Sample> samples);

// The engine RPC's train_step batch. Per-sample fields (rewards, weights, task ids, episode uuids)
// come from the batch's optional per-sample arrays; without rewards, the per-token `advantages` are
// used.
Batch batch_from_rpc(const rpc::TrainBatch& batch);
rpc::TrainBatch batch_to_rpc(const Batch& batch);

}  // namespace ajet::train_data
