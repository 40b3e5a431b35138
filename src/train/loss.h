// The policy loss of one set of trained tokens: PPO-clip with dual clip, off-policy correction
// (decoupled PPO / truncated importance sampling), KL to a reference, entropy bonus, aggregated by
// per-term coefficients. A pure function of (K,) tensors so it can be checked by hand and by finite
// differences; it never runs the model and never decides the aggregation (the trainer computes the
// coefficients, see trainer.h).
#pragma once

#include <torch/torch.h>

#include "train_data/options.h"

namespace ajet::train {

// K loss terms: one per (sample, position) whose loss mask is 1. All (K,) float tensors.
struct LossTerms {
  torch::Tensor logprob;      // current policy, differentiable
  torch::Tensor old_logprob;  // ratio denominator: recomputed (= proximal) or rollout logprobs
  torch::Tensor advantage;
  torch::Tensor coef;               // weight x aggregation factor; the loss is sum(coef * term)
  torch::Tensor behaviour_logprob;  // rollout logprobs; required when correction != kNone
  torch::Tensor ref_logprob;        // required when use_kl
  torch::Tensor entropy;            // optional; differentiable when entropy_coef != 0
  // Distillation in loss mode (train_data::DistillOptions, as_loss): the teacher's logprob of each
  // term's token (0 where teacher_mask is 0) and the mask (1: the term has one). With the top-k
  // forward KL instead: (K, k) the teacher's top ids' logprobs (-inf: none) and the current
  // policy's logprobs of the same ids (differentiable).
  torch::Tensor teacher_logprob, teacher_mask;
  torch::Tensor teacher_top_logprob, student_top_logprob;
};

// Sums over the K terms (detached, float64 scalars except `loss`).
struct LossOutput {
  torch::Tensor loss;       // scalar, differentiable: sum coef * (pg + kl_coef kl - entropy_coef H)
  double pg_loss = 0;       // sum coef * pg
  double kl_loss = 0;       // sum coef * kl (0 without use_kl)
  double entropy_loss = 0;  // sum coef * H
  double distill_loss = 0;  // sum coef * distill.coef * d (loss mode)
  double distill_sum = 0;   // sum d over terms with a teacher
  double distill_tokens = 0;
  // Unweighted token sums, for token-mean metrics:
  double tokens = 0;         // K' = terms with coef != 0
  double kl_sum = 0;         // sum kl
  double entropy_sum = 0;    // sum H
  double clipped = 0;        // terms where the clipped branch was taken (ratio outside the range)
  double dual_clipped = 0;   // terms where the dual clip was taken
  double approx_kl_sum = 0;  // sum (old - lp), verl's ppo_kl
  double is_weight_sum = 0;  // sum of the (truncated) importance weights; K' without correction
  double is_truncated = 0;  // terms whose importance weight exceeded is_cap (truncated, or dropped)
};

// pg(r, A) with r = exp(lp - old) (log ratio clamped to [-20, 20]), r̄ = clip(r, 1 - clip_low, 1 +
// clip_high):
//   A >= 0: -A min(r, r̄)                       (= max(-A r, -A r̄))
//   A <  0: min(max(-A r, -A r̄), -A clip_c)    (dual clip)
// Off-policy correction: with decoupled_ppo or tis the ratio is against the proximal policy
// (old_logprob = recomputed current-version logprobs) and the term is multiplied by the importance
// weight w = exp(old - behaviour) (detached). Above is_cap the two differ: tis (Yao et al.'s
// truncated importance sampling) truncates w to is_cap; decoupled_ppo (AReaL's
// behav_imp_weight_cap) drops the term, w = 0. Either way the term stays in the aggregation (coef)
// and is counted in is_truncated. Terms with coef == 0 contribute nothing (their gradient is
// exactly 0).
LossOutput policy_loss(const LossTerms& terms, const train_data::LossOptions& options,
                       const train_data::DistillOptions& distill = {});

// Per-term KL estimate between the current (lp) and reference (ref) log-probabilities.
torch::Tensor kl_estimate(const torch::Tensor& lp, const torch::Tensor& ref,
                          train_data::KlType type);

}  // namespace ajet::train
