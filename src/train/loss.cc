#include "train/loss.h"

#include "common/error.h"

namespace ajet::train {

torch::Tensor kl_estimate(const torch::Tensor& lp, const torch::Tensor& ref,
                          train_data::KlType type) {
  switch (type) {
    case train_data::KlType::kK1: return lp - ref;
    case train_data::KlType::kAbs: return (lp - ref).abs();
    case train_data::KlType::kMse: return 0.5 * (lp - ref).square();
    case train_data::KlType::kLowVarKl: {
      auto d = torch::clamp(ref - lp, -20.0, 20.0);
      return torch::clamp(torch::exp(d) - d - 1.0, -10.0, 10.0);
    }
  }
  return {};
}

namespace {

double sum_of(const torch::Tensor& t) { return t.sum().to(torch::kDouble).item<double>(); }

void check_term(const torch::Tensor& t, int64_t k, const char* name) {
  if (!t.defined()) invalid_argument(std::string("policy loss: '") + name + "' is required");
  if (t.dim() != 1 || t.size(0) != k) {
    invalid_argument(std::string("policy loss: '") + name + "' must have shape (" +
                     std::to_string(k) + ",)");
  }
}

}  // namespace

LossOutput policy_loss(const LossTerms& in, const train_data::LossOptions& o,
                       const train_data::DistillOptions& distill) {
  const int64_t k = in.logprob.defined() ? in.logprob.size(0) : 0;
  check_term(in.logprob, k, "logprob");
  check_term(in.old_logprob, k, "old_logprob");
  check_term(in.advantage, k, "advantage");
  check_term(in.coef, k, "coef");
  const bool corrected = o.correction != train_data::OffPolicyCorrection::kNone;
  if (corrected) check_term(in.behaviour_logprob, k, "behaviour_logprob");
  if (o.use_kl) check_term(in.ref_logprob, k, "ref_logprob");
  if (in.entropy.defined()) check_term(in.entropy, k, "entropy");

  const auto& lp = in.logprob;
  const auto old = in.old_logprob.detach();
  const auto adv = in.advantage.detach();
  const auto coef = in.coef.detach();
  auto log_ratio = torch::clamp(lp - old, -20.0, 20.0);
  auto ratio = torch::exp(log_ratio);  // (K,)
  auto pg1 = -adv * ratio;
  auto pg2 = -adv * torch::clamp(ratio, 1.0 - o.clip_low, 1.0 + o.clip_high);
  auto clip_max = torch::maximum(pg1, pg2);
  auto pg = clip_max;
  torch::Tensor dual_taken;
  if (o.clip_c > 1.0) {
    auto pg3 = -adv * o.clip_c;
    auto negative = adv < 0;
    dual_taken = negative.logical_and(pg3 < clip_max);
    pg = torch::where(negative, torch::minimum(clip_max, pg3), clip_max);
  }

  LossOutput out;
  const auto active = (coef != 0).to(lp.scalar_type());  // (K,)
  if (corrected) {
    auto w = torch::exp(torch::clamp(old - in.behaviour_logprob.detach(), -20.0, 20.0));  // (K,)
    if (o.is_cap > 0) {
      const auto over = w > o.is_cap;
      out.is_truncated = sum_of(over.to(lp.scalar_type()) * active);
      // tis truncates the weight at the cap; decoupled PPO (AReaL) drops the token: weight 0, while
      // it stays in the aggregation's denominators as AReaL's loss mask keeps it.
      w = o.correction == train_data::OffPolicyCorrection::kDecoupledPpo
              ? torch::where(over, torch::zeros_like(w), w)
              : torch::clamp_max(w, o.is_cap);
    }
    pg = pg * w;
    out.is_weight_sum = sum_of(w * active);
  } else {
    out.is_weight_sum = sum_of(active);
  }
  auto total = coef * pg;  // (K,)
  out.pg_loss = sum_of(total.detach());
  if (o.use_kl) {
    auto kl = kl_estimate(lp, in.ref_logprob.detach(), o.kl_type);
    total = total + o.kl_coef * coef * kl;
    out.kl_loss = sum_of((coef * kl).detach());
    out.kl_sum = sum_of(kl.detach() * active);
  }
  if (distill.enabled && distill.as_loss) {
    torch::Tensor d, mask;
    if (distill.topk_forward) {
      if (!in.teacher_top_logprob.defined() || in.teacher_top_logprob.dim() != 2 ||
          in.teacher_top_logprob.size(0) != k || !in.student_top_logprob.defined() ||
          !in.student_top_logprob.sizes().equals(in.teacher_top_logprob.sizes())) {
        invalid_argument(
            "policy loss: topk_forward_kl needs (K, k) teacher and student top "
            "logprobs");
      }
      const auto t = in.teacher_top_logprob.detach();
      const auto present = torch::isfinite(t);
      const auto t0 = torch::where(present, t, torch::zeros_like(t));
      const auto pt = torch::where(present, torch::exp(t0), torch::zeros_like(t0));
      d = (pt * (t0 - in.student_top_logprob)).sum(1);  // (K,)
      mask = present.any(1).to(lp.scalar_type());
    } else {
      check_term(in.teacher_logprob, k, "teacher_logprob");
      check_term(in.teacher_mask, k, "teacher_mask");
      mask = in.teacher_mask.detach();
      d = kl_estimate(lp, in.teacher_logprob.detach(), distill.kl_type) * mask;
    }
    total = total + distill.coef * coef * d;
    out.distill_loss = sum_of((distill.coef * coef * d).detach());
    out.distill_sum = sum_of(d.detach() * active);
    out.distill_tokens = sum_of(mask * active);
  }
  if (in.entropy.defined()) {
    out.entropy_loss = sum_of((coef * in.entropy).detach());
    out.entropy_sum = sum_of(in.entropy.detach() * active);
    if (o.entropy_coef != 0) total = total - o.entropy_coef * coef * in.entropy;
  }
  out.loss = total.sum();
  out.tokens = sum_of(active);
  out.clipped = sum_of((pg2 > pg1).to(lp.scalar_type()) * active);
  if (dual_taken.defined()) out.dual_clipped = sum_of(dual_taken.to(lp.scalar_type()) * active);
  out.approx_kl_sum = sum_of((old - lp.detach()) * active);
  return out;
}

}  // namespace ajet::train
