// The packed training forward against the dense model: attention plans against the tree mask,
// block-sparse attention and chunked logprobs (values and gradients) against plain autograd,
// float64 finite differences of both custom backward passes, and packed (plain and tree) logprobs
// and model gradients against one dense forward per sample.
#include "train/packed_forward.h"
#include "train/flash_kernel.h"
#include "model/blas_kernel.h"

#include <gtest/gtest.h>

#include <random>

#include "tracking/packing.h"
#include "common/error.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using train_data::testing::random_batch;

std::vector<tracking::PackedSequence> pack(const train_data::Batch& b, bool tree, size_t budget) {
  std::vector<std::span<const int32_t>> views;
  for (const auto& s : b.samples) views.emplace_back(s.token_ids);
  std::span<const std::span<const int32_t>> all(views);
  return tree ? tracking::pack_tree(all, budget) : tracking::pack_plain(all, budget);
}

torch::Tensor dense_mask(const tracking::PackedSequence& seq) {
  auto m = tracking::dense_attention_mask(seq);
  const auto t = static_cast<int64_t>(seq.size());
  return torch::tensor(std::vector<int64_t>(m.begin(), m.end())).view({1, t, t}).to(torch::kBool);
}

TEST(AttentionPlan, CoversExactlyTheTreeMask) {
  train_data::Batch b = random_batch(3, 4, 6, 5, 50, 11);
  for (bool tree : {false, true}) {
    for (int64_t rows : {1, 4, 7, 128}) {
      auto seqs = pack(b, tree, 1000);
      ASSERT_EQ(seqs.size(), 1u);
      const auto& seq = seqs[0];
      AttentionPlan plan = plan_attention(seq.subtree_end, rows);
      const auto t = static_cast<int64_t>(seq.size());
      std::vector<int> covered(static_cast<size_t>(t * t), 0);
      for (const auto& blk : plan.blocks) {
        auto keys = blk.key_index.defined()
                        ? blk.key_index
                        : torch::arange(blk.key_begin, blk.key_begin + blk.key_count);
        auto bias = blk.bias;
        for (int64_t i = blk.q_begin; i < blk.q_end; ++i) {
          for (int64_t kk = 0; kk < blk.key_count; ++kk) {
            const int64_t j = keys[kk].item<int64_t>();
            const bool allowed = kk < blk.full_keys ||
                                 bias[i - blk.q_begin][kk - blk.full_keys].item<float>() == 0.0f;
            EXPECT_EQ(allowed,
                      tracking::may_attend(seq, static_cast<size_t>(i), static_cast<size_t>(j)));
            if (allowed) ++covered[static_cast<size_t>(i * t + j)];
          }
        }
      }
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < t; ++j) {
          EXPECT_EQ(covered[static_cast<size_t>(i * t + j)],
                    tracking::may_attend(seq, i, j) ? 1 : 0);
        }
      }
      if (tree && rows == 4) {
        EXPECT_LT(plan.computed_pairs(), t * t);  // blocks nobody sees are skipped
      }
    }
  }
}

TEST(AttentionPlan, MaskMemoryIsLinearInTokens) {
  // A causal sequence and a group of 8 sharing a long prompt: the mask covers only the keys some
  // row of a block may not see, ~rows entries per token, where the full (Tq, K) blocks held ~T/2.
  for (int64_t t : {int64_t{2048}, int64_t{8192}}) {
    std::vector<int32_t> causal(static_cast<size_t>(t), static_cast<int32_t>(t));
    const AttentionPlan plan = plan_attention(causal, 128);
    EXPECT_EQ(plan.computed_pairs(), (t / 128) * (t / 128 + 1) / 2 * 128 * 128);
    EXPECT_LE(plan.bias_bytes(), t * 128 * 4) << t;
  }
  // 8 samples: a 4,000-token prompt, then 40 tokens each (depth-first: the prompt, then each
  // branch).
  const int32_t prompt = 4000, own = 40, n = prompt + 8 * own;
  std::vector<int32_t> tree(static_cast<size_t>(n));
  for (int32_t j = 0; j < prompt; ++j) tree[static_cast<size_t>(j)] = n;
  for (int32_t s = 0; s < 8; ++s) {
    for (int32_t i = 0; i < own; ++i)
      tree[static_cast<size_t>(prompt + s * own + i)] = prompt + (s + 1) * own;
  }
  const AttentionPlan plan = plan_attention(tree, 128);
  EXPECT_LE(plan.bias_bytes(), int64_t{n} * (128 + 8 * own) * 4);
  for (const auto& blk : plan.blocks) {
    if (blk.q_begin >= prompt) {
      EXPECT_GE(blk.full_keys, prompt) << "the shared prompt needs no mask";
    }
  }
}

// The flash kernel against the tensor-op path (each block's scores at once), values and gradients,
// on a tree with blocks of gathered keys, a long causal sequence spanning many key tiles, partial
// and full masks, float32 and float64; and it does run where the BLAS is OpenBLAS (Debian's
// libtorch).
TEST(BlockSparseAttention, FlashKernelMatchesTheTensorOpPath) {
  if (!model::openblas_core().empty()) {
    EXPECT_TRUE(flash_available());
  }
  if (!flash_available()) GTEST_SKIP() << "no cblas_sgemm in this process";
  train_data::Batch b = random_batch(3, 4, 30, 9, 50, 5);
  auto tree_seq = pack(b, /*tree=*/true, 1000)[0];
  std::vector<int32_t> causal(700, 700);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    for (bool tree : {true, false}) {
      const std::vector<int32_t> ends = tree ? tree_seq.subtree_end : causal;
      const auto t = static_cast<int64_t>(ends.size());
      for (bool partial : {true, false}) {
        set_partial_block_masks(partial);
        const AttentionPlan plan = plan_attention(ends, tree ? 16 : 128);
        set_partial_block_masks(true);
        torch::manual_seed(7);
        auto opts = torch::TensorOptions().dtype(dtype);
        auto q0 = torch::randn({t, 6, 16}, opts), k0 = torch::randn({t, 2, 16}, opts),
             v0 = torch::randn({t, 2, 16}, opts);
        auto up = torch::randn({t, 96}, opts);
        std::vector<std::vector<torch::Tensor>> got;
        for (bool flash : {false, true}) {
          set_flash_attention_enabled(flash);
          auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
               v = v0.clone().requires_grad_(true);
          auto out = block_sparse_attention(q * 0.25, k, v, plan, 0);
          (out * up).sum().backward();
          got.push_back({out.detach(), q.grad(), k.grad(), v.grad()});
        }
        {  // the same bits again: the threads' shares of the key and value gradients never depend
           // on timing
          auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
               v = v0.clone().requires_grad_(true);
          auto out = block_sparse_attention(q * 0.25, k, v, plan, 0);
          (out * up).sum().backward();
          EXPECT_TRUE(torch::equal(out.detach(), got[1][0]) && torch::equal(k.grad(), got[1][2]) &&
                      torch::equal(v.grad(), got[1][3]) && torch::equal(q.grad(), got[1][1]));
        }
        set_flash_attention_enabled(true);
        const double tol = dtype == torch::kDouble ? 1e-12 : 2e-5;
        EXPECT_LT(testing::relative_difference(got[1], got[0]), tol) << tree << partial << dtype;
      }
    }
  }
}

TEST(BlockSparseAttention, MatchesDenseMaskedAttentionWithGradients) {
  train_data::Batch b = random_batch(2, 3, 5, 6, 50, 3);
  auto seq = pack(b, /*tree=*/true, 1000)[0];
  const auto t = static_cast<int64_t>(seq.size());
  torch::manual_seed(1);
  auto q0 = torch::randn({t, 4, 8}), k0 = torch::randn({t, 2, 8}), v0 = torch::randn({t, 2, 8});
  auto upstream = torch::randn({t, 32});
  auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
       v = v0.clone().requires_grad_(true);
  // The model's dense attention scales inside; ours takes q pre-scaled.
  auto ref =
      model::masked_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), dense_mask(seq))[0];
  (ref * upstream).sum().backward();
  for (int64_t rows : {1, 5, 16, 128}) {
    for (int64_t keep : {int64_t{0}, int64_t{1} << 30}) {
      AttentionPlan plan = plan_attention(seq.subtree_end, rows);
      auto q2 = q0.clone().requires_grad_(true), k2 = k0.clone().requires_grad_(true),
           v2 = v0.clone().requires_grad_(true);
      auto out = block_sparse_attention(q2 / std::sqrt(8.0), k2, v2, plan, keep);
      EXPECT_LT(testing::relative_difference({out}, {ref}), 1e-5) << rows << " " << keep;
      (out * upstream).sum().backward();
      EXPECT_LT(testing::relative_difference({q2.grad(), k2.grad(), v2.grad()},
                                             {q.grad(), k.grad(), v.grad()}),
                1e-5)
          << rows << " " << keep;
    }
  }
}

// Blocks that start where the caller says (run_sft puts them at each demo) cover the same mask; bad
// starts are refused with what is wrong.
TEST(AttentionPlan, GivenBlockStartsCoverExactlyTheTreeMask) {
  train_data::Batch b = random_batch(3, 4, 6, 5, 50, 11);
  const auto seq = pack(b, true, 1000)[0];
  const auto t = static_cast<int64_t>(seq.size());
  std::mt19937 rng(5);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<int64_t> starts = {0};
    for (int64_t i = 1; i < t; ++i) {
      if (rng() % 5 == 0) starts.push_back(i);
    }
    AttentionPlan plan = plan_attention(seq.subtree_end, starts);
    ASSERT_EQ(plan.blocks.size(), starts.size());
    std::vector<int> covered(static_cast<size_t>(t * t), 0);
    for (size_t k = 0; k < plan.blocks.size(); ++k) {
      const auto& blk = plan.blocks[k];
      EXPECT_EQ(blk.q_begin, starts[k]);
      EXPECT_EQ(blk.q_end, k + 1 < starts.size() ? starts[k + 1] : t);
      auto keys = blk.key_index.defined()
                      ? blk.key_index
                      : torch::arange(blk.key_begin, blk.key_begin + blk.key_count);
      for (int64_t i = blk.q_begin; i < blk.q_end; ++i) {
        for (int64_t kk = 0; kk < blk.key_count; ++kk) {
          const int64_t j = keys[kk].item<int64_t>();
          const bool allowed = kk < blk.full_keys ||
                               blk.bias[i - blk.q_begin][kk - blk.full_keys].item<float>() == 0.0f;
          EXPECT_EQ(allowed,
                    tracking::may_attend(seq, static_cast<size_t>(i), static_cast<size_t>(j)));
          if (allowed) ++covered[static_cast<size_t>(i * t + j)];
        }
      }
    }
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < t; ++j)
        EXPECT_EQ(covered[static_cast<size_t>(i * t + j)], tracking::may_attend(seq, i, j) ? 1 : 0);
    }
  }
  EXPECT_THROW(plan_attention(seq.subtree_end, std::vector<int64_t>{1, 4}), Error);
  EXPECT_THROW(plan_attention(seq.subtree_end, std::vector<int64_t>{0, 4, 4}), Error);
  EXPECT_THROW(plan_attention(seq.subtree_end, std::vector<int64_t>{0, t}), Error);
}

// Central differences in float64 of sum(out * w) for every input element of a small case.
TEST(BlockSparseAttention, BackwardMatchesFiniteDifferences) {
  train_data::Batch b = random_batch(1, 3, 3, 3, 50, 5);
  auto seq = pack(b, true, 1000)[0];
  const auto t = static_cast<int64_t>(seq.size());
  AttentionPlan plan = plan_attention(seq.subtree_end, 3);
  torch::manual_seed(2);
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  std::vector<torch::Tensor> inputs = {torch::randn({t, 2, 3}, opts), torch::randn({t, 1, 3}, opts),
                                       torch::randn({t, 1, 3}, opts)};
  auto w = torch::randn({t, 6}, opts);
  for (int64_t keep : {int64_t{0}, int64_t{1} << 30}) {
    auto f = [&](const std::vector<torch::Tensor>& x) {
      return (block_sparse_attention(x[0], x[1], x[2], plan, keep) * w).sum();
    };
    std::vector<torch::Tensor> leaves;
    for (auto& x : inputs) leaves.push_back(x.clone().requires_grad_(true));
    f(leaves).backward();
    torch::NoGradGuard no_grad;
    for (size_t which = 0; which < 3; ++which) {
      auto flat = inputs[which].view({-1});
      for (int64_t e = 0; e < flat.numel(); ++e) {
        auto plus = inputs, minus = inputs;
        plus[which] = inputs[which].clone();
        minus[which] = inputs[which].clone();
        plus[which].view({-1})[e] += 1e-6;
        minus[which].view({-1})[e] -= 1e-6;
        const double fd = (f(plus).item<double>() - f(minus).item<double>()) / 2e-6;
        EXPECT_NEAR(leaves[which].grad().view({-1})[e].item<double>(), fd, 1e-7)
            << which << " " << e;
      }
    }
  }
}

TEST(TokenLogprobs, MatchesLogSoftmaxWithGradients) {
  auto config = testing::qwen2_config();
  auto m = testing::random_model(config, 4);
  torch::manual_seed(3);
  const int64_t rows = 13;
  auto h0 = torch::randn({rows, config.hidden_size});
  auto targets = torch::randint(config.vocab_size, {rows}, torch::kLong);
  auto a = torch::randn({rows}), c = torch::randn({rows});
  auto weight = lm_head_weight(m);
  auto h = h0.clone().requires_grad_(true);
  auto logp = torch::log_softmax(m->lm_head(h), -1);  // (M, V)
  auto ref_lp = logp.gather(1, targets.unsqueeze(1)).squeeze(1);
  auto ref_h = -(logp.exp() * logp).sum(-1);
  ((ref_lp * a).sum() + (ref_h * c).sum()).backward();
  auto ref_dh = h.grad().clone();
  auto ref_dw = weight.grad().clone();
  for (int64_t chunk : {1, 4, 100}) {
    for (int64_t keep : {int64_t{0}, int64_t{1} << 30}) {
      weight.mutable_grad().zero_();
      auto h2 = h0.clone().requires_grad_(true);
      TokenLogprobs out = token_logprobs(m, h2, targets, chunk, keep);
      EXPECT_LT(testing::relative_difference({out.logprob, out.entropy}, {ref_lp, ref_h}), 1e-6);
      ((out.logprob * a).sum() + (out.entropy * c).sum()).backward();
      EXPECT_LT(testing::relative_difference({h2.grad(), weight.grad()}, {ref_dh, ref_dw}), 1e-5)
          << chunk << " " << keep;
    }
  }
  // Only the logprob used: the entropy contributes nothing.
  weight.mutable_grad().zero_();
  auto h3 = h0.clone().requires_grad_(true);
  token_logprobs(m, h3, targets, 5).logprob.sum().backward();
  auto h4 = h0.clone().requires_grad_(true);
  torch::log_softmax(m->lm_head(h4), -1).gather(1, targets.unsqueeze(1)).sum().backward();
  EXPECT_LT(testing::relative_difference({h3.grad()}, {h4.grad()}), 1e-5);
}

// A frozen lm_head (LoRA) gets no gradient and no (V, C) buffer; the hidden states' gradient is the
// same.
TEST(TokenLogprobs, AFrozenLmHeadGetsNoGradient) {
  auto config = testing::qwen2_config();
  auto m = testing::random_model(config, 5);
  torch::manual_seed(6);
  auto h0 = torch::randn({9, config.hidden_size});
  auto targets = torch::randint(config.vocab_size, {9}, torch::kLong);
  auto weight = lm_head_weight(m);
  auto h1 = h0.clone().requires_grad_(true);
  auto out = token_logprobs(m, h1, targets, 4);
  (out.logprob.sum() + out.entropy.sum()).backward();
  weight.set_requires_grad(false);
  auto h2 = h0.clone().requires_grad_(true);
  auto frozen = token_logprobs(m, h2, targets, 4);
  (frozen.logprob.sum() + frozen.entropy.sum()).backward();
  EXPECT_LT(testing::relative_difference({h2.grad()}, {h1.grad()}), 1e-6);
  weight.mutable_grad() = torch::Tensor();
  auto h3 = h0.clone().requires_grad_(true);
  token_logprobs(m, h3, targets, 4).logprob.sum().backward();
  EXPECT_FALSE(weight.grad().defined());
}

TEST(TokenLogprobs, BackwardMatchesFiniteDifferences) {
  auto config = testing::qwen2_config();
  config.vocab_size = 7;
  config.hidden_size = 4;
  auto m = testing::random_model(config, 9);
  m->to(torch::kDouble);
  torch::manual_seed(4);
  auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto h0 = torch::randn({5, 4}, opts);
  auto targets = torch::randint(7, {5}, torch::kLong);
  auto a = torch::randn({5}, opts), c = torch::randn({5}, opts);
  auto weight = lm_head_weight(m);
  auto f = [&](const torch::Tensor& h) {
    auto out = token_logprobs(m, h, targets, 2, 0);
    return (out.logprob * a).sum() + (out.entropy * c).sum();
  };
  auto h = h0.clone().requires_grad_(true);
  f(h).backward();
  torch::NoGradGuard no_grad;
  for (int64_t e = 0; e < h0.numel(); ++e) {
    auto plus = h0.clone(), minus = h0.clone();
    plus.view({-1})[e] += 1e-6;
    minus.view({-1})[e] -= 1e-6;
    const double fd = (f(plus).item<double>() - f(minus).item<double>()) / 2e-6;
    EXPECT_NEAR(h.grad().view({-1})[e].item<double>(), fd, 1e-7) << e;
  }
  for (int64_t e = 0; e < weight.numel(); ++e) {
    const double saved = weight.view({-1})[e].item<double>();
    weight.view({-1})[e] = saved + 1e-6;
    const double up = f(h0).item<double>();
    weight.view({-1})[e] = saved - 1e-6;
    const double down = f(h0).item<double>();
    weight.view({-1})[e] = saved;
    EXPECT_NEAR(weight.grad().view({-1})[e].item<double>(), (up - down) / 2e-6, 1e-7) << e;
  }
}

// Per trained (sample, position): logprob from one dense forward of that sample alone.
torch::Tensor dense_logprobs(model::Qwen2Model& m, const train_data::Batch& b) {
  std::vector<torch::Tensor> out;
  for (const auto& s : b.samples) {
    const auto l = static_cast<int64_t>(s.size());
    auto ids =
        torch::tensor(std::vector<int64_t>(s.token_ids.begin(), s.token_ids.end())).view({1, l});
    auto logp =
        torch::log_softmax(m->forward_logits(ids, torch::arange(l).view({1, l})), -1)[0];  // (L, V)
    for (int64_t p = 1; p < l; ++p) {
      if (s.loss_mask[static_cast<size_t>(p)])
        out.push_back(logp[p - 1][s.token_ids[static_cast<size_t>(p)]]);
    }
  }
  return torch::stack(out);
}

// The same terms in the same order from packed sequences through the custom functions.
torch::Tensor packed_logprobs(model::Qwen2Model& m, const train_data::Batch& b, bool tree,
                              size_t budget, int64_t rows) {
  std::vector<std::vector<torch::Tensor>> per_sample(b.samples.size());
  for (size_t i = 0; i < b.samples.size(); ++i) per_sample[i].resize(b.samples[i].size());
  for (auto& seq : pack(b, tree, budget)) {
    AttentionPlan plan = plan_attention(seq.subtree_end, rows);
    std::vector<int64_t> ids(seq.token_ids.begin(), seq.token_ids.end()),
        pos(seq.position_ids.begin(), seq.position_ids.end());
    auto hidden = packed_hidden(m, torch::tensor(ids), torch::tensor(pos), plan);
    std::vector<int64_t> parents, targets;
    for (size_t i = 0; i < seq.size(); ++i) {
      parents.push_back(std::max(0, seq.parent[i]));
      targets.push_back(seq.token_ids[i]);
    }
    auto lp =
        token_logprobs(m, hidden.index_select(0, torch::tensor(parents)), torch::tensor(targets), 7)
            .logprob;
    for (size_t k = 0; k < seq.sample_count(); ++k) {
      const auto input = static_cast<size_t>(seq.samples[k]);
      for (size_t p = 0; p < seq.sample_tokens[k].size(); ++p)
        per_sample[input][p] = lp[seq.sample_tokens[k][p]];
    }
  }
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < b.samples.size(); ++i) {
    for (size_t p = 1; p < b.samples[i].size(); ++p) {
      if (b.samples[i].loss_mask[p]) out.push_back(per_sample[i][p]);
    }
  }
  return torch::stack(out);
}

std::vector<torch::Tensor> grads_of(model::Qwen2Model& m) {
  std::vector<torch::Tensor> g;
  for (auto& [name, p] : m->hf_named_parameters()) g.push_back(p.grad().clone());
  return g;
}

TEST(PackedForward, PlainAndTreePacksMatchDenseForwardsWithGradients) {
  for (auto config : {testing::qwen2_config(), testing::qwen3_config()}) {
    auto m = testing::random_model(config, 21);
    train_data::Batch b = random_batch(2, 3, 7, 6, config.vocab_size, 8);
    auto ref = dense_logprobs(m, b);
    torch::manual_seed(5);
    auto w = torch::randn({ref.size(0)});
    (ref * w).sum().backward();
    auto ref_grads = grads_of(m);
    for (bool tree : {false, true}) {
      for (size_t budget : {size_t{12}, size_t{1000}}) {
        m->zero_grad();
        auto lp = packed_logprobs(m, b, tree, budget, tree ? 4 : 16);
        EXPECT_LT(testing::relative_difference({lp}, {ref}), 1e-5)
            << config.model_type << " tree " << tree << " budget " << budget;
        (lp * w).sum().backward();
        EXPECT_LT(testing::relative_difference(grads_of(m), ref_grads), 1e-4)
            << config.model_type << " tree " << tree;
      }
    }
  }
}

}  // namespace
}  // namespace ajet::train
