// Plain and tree packing: what each packed token may attend is exactly its sample prefix, the dense
// mask agrees with the compact form, a loss computed the documented way over packed tokens equals
// the loss over unpacked samples, and GRPO groups share their prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "common/error.h"
#include "tracking/merge.h"
#include "tracking/packing.h"
#include "tracking/synthetic.h"

namespace ajet::tracking {
namespace {

using Ids = std::vector<TokenId>;

// A toy causal "model": the logprob of the next token depends on the whole visible context.
double toy_logprob(const Ids& context, TokenId next) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : context) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(next)) * 1099511628211ull;
  return -static_cast<double>(h % 1000) / 250.0;
}

// The context query `q` sees through the packed attention, in position order.
Ids visible(const PackedSequence& seq, size_t q) {
  std::vector<std::pair<int32_t, TokenId>> keys;
  for (size_t j = 0; j < seq.size(); ++j) {
    if (may_attend(seq, q, j)) keys.emplace_back(seq.position_ids[j], seq.token_ids[j]);
  }
  std::sort(keys.begin(), keys.end());
  Ids out;
  for (auto [p, t] : keys) out.push_back(t);
  return out;
}

// A PPO-style per-token term with a clipped ratio: not linear, depends on the behaviour logprob.
double term(double lp, double old_lp, double advantage) {
  const double ratio = std::exp(lp - old_lp);
  return -std::min(ratio * advantage, std::clamp(ratio, 0.8, 1.2) * advantage);
}

std::vector<Sample> group_samples(int turns, int group, uint64_t seed) {
  synthetic::AgentShape shape;
  shape.turns = turns;
  shape.system_prompt_tokens = 40;
  shape.task_tokens = 8;
  shape.generated_tokens_per_turn = 12;
  shape.observation_tokens_per_turn = 6;
  shape.vocab_size = 64;  // small: completions share first tokens sometimes
  std::vector<Sample> out;
  auto episodes = synthetic::grpo_group(shape, group, seed);
  for (size_t e = 0; e < episodes.size(); ++e) {
    MergedEpisode m = merge_episode({"ep" + std::to_string(e), "task", static_cast<double>(e % 3)},
                                    episodes[e], {});
    for (Sample& s : m.samples) out.push_back(std::move(s));
  }
  return out;
}

TEST(Packing, AttentionShowsEachTokenExactlyItsSamplePrefix) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    std::vector<Sample> samples = group_samples(1 + static_cast<int>(seed % 3), 4, seed);
    synthetic::TreeShape shape;
    auto tree = merge_episode({"tree", "t2", 1.0}, synthetic::random_tree(shape, "tree", seed), {});
    for (Sample& s : tree.samples) samples.push_back(std::move(s));
    for (bool use_tree : {false, true}) {
      const size_t budget = 64 + seed * 7;
      auto seqs = use_tree ? pack_tree(std::span<const Sample>(samples), budget)
                           : pack_plain(std::span<const Sample>(samples), budget);
      for (const PackedSequence& q : seqs) {
        const std::vector<uint8_t> dense = dense_attention_mask(q);
        for (size_t i = 0; i < q.size(); ++i) {
          for (size_t j = 0; j < q.size(); ++j) {
            ASSERT_EQ(dense[i * q.size() + j] != 0, may_attend(q, i, j));
            if (may_attend(q, i, j)) {
              ASSERT_EQ(q.segment_ids[i], q.segment_ids[j]);
            }
          }
          // Every occurrence of token i sees exactly its sample's prefix up to and including it.
          const Ids ctx = visible(q, i);
          auto ks = q.occurrence_samples(i);
          auto ps = q.occurrence_positions(i);
          ASSERT_FALSE(ks.empty());
          for (size_t o = 0; o < ks.size(); ++o) {
            const Sample& s = samples[static_cast<size_t>(q.samples[static_cast<size_t>(ks[o])])];
            const Ids prefix(s.token_ids.begin(), s.token_ids.begin() + ps[o] + 1);
            ASSERT_EQ(ctx, prefix)
                << "seed " << seed << (use_tree ? " tree" : " plain") << " token " << i;
            ASSERT_EQ(q.position_ids[i], ps[o]);
          }
        }
      }
    }
  }
}

TEST(Packing, LossOverPackedTokensEqualsLossOverSamples) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::vector<Sample> samples = group_samples(3, 8, seed);
    std::mt19937_64 rng(seed);
    std::vector<double> advantage(samples.size());
    for (double& a : advantage) a = std::uniform_real_distribution<double>(-1.0, 1.0)(rng);

    // Unpacked: token-mean over every sample's trained tokens.
    double num = 0;
    double count = 0;
    for (size_t s = 0; s < samples.size(); ++s) {
      const Sample& x = samples[s];
      for (size_t p = 1; p < x.token_ids.size(); ++p) {
        if (!x.loss_mask[p]) continue;
        const Ids ctx(x.token_ids.begin(), x.token_ids.begin() + static_cast<std::ptrdiff_t>(p));
        num += x.weight * term(toy_logprob(ctx, x.token_ids[p]), x.logprobs[p], advantage[s]);
        count += 1;
      }
    }
    const double unpacked = num / count;

    for (bool use_tree : {false, true}) {
      auto seqs = use_tree ? pack_tree(std::span<const Sample>(samples), 100000)
                           : pack_plain(std::span<const Sample>(samples), 100000);
      double pnum = 0;
      double pcount = 0;
      for (const PackedSequence& q : seqs) {
        for (size_t i = 0; i < q.size(); ++i) {
          if (q.parent[i] < 0) continue;  // predicted by nothing
          // The logits for token i come from its parent's position.
          const double lp =
              toy_logprob(visible(q, static_cast<size_t>(q.parent[i])), q.token_ids[i]);
          auto ks = q.occurrence_samples(i);
          auto ps = q.occurrence_positions(i);
          for (size_t o = 0; o < ks.size(); ++o) {
            const auto in = static_cast<size_t>(q.samples[static_cast<size_t>(ks[o])]);
            const Sample& x = samples[in];
            const auto p = static_cast<size_t>(ps[o]);
            if (!x.loss_mask[p]) continue;
            pnum += x.weight * term(lp, x.logprobs[p], advantage[in]);
            pcount += 1;
          }
        }
      }
      EXPECT_NEAR(pnum / pcount, unpacked, 1e-12 * std::max(1.0, std::abs(unpacked)))
          << "seed " << seed;
      EXPECT_EQ(pcount, count);
    }
  }
}

TEST(Packing, TreePackingSharesTheGroupPromptAndAggregatesCoefficients) {
  std::vector<Sample> samples = group_samples(1, 8, 3);
  ASSERT_EQ(samples.size(), 8u);
  auto plain = pack_plain(std::span<const Sample>(samples), 1u << 20);
  auto tree = pack_tree(std::span<const Sample>(samples), 1u << 20);
  ASSERT_EQ(tree.size(), 1u);
  const size_t prompt =
      40 + (2 + 8) + 2;  // system message (40 with its header), task message, generation prompt
  size_t total = 0;
  for (const Sample& s : samples) total += s.token_ids.size();
  EXPECT_EQ(packed_tokens(plain), total);
  EXPECT_LE(packed_tokens(tree), total - 7 * prompt);
  EXPECT_EQ(tree[0].segment_ids.front(), tree[0].segment_ids.back()) << "one shared root";
  // aggregate(): sum of mask * coefficient over occurrences, per packed token.
  std::vector<double> coef(samples.size());
  for (size_t s = 0; s < coef.size(); ++s) coef[s] = static_cast<double>(s + 1);
  std::vector<double> agg = aggregate(tree[0], samples, coef);
  double agg_sum = 0;
  for (double a : agg) agg_sum += a;
  double direct = 0;
  for (size_t s = 0; s < samples.size(); ++s)
    direct += static_cast<double>(samples[s].trained_tokens()) * coef[s];
  EXPECT_DOUBLE_EQ(agg_sum, direct);
  for (size_t i = 0; i < prompt; ++i) EXPECT_EQ(agg[i], 0.0) << "prompt token " << i;
}

TEST(Packing, APromptLongerThanTheBudgetIsPackedOncePerTree) {
  // Eight samples of one GRPO group: a 20-token prompt, then their own tokens. The budget (10)
  // bounds the tokens beyond the shared prompt, so the prompt is computed once, not eight times.
  Ids prompt(20);
  std::iota(prompt.begin(), prompt.end(), 100);
  auto group = [&](size_t own) {
    std::vector<Ids> seqs;
    for (TokenId s = 0; s < 8; ++s) {
      Ids x = prompt;
      for (size_t i = 0; i < own; ++i)
        x.push_back(static_cast<TokenId>(1000 + 10 * s + static_cast<TokenId>(i)));
      seqs.push_back(x);
    }
    return seqs;
  };
  for (size_t own : {size_t{1}, size_t{3}}) {
    std::vector<Ids> seqs = group(own);
    std::vector<std::span<const TokenId>> views(seqs.begin(), seqs.end());
    auto tree = pack_tree(std::span<const std::span<const TokenId>>(views), 10);
    // 1 own token each: 8 beyond the prompt, one tree. 3 each: 3 samples (9 tokens) per tree.
    ASSERT_EQ(tree.size(), own == 1 ? 1u : 3u) << own;
    size_t samples = 0;
    for (const PackedSequence& q : tree) {
      EXPECT_EQ(q.shared_prefix, prompt.size());
      EXPECT_LE(q.size() - q.shared_prefix, 10u);
      EXPECT_EQ(q.size(), prompt.size() + q.sample_count() * own);
      for (size_t k = 0; k < q.sample_count(); ++k)
        EXPECT_EQ(unpack(q, k), seqs[static_cast<size_t>(q.samples[k])]);
      samples += q.sample_count();
    }
    EXPECT_EQ(samples, 8u);
  }
}

TEST(Packing, BudgetsAndErrors) {
  std::vector<Ids> seqs = {{1, 2, 3, 4}, {1, 2, 3, 5}, {9, 9}, {1, 2, 7, 7, 7, 7, 7, 7, 7, 7}};
  std::vector<std::span<const TokenId>> views(seqs.begin(), seqs.end());
  auto plain = pack_plain(std::span<const std::span<const TokenId>>(views), 6);
  size_t over = 0;
  for (const PackedSequence& q : plain) {
    over += q.over_budget ? 1 : 0;
    if (!q.over_budget) {
      EXPECT_LE(q.size(), 6u);
    }
  }
  EXPECT_EQ(over, 1u) << "the 10-token sequence goes alone";
  auto tree = pack_tree(std::span<const std::span<const TokenId>>(views), 6);
  // Sorted: {1,2,3,4} {1,2,3,5} {1,2,7...} {9,9}: the first two share 3 tokens (5 distinct).
  ASSERT_GE(tree.size(), 2u);
  EXPECT_EQ(tree[0].size(), 5u);
  EXPECT_EQ(tree[0].parent, (std::vector<int32_t>{-1, 0, 1, 2, 2}));
  EXPECT_EQ(tree[0].subtree_end, (std::vector<int32_t>{5, 5, 5, 4, 5}));
  EXPECT_THROW(pack_plain(std::span<const std::span<const TokenId>>(views), 0), Error);

  Sample bad;
  bad.token_ids = {1, 2};
  bad.loss_mask = {1, 0};
  bad.logprobs = {0, 0};
  bad.policy_versions = {0, -1};
  std::vector<Sample> v = {bad};
  EXPECT_THROW(pack_tree(std::span<const Sample>(v), 10), Error);
}

}  // namespace
}  // namespace ajet::tracking
