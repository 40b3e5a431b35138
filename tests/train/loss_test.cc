// The policy loss against hand-computed cases (clip, dual clip, KL estimators, entropy,
// coefficients and masks, off-policy correction) and a finite-difference check of its gradient in
// float64.
#include "train/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"

namespace ajet::train {
namespace {

torch::Tensor d(std::vector<double> v) { return torch::tensor(v, torch::kDouble); }

struct Case {
  LossTerms terms;
  torch::Tensor lp;  // the leaf the gradient is taken against
};

// K terms with old logprob 0, so ratio = exp(lp).
Case make(std::vector<double> ratios, std::vector<double> advantages, std::vector<double> coef) {
  Case c;
  std::vector<double> lp;
  for (double r : ratios) lp.push_back(std::log(r));
  c.lp = d(lp).requires_grad_(true);
  c.terms.logprob = c.lp;
  c.terms.old_logprob = torch::zeros({static_cast<int64_t>(ratios.size())}, torch::kDouble);
  c.terms.advantage = d(advantages);
  c.terms.coef = d(coef);
  return c;
}

std::vector<double> values(const torch::Tensor& t) {
  auto c = t.to(torch::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

TEST(PolicyLoss, PpoClipAndDualClipByHand) {
  train_data::LossOptions o;  // clip 0.2 / 0.2, dual clip 3
  // ratio, advantage -> term, d term / d lp (= d term / d r * r):
  //  1.5, +1 -> -min(1.5, 1.2) = -1.2, clipped: 0
  //  0.5, +1 -> -min(0.5, 0.8) = -0.5, -0.5
  //  1.5, -1 -> min(max(1.5, 1.2), 3) = 1.5, 1.5
  //  4.0, -1 -> min(max(4, 1.2), 3) = 3 (dual clip), 0
  //  0.5, -1 -> max(0.5, 0.8) = 0.8 clipped, 0
  //  1.1, +2 -> -2.2 inside the range, -2.2
  Case c = make({1.5, 0.5, 1.5, 4.0, 0.5, 1.1}, {1, 1, -1, -1, -1, 2}, {1, 1, 1, 1, 1, 1});
  LossOutput out = policy_loss(c.terms, o);
  const std::vector<double> terms = {-1.2, -0.5, 1.5, 3.0, 0.8, -2.2};
  double sum = 0;
  for (double t : terms) sum += t;
  EXPECT_NEAR(out.loss.item<double>(), sum, 1e-12);
  EXPECT_NEAR(out.pg_loss, sum, 1e-12);
  out.loss.backward();
  const std::vector<double> grad = {0, -0.5, 1.5, 0, 0, -2.2};
  auto g = values(c.lp.grad());
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(g[i], grad[i], 1e-12) << i;
  EXPECT_EQ(out.tokens, 6);
  EXPECT_EQ(out.clipped, 2);       // terms 0 and 4 (the clipped branch is the larger loss)
  EXPECT_EQ(out.dual_clipped, 1);  // term 3
  // approx_kl sums old - lp = -log r.
  EXPECT_NEAR(out.approx_kl_sum,
              -(std::log(1.5) + std::log(0.5) + std::log(1.5) + std::log(4.0) + std::log(0.5) +
                std::log(1.1)),
              1e-12);
}

TEST(PolicyLoss, AsymmetricClipAndNoDualClip) {
  train_data::LossOptions o;
  o.clip_low = 0.1;
  o.clip_high = 0.3;
  o.clip_c = 1.0;  // disabled
  Case c = make({1.4, 0.8, 4.0}, {1, -1, -1}, {1, 1, 1});
  LossOutput out = policy_loss(c.terms, o);
  // -min(1.4, 1.3) = -1.3; max(0.8, 0.9) = 0.9; max(4, 1.3) = 4 (no dual clip).
  EXPECT_NEAR(out.loss.item<double>(), -1.3 + 0.9 + 4.0, 1e-12);
  EXPECT_EQ(out.dual_clipped, 0);
}

TEST(PolicyLoss, CoefficientsWeightTermsAndZeroMasksExactly) {
  train_data::LossOptions o;
  Case c = make({1.1, 0.9, 1.05}, {1, -2, 3}, {0.25, 0.0, 0.5});
  LossOutput out = policy_loss(c.terms, o);
  EXPECT_NEAR(out.loss.item<double>(), 0.25 * (-1.1) + 0.5 * (-3 * 1.05), 1e-12);
  out.loss.backward();
  auto g = values(c.lp.grad());
  EXPECT_EQ(g[1], 0.0);  // a masked term has exactly zero gradient
  EXPECT_NEAR(g[0], 0.25 * -1.1, 1e-12);
  EXPECT_NEAR(g[2], 0.5 * -3 * 1.05, 1e-12);
  EXPECT_EQ(out.tokens, 2);
}

TEST(PolicyLoss, KlEstimatorsByHand) {
  auto lp = d({-1.0, -2.0, -0.5});
  auto ref = d({-2.0, -1.0, 29.5});  // the last: ref - lp = 30, past both low_var_kl clamps
  auto k1 = values(kl_estimate(lp, ref, train_data::KlType::kK1));
  EXPECT_NEAR(k1[0], 1.0, 1e-12);
  EXPECT_NEAR(k1[1], -1.0, 1e-12);
  auto absolute = values(kl_estimate(lp, ref, train_data::KlType::kAbs));
  EXPECT_NEAR(absolute[0], 1.0, 1e-12);
  EXPECT_NEAR(absolute[1], 1.0, 1e-12);
  EXPECT_NEAR(absolute[2], 30.0, 1e-12);
  auto mse = values(kl_estimate(lp, ref, train_data::KlType::kMse));
  EXPECT_NEAR(mse[1], 0.5, 1e-12);
  EXPECT_NEAR(mse[2], 450.0, 1e-9);
  // k3 = low_var_kl (verl gives both names one estimator): exp(d) - d - 1, d = ref - lp, clamped.
  auto low = values(kl_estimate(lp, ref, train_data::KlType::kLowVarKl));
  EXPECT_NEAR(low[0], std::exp(-1.0) + 1.0 - 1.0, 1e-12);
  EXPECT_NEAR(low[1], std::exp(1.0) - 1.0 - 1.0, 1e-12);
  EXPECT_EQ(low[2], 10.0);  // exp(30) - 31 unclamped: an upstream k3 config never meets it
  EXPECT_EQ(train_data::kl_type_from_name("k3"), train_data::KlType::kLowVarKl);
  EXPECT_EQ(train_data::kl_type_from_name("kl"), train_data::KlType::kK1);
  EXPECT_EQ(train_data::kl_type_from_name("k2"), train_data::KlType::kMse);
  EXPECT_THROW(train_data::kl_type_from_name("full"), Error);
}

TEST(PolicyLoss, KlAndEntropyTermsAndTheirGradients) {
  train_data::LossOptions o;
  o.use_kl = true;
  o.kl_type = train_data::KlType::kLowVarKl;  // inside its clamps: k3
  o.kl_coef = 0.1;
  o.entropy_coef = 0.01;
  Case c = make({1.0, 1.0}, {0.0, 0.0}, {0.5, 0.5});  // advantage 0: only KL and entropy act
  c.terms.ref_logprob = d({-1.0, 1.0});               // ref - lp = -1, +1
  auto entropy = d({2.0, 3.0}).requires_grad_(true);
  c.terms.entropy = entropy;
  LossOutput out = policy_loss(c.terms, o);
  const double k3a = std::exp(-1.0) + 1.0 - 1.0, k3b = std::exp(1.0) - 1.0 - 1.0;
  EXPECT_NEAR(out.loss.item<double>(), 0.1 * 0.5 * (k3a + k3b) - 0.01 * 0.5 * (2.0 + 3.0), 1e-12);
  EXPECT_NEAR(out.kl_sum, k3a + k3b, 1e-12);
  EXPECT_NEAR(out.entropy_sum, 5.0, 1e-12);
  out.loss.backward();
  // d k3 / d lp = 1 - exp(ref - lp).
  auto g = values(c.lp.grad());
  EXPECT_NEAR(g[0], 0.1 * 0.5 * (1 - std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(g[1], 0.1 * 0.5 * (1 - std::exp(1.0)), 1e-12);
  auto ge = values(entropy.grad());
  EXPECT_NEAR(ge[0], -0.01 * 0.5, 1e-12);
}

// Above the cap, tis truncates the weight and decoupled PPO (AReaL's behav_imp_weight_cap) drops
// the term.
TEST(PolicyLoss, OffPolicyWeightIsTruncatedOrDroppedAndDetached) {
  for (auto correction :
       {train_data::OffPolicyCorrection::kDecoupledPpo, train_data::OffPolicyCorrection::kTis}) {
    train_data::LossOptions o;
    o.correction = correction;
    o.is_cap = 2.0;
    // proximal (old) = 0; behaviour = -log 3 -> weight 3, over the cap; and behaviour = -log 1.5
    // -> 1.5.
    Case c = make({1.1, 1.1}, {1.0, 1.0}, {1.0, 1.0});
    c.terms.behaviour_logprob = d({-std::log(3.0), -std::log(1.5)});
    LossOutput out = policy_loss(c.terms, o);
    const double over = correction == train_data::OffPolicyCorrection::kTis ? 2.0 : 0.0;
    EXPECT_NEAR(out.loss.item<double>(), over * -1.1 + 1.5 * -1.1, 1e-12);
    EXPECT_NEAR(out.is_weight_sum, over + 1.5, 1e-12);
    EXPECT_EQ(out.is_truncated, 1);
    EXPECT_EQ(out.tokens, 2);  // a dropped term stays in the count the aggregation divides by
    out.loss.backward();
    auto g = values(c.lp.grad());
    EXPECT_NEAR(g[0], over * -1.1,
                1e-12);  // the weight scales the gradient, it has none of its own
    EXPECT_NEAR(g[1], 1.5 * -1.1, 1e-12);
  }
  train_data::LossOptions o;
  o.correction = train_data::OffPolicyCorrection::kTis;
  Case c = make({1.0}, {1.0}, {1.0});
  EXPECT_THROW(policy_loss(c.terms, o), Error);  // behaviour logprobs are required
}

// Central differences of the loss w.r.t. every logprob and entropy, in float64, with every term
// switched on; ratios stay away from the clip boundaries where the loss has kinks.
TEST(PolicyLoss, GradientMatchesFiniteDifferences) {
  train_data::LossOptions o;
  o.use_kl = true;
  o.kl_type = train_data::KlType::kLowVarKl;
  o.kl_coef = 0.3;
  o.entropy_coef = 0.05;
  o.correction = train_data::OffPolicyCorrection::kDecoupledPpo;
  o.is_cap = 2.0;
  const std::vector<double> ratios = {0.5, 0.7, 0.9, 1.1, 1.3, 1.6, 2.5, 4.0, 0.95, 1.05};
  const std::vector<double> adv = {1.0, -1.0, 0.7, -0.4, 2.0, -1.5, 1.2, -0.8, -2.0, 0.3};
  std::vector<double> old, lp, behaviour, ref, ent, coef;
  for (size_t i = 0; i < ratios.size(); ++i) {
    old.push_back(-1.0 - 0.1 * static_cast<double>(i));
    lp.push_back(old.back() + std::log(ratios[i]));
    behaviour.push_back(old.back() - 0.3 + 0.1 * static_cast<double>(i % 4));
    ref.push_back(lp.back() + 0.2 * std::sin(static_cast<double>(i)));
    ent.push_back(1.0 + 0.1 * static_cast<double>(i));
    coef.push_back(0.05 + 0.01 * static_cast<double>(i));
  }
  auto loss_at = [&](const std::vector<double>& l, const std::vector<double>& e,
                     torch::Tensor* lp_leaf, torch::Tensor* ent_leaf) {
    LossTerms t;
    t.logprob = d(l);
    t.entropy = d(e);
    if (lp_leaf) {
      t.logprob.requires_grad_(true);
      t.entropy.requires_grad_(true);
      *lp_leaf = t.logprob;
      *ent_leaf = t.entropy;
    }
    t.old_logprob = d(old);
    t.advantage = d(adv);
    t.coef = d(coef);
    t.behaviour_logprob = d(behaviour);
    t.ref_logprob = d(ref);
    return policy_loss(t, o).loss;
  };
  torch::Tensor lp_leaf, ent_leaf;
  loss_at(lp, ent, &lp_leaf, &ent_leaf).backward();
  auto g_lp = values(lp_leaf.grad());
  auto g_ent = values(ent_leaf.grad());
  const double h = 1e-6;
  for (size_t i = 0; i < lp.size(); ++i) {
    auto plus = lp, minus = lp;
    plus[i] += h;
    minus[i] -= h;
    const double fd = (loss_at(plus, ent, nullptr, nullptr).item<double>() -
                       loss_at(minus, ent, nullptr, nullptr).item<double>()) /
                      (2 * h);
    EXPECT_NEAR(g_lp[i], fd, 1e-7 + 1e-6 * std::abs(fd)) << "logprob " << i;
    auto ep = ent, em = ent;
    ep[i] += h;
    em[i] -= h;
    const double fde = (loss_at(lp, ep, nullptr, nullptr).item<double>() -
                        loss_at(lp, em, nullptr, nullptr).item<double>()) /
                       (2 * h);
    EXPECT_NEAR(g_ent[i], fde, 1e-7 + 1e-6 * std::abs(fde)) << "entropy " << i;
  }
}

TEST(PolicyLoss, ShapesAreChecked) {
  train_data::LossOptions o;
  Case c = make({1.0, 1.0}, {1.0, 1.0}, {1.0});
  EXPECT_THROW(policy_loss(c.terms, o), Error);
  Case k = make({1.0}, {1.0}, {1.0});
  o.use_kl = true;
  EXPECT_THROW(policy_loss(k.terms, o), Error);  // no reference logprobs
}

}  // namespace
}  // namespace ajet::train
