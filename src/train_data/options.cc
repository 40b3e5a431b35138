#include "train_data/options.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"
#include "config/backbone.h"
#include "config/config.h"

namespace ajet::train_data {

std::string_view kl_type_name(KlType type) {
  switch (type) {
    case KlType::kK1: return "k1";
    case KlType::kAbs: return "abs";
    case KlType::kMse: return "mse";
    case KlType::kLowVarKl: return "low_var_kl";
  }
  return "?";
}

KlType kl_type_from_name(std::string_view name) {
  if (name == "k1" || name == "kl") return KlType::kK1;
  if (name == "abs") return KlType::kAbs;
  if (name == "mse" || name == "k2") return KlType::kMse;
  if (name == "low_var_kl" || name == "k3") return KlType::kLowVarKl;
  invalid_argument("unknown kl_loss_type '" + std::string(name) +
                   "' (low_var_kl, k3, k1, kl, k2, mse, abs)");
}

double kl_value(double lp, double ref, KlType type) {
  switch (type) {
    case KlType::kK1: return lp - ref;
    case KlType::kAbs: return std::abs(lp - ref);
    case KlType::kMse: return 0.5 * (lp - ref) * (lp - ref);
    case KlType::kLowVarKl: {
      const double d = std::clamp(ref - lp, -20.0, 20.0);
      return std::clamp(std::exp(d) - d - 1.0, -10.0, 10.0);
    }
  }
  return 0;
}

std::string_view correction_name(OffPolicyCorrection c) {
  switch (c) {
    case OffPolicyCorrection::kNone: return "none";
    case OffPolicyCorrection::kDecoupledPpo: return "decoupled_ppo";
    case OffPolicyCorrection::kTis: return "tis";
  }
  return "?";
}

OffPolicyCorrection correction_from_name(std::string_view name) {
  if (name == "none") return OffPolicyCorrection::kNone;
  if (name == "decoupled_ppo") return OffPolicyCorrection::kDecoupledPpo;
  if (name == "tis") return OffPolicyCorrection::kTis;
  invalid_argument("unknown off_policy_correction '" + std::string(name) +
                   "' (decoupled_ppo, tis, none)");
}

LossAggregation aggregation_from_name(std::string_view name) {
  if (name == "token-mean") return LossAggregation::kTokenMean;
  if (name == "seq-mean-token-mean") return LossAggregation::kSeqMeanTokenMean;
  if (name == "seq-mean-token-sum") return LossAggregation::kSeqMeanTokenSum;
  if (name == "seq-mean-token-sum-norm") return LossAggregation::kSeqMeanTokenSumNorm;
  invalid_argument(
      "unknown loss_agg_mode '" + std::string(name) +
      "' (token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm)");
}

std::string_view aggregation_name(LossAggregation agg) {
  switch (agg) {
    case LossAggregation::kTokenMean: return "token-mean";
    case LossAggregation::kSeqMeanTokenMean: return "seq-mean-token-mean";
    case LossAggregation::kSeqMeanTokenSum: return "seq-mean-token-sum";
    case LossAggregation::kSeqMeanTokenSumNorm: return "seq-mean-token-sum-norm";
  }
  return "?";
}

Packing packing_from_name(std::string_view name) {
  if (name == "tree") return Packing::kTree;
  if (name == "plain") return Packing::kPlain;
  invalid_argument("unknown sequence_packing '" + std::string(name) + "' (tree, plain)");
}

std::string_view packing_name(Packing packing) {
  return packing == Packing::kTree ? "tree" : "plain";
}

LoraOptions LoraOptions::from_config(const config::LoraConfig& c) {
  LoraOptions o;
  o.rank = c.lora_rank;
  o.alpha = c.lora_alpha;
  o.dropout = c.lora_dropout;
  o.target_modules = c.target_modules;
  return o;
}

double learning_rate(const OptimOptions& o, int64_t step) {
  if (step < o.warmup_steps)
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (!o.cosine) return o.lr;
  const int64_t span = std::max<int64_t>(1, o.total_steps - o.warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  const double wave = 0.5 * (1.0 + std::cos(std::numbers::pi * 2.0 * o.num_cycles * progress));
  return o.lr * std::max(0.0, o.min_lr_ratio + (1.0 - o.min_lr_ratio) * wave);
}

TrainerOptions TrainerOptions::from_config(const config::Config& c) {
  const auto& tc = c.trainer_common;
  TrainerOptions o;
  o.advantage.estimator = estimator_from_name(tc.algorithm.adv_estimator);
  if (o.advantage.estimator == AdvantageEstimator::kGrpo && !tc.algorithm.norm_adv_by_std_in_grpo) {
    o.advantage.estimator = AdvantageEstimator::kDrGrpo;  // verl: grpo without the std is Dr.GRPO
  }
  o.advantage.drop_zero_variance_groups = tc.algorithm.drop_zero_variance_groups;
  o.loss.clip_low = tc.clip_ratio_low;
  o.loss.clip_high = tc.clip_ratio_high;
  o.loss.clip_c = tc.clip_ratio_c;
  o.loss.use_kl = tc.use_kl_loss;
  o.loss.kl_coef = tc.kl_loss_coef;
  o.loss.kl_type = kl_type_from_name(tc.kl_loss_type);
  o.loss.entropy_coef = tc.entropy_coeff;
  if (config::backbone_of(c) == config::Backbone::kAsync) {
    o.loss.correction = correction_from_name(c.async.off_policy_correction);
    o.loss.is_cap = c.async.importance_weight_cap;
  }
  if (c.distillation.enabled()) {
    const auto& d = c.distillation;
    o.distill.enabled = true;
    o.distill.as_loss = d.mode == "loss";
    o.distill.topk_forward = d.estimator == "topk_forward_kl";
    if (!o.distill.topk_forward) o.distill.kl_type = kl_type_from_name(d.estimator);
    if (o.distill.topk_forward && !o.distill.as_loss)
      invalid_argument("ajet.distillation.estimator topk_forward_kl needs mode: loss");
    o.distill.coef = d.coef;
    o.distill.reward_weight = d.reward_weight;
  }
  o.aggregation = aggregation_from_name(tc.loss_agg_mode);
  o.norm_constant = static_cast<double>(c.data.max_response_length);
  o.episode_weighting = tc.episode_loss_weighting;
  o.loss_scale = tc.loss_extra_scale_ratio;
  o.recompute_old_logprobs = tc.old_logprob_source == "recompute";
  o.mini_batch_num = tc.mini_batch_num;
  o.ppo_epochs = tc.ppo_epochs;
  o.micro_batch_tokens = tc.ppo_max_token_len_per_gpu;
  o.packing = packing_from_name(tc.sequence_packing);
  o.activation_checkpointing = tc.activation_checkpointing;
  o.lora = LoraOptions::from_config(c.lora);
  o.seed = static_cast<uint64_t>(c.engine.seed);
  // Train episodes are always sampled at ajet.rollout.temperature (the front ignores a request's
  // own); 0 (greedy) has no distribution to train, so the trainer keeps the model's.
  o.temperature = c.rollout.temperature > 0 ? c.rollout.temperature : 1.0;

  const auto& op = tc.optim;
  o.optim.lr = op.lr;
  if (op.betas.size() != 2) {
    invalid_argument("ajet.trainer_common.optim.betas must hold two numbers, got " +
                     std::to_string(op.betas.size()));
  }
  o.optim.beta1 = op.betas[0];
  o.optim.beta2 = op.betas[1];
  o.optim.weight_decay = op.weight_decay;
  o.optim.cosine = op.lr_scheduler_type == "cosine";
  o.optim.min_lr_ratio = op.min_lr_ratio;
  o.optim.num_cycles = op.num_cycles;
  o.optim.grad_clip = op.grad_clip;
  if (tc.total_training_steps)
    o.optim.total_steps = *tc.total_training_steps * tc.mini_batch_num * tc.ppo_epochs;
  if (op.lr_warmup_steps >= 0) {
    o.optim.warmup_steps = op.lr_warmup_steps * tc.mini_batch_num * tc.ppo_epochs;
  } else if (op.lr_warmup_steps_ratio > 0) {
    if (o.optim.total_steps == 0) {
      invalid_argument(
          "ajet.trainer_common.optim.lr_warmup_steps_ratio needs "
          "ajet.trainer_common.total_training_steps");
    }
    o.optim.warmup_steps =
        static_cast<int64_t>(op.lr_warmup_steps_ratio * static_cast<double>(o.optim.total_steps));
  }
  if (o.optim.cosine && o.optim.total_steps == 0) {
    invalid_argument(
        "ajet.trainer_common.optim.lr_scheduler_type 'cosine' needs "
        "ajet.trainer_common.total_training_steps");
  }
  return o;
}

Json TrainMetrics::to_json() const {
  Json j{{"loss", loss},
         {"pg_loss", pg_loss},
         {"kl", kl},
         {"entropy", entropy},
         {"clip_fraction", clip_fraction},
         {"dual_clip_fraction", dual_clip_fraction},
         {"approx_kl", approx_kl},
         {"is_weight", is_weight},
         {"is_truncated_fraction", is_truncated_fraction},
         {"grad_norm", grad_norm},
         {"lr", lr},
         {"reward_mean", reward_mean},
         {"advantage_mean", advantage_mean},
         {"advantage_abs_mean", advantage_abs_mean},
         {"tokens", tokens},
         {"trained_tokens", trained_tokens},
         {"packed_tokens", packed_tokens},
         {"samples", samples},
         {"dropped_samples", dropped_samples},
         {"groups", groups},
         {"zero_variance_groups", zero_variance_groups},
         {"optimizer_steps", optimizer_steps},
         {"skipped_steps", skipped_steps},
         {"micro_batches", micro_batches},
         {"global_step", global_step},
         {"policy_version", policy_version},
         {"seconds", seconds},
         {"old_logprob_seconds", old_logprob_seconds},
         {"ref_logprob_seconds", ref_logprob_seconds}};
  if (rollout_logprob_diff >= 0)
    j["rollout_logprob_diff"] = rollout_logprob_diff;  // absent: not measured
  if (distill_tokens > 0) {
    j["distill_loss"] = distill_loss;
    j["distill_estimate"] = distill_estimate;
    j["distill_tokens"] = distill_tokens;
  }
  return j;
}

}  // namespace ajet::train_data
