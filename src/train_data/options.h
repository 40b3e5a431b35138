// The trainer's settings and metrics as plain data (no libtorch), their mapping from the YAML
// config (ajet.trainer_common.*, ajet.lora.*, ajet.async.*) and the learning-rate schedule. Nothing
// here computes a gradient.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "train_data/advantage.h"

namespace ajet::config {
struct Config;
struct LoraConfig;
}  // namespace ajet::config

namespace ajet::train_data {

// verl's kl_penalty estimators, under verl's names (each the first of its names below).
enum class KlType {
  kK1,        // "k1", "kl": lp - ref
  kAbs,       // "abs": |lp - ref|
  kMse,       // "mse", "k2": (lp - ref)^2 / 2
  kLowVarKl,  // "low_var_kl", "k3": Schulman's k3 exp(d) - d - 1 with d = ref - lp clamped to [-20,
              // 20] and the result to [-10, 10]; verl gives both names this one estimator, clamps
              // included
};
std::string_view kl_type_name(KlType type);
KlType kl_type_from_name(std::string_view name);  // any name above; throws Error(kInvalidArgument)
// The estimate of one term (train/loss.h kl_estimate on scalars): lp the policy's logprob, ref the
// other model's.
double kl_value(double lp, double ref, KlType type);

// On-policy distillation (ajet.distillation; docs/training.md "Distillation"). A trained token
// with a teacher logprob t (TrainSample::teacher_logprobs) and the policy's logprob s gets, per
// `estimator` d(s, t) (a KlType, or the top-k forward KL):
//   advantage mode: A = reward_weight * A_task - coef * d(behaviour s, t)   (no gradient through d)
//   loss mode:      A = reward_weight * A_task, and the loss gains coef * c_s * d(s, t) (gradient
//                   through the current s; topk_forward_kl: sum_j p_T(j) (t_j - s_j) over the
//                   teacher's top k ids j at the position).
// Tokens without a teacher logprob (the teacher failed for the sample) get no distillation term.
struct DistillOptions {
  bool enabled = false;
  bool as_loss = false;
  bool topk_forward = false;  // the top-k forward KL (loss mode only); else kl_type
  KlType kl_type = KlType::kK1;
  double coef = 1.0;
  double reward_weight = 1.0;
};

// How the ratio's denominator and the importance weight are chosen (see train/loss.h).
enum class OffPolicyCorrection { kNone, kDecoupledPpo, kTis };
std::string_view correction_name(OffPolicyCorrection c);
OffPolicyCorrection correction_from_name(
    std::string_view name);  // "none" | "decoupled_ppo" | "tis"

struct LossOptions {
  double clip_low = 0.2;  // ratio clipped to [1 - clip_low, 1 + clip_high]
  double clip_high = 0.2;
  double clip_c = 3.0;  // dual clip for A < 0: the term is at most -A * clip_c; <= 1 disables it
  bool use_kl = false;
  KlType kl_type = KlType::kLowVarKl;
  double kl_coef = 0.0;
  double entropy_coef = 0.0;  // the loss subtracts entropy_coef * entropy
  OffPolicyCorrection correction = OffPolicyCorrection::kNone;
  double is_cap = 2.0;  // truncation of the behaviour -> proximal importance weight; <= 0: none
};

struct LoraOptions {
  int64_t rank = 0;  // 0: LoRA off (full fine-tuning)
  double alpha = 16;
  double dropout = 0.0;
  std::vector<std::string> target_modules = {"all-linear"};  // PEFT names, or "all-linear"

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
  static LoraOptions from_config(const config::LoraConfig& config);  // ajet.lora.*
};

enum class LossAggregation {
  kTokenMean,
  kSeqMeanTokenMean,
  kSeqMeanTokenSum,
  kSeqMeanTokenSumNorm
};
LossAggregation aggregation_from_name(std::string_view name);  // the loss_agg_mode names
std::string_view aggregation_name(LossAggregation agg);

enum class Packing { kPlain, kTree };
Packing packing_from_name(std::string_view name);  // "plain" | "tree"
std::string_view packing_name(Packing packing);

struct OptimOptions {
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t warmup_steps = 0;  // linear warmup: step s < W uses lr * (s + 1) / W
  bool cosine = false;       // after warmup: constant, or cosine down to min_lr_ratio * lr
  double min_lr_ratio = 0.0;
  double num_cycles = 0.5;
  int64_t total_steps = 0;  // optimizer steps in the run (cosine needs it); 0 = unknown
  double grad_clip = 20.0;  // clip the global gradient norm; <= 0: off
};

// Learning rate of optimizer step `step` (0-based). Cosine: after warmup, progress q = (s - W) /
// (total - W) in [0, 1], lr * (min + (1 - min) * 0.5 * (1 + cos(2 pi num_cycles q))).
double learning_rate(const OptimOptions& o, int64_t step);

struct TrainerOptions {
  AdvantageOptions advantage;
  LossOptions loss;
  DistillOptions distill;
  LossAggregation aggregation = LossAggregation::kTokenMean;
  double norm_constant = 1.0;     // seq-mean-token-sum-norm divisor (ajet.data.max_response_length)
  bool episode_weighting = true;  // multiply each sample's terms by its weight
  double loss_scale = 1.0;        // loss_extra_scale_ratio
  bool recompute_old_logprobs = true;  // false: the rollout's logprobs are the PPO "old" policy
  OptimOptions optim;
  int64_t mini_batch_num = 1;  // optimizer steps per batch (per epoch)
  int64_t ppo_epochs = 1;
  bool shuffle = true;  // shuffle samples before splitting into mini-batches
  int64_t micro_batch_tokens =
      16384;  // packed tokens per forward/backward (gradient accumulation beyond)
  // Tree packing: micro_batch_tokens bounds the tokens beyond the prefix a micro-batch's samples
  // all share, so a group's prompt longer than it is computed once. false: it bounds every token (a
  // longer sample goes alone); bench/train/long_context_bench compares the two.
  bool budget_beyond_shared_prefix = true;
  bool activation_checkpointing =
      false;  // packed_hidden's checkpoint_layers (ajet.trainer_common.*)
  Packing packing = Packing::kTree;
  int64_t attention_block = 128;  // query rows per attention block
  int64_t logprob_chunk = 1024;   // rows of logits formed at once
  LoraOptions lora;
  uint64_t seed = 0;  // shuffling, LoRA init, dropout
  // The rollout's sampling temperature: every logprob the trainer forms (the policy's, the old and
  // the reference ones) and the entropy are those of softmax(logits / temperature), the
  // distribution the train episodes were sampled from, as verl's actor does. 1: the model's own
  // distribution.
  double temperature = 1.0;

  // From ajet.trainer_common.*, ajet.lora.*, ajet.async.* (the off-policy correction only with
  // backbone async), ajet.data.max_response_length, ajet.engine.seed. total_steps is
  // total_training_steps x mini_batch_num x ppo_epochs when set. Throws Error(kInvalidArgument)
  // naming the key for a cosine schedule or a warmup ratio without total_training_steps.
  static TrainerOptions from_config(const config::Config& config);
};

struct TrainMetrics {
  double loss = 0;                // mean over optimizer steps of the mini-batch loss
  double pg_loss = 0;             // mean over optimizer steps of sum c * pg
  double kl = 0;                  // token mean of the KL estimate (0 without use_kl)
  double entropy = 0;             // token mean
  double clip_fraction = 0;       // token mean
  double dual_clip_fraction = 0;  // token mean
  double approx_kl = 0;           // token mean of old - new logprob
  double is_weight = 1;           // token mean of the off-policy importance weight
  double is_truncated_fraction = 0;
  // Token mean of |old - rollout logprob| over trained tokens, with recomputed old logprobs: how
  // far the trainer's policy before the update is from what the engine sampled with (numerics, a KV
  // cache in another dtype, top-p/top-k, and for async the policy versions in between). -1: not
  // measured (old logprobs are the rollout's own); to_json() then leaves the key out.
  double rollout_logprob_diff = -1;
  double distill_loss = 0;      // loss mode: mean over optimizer steps of sum c * coef * d
  double distill_estimate = 0;  // token mean of d over the terms with a teacher (all epochs)
  int64_t distill_tokens = 0;   // trained tokens with a teacher logprob (one epoch)
  double grad_norm = 0;         // mean over optimizer steps, before clipping
  double lr = 0;                // of the last optimizer step
  double reward_mean = 0;       // over episodes
  double advantage_mean = 0, advantage_abs_mean = 0;  // over trained samples
  int64_t tokens = 0;                                 // sample tokens trained on (after dropping)
  int64_t trained_tokens = 0;                         // loss-mask tokens
  int64_t packed_tokens = 0;  // tokens the training forward passes computed (all epochs)
  int64_t samples = 0;
  int64_t dropped_samples =
      0;  // in zero-variance groups (drop_zero_variance_groups) or untrainable
  int64_t groups = 0, zero_variance_groups = 0;
  int64_t optimizer_steps = 0;  // in this train_step
  int64_t skipped_steps = 0;    // non-finite gradient norm or nothing to train: no update
  int64_t micro_batches = 0;
  int64_t global_step = 0;     // optimizer steps since the start of training
  int64_t policy_version = 0;  // after this step
  double seconds = 0, old_logprob_seconds = 0, ref_logprob_seconds = 0;

  Json to_json() const;
};

}  // namespace ajet::train_data
