// The decoder's maths: masks (causal, padded batches, packed block-diagonal), GQA, rotary tables,
// initialisation, presets, dtype, the LoRA hook and gradients. Reference-forward checks are in
// reference_test.cc, file I/O in model_dir_test.cc.
#include <gtest/gtest.h>

#include "model/presets.h"
#include "model/qwen2.h"
#include "torch_util.h"

namespace ajet::model {
namespace {

using testing::arange_positions;
using testing::max_abs_diff;
using testing::qwen2_config;
using testing::qwen3_config;
using testing::random_model;

// Tolerance for the same maths evaluated with different batch shapes (BLAS may sum in another
// order).
constexpr double kShapeTol = 2e-5;

torch::Tensor random_ids(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(vocab, {b, t}, gen, torch::kLong);
}

class ModelMaths : public ::testing::TestWithParam<std::string> {
 protected:
  hf::ModelConfig config() const { return GetParam() == "qwen2" ? qwen2_config() : qwen3_config(); }
};

TEST_P(ModelMaths, ExplicitCausalMaskEqualsDefaultAndMaskMatters) {
  auto model = random_model(config(), 1);
  auto ids = random_ids(2, 9, config().vocab_size, 2);
  auto pos = arange_positions(9).expand({2, 9});
  auto causal = causal_mask(9, torch::kCPU).unsqueeze(0).expand({2, 9, 9});
  auto a = model->forward_logits(ids, pos);  // (2, 9, V)
  auto b = model->forward_logits(ids, pos, causal);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  // Letting the first token see the future changes its logits; with one layer of look-ahead the
  // change reaches every later token through the next layer.
  auto peek = causal.clone();
  peek.select(1, 0).fill_(true);
  auto c = model->forward_logits(ids, pos, peek);
  for (int64_t t = 0; t < 9; ++t)
    EXPECT_GT(max_abs_diff(a.select(1, t), c.select(1, t)), 1e-3) << "position " << t;
}

TEST_P(ModelMaths, PaddedBatchMatchesEachSequenceAlone) {
  auto model = random_model(config(), 3);
  const int64_t v = config().vocab_size;
  auto long_ids = random_ids(1, 8, v, 4);                                    // (1, 8)
  auto short_ids = random_ids(1, 5, v, 5);                                   // (1, 5)
  auto alone_long = model->forward_logits(long_ids, arange_positions(8));    // (1, 8, V)
  auto alone_short = model->forward_logits(short_ids, arange_positions(5));  // (1, 5, V)

  for (bool left_pad : {false, true}) {
    SCOPED_TRACE(left_pad ? "left padding" : "right padding");
    const int64_t pad = 3, off = left_pad ? pad : 0;
    auto ids = torch::zeros({2, 8}, torch::kLong);
    auto pos = torch::zeros({2, 8}, torch::kLong);
    auto key_real = torch::zeros({2, 8}, torch::kBool);  // (B, T) which keys are real tokens
    ids[0] = long_ids[0];
    pos[0] = torch::arange(8);
    key_real[0].fill_(true);
    ids[1].narrow(0, off, 5).copy_(short_ids[0]);
    pos[1].narrow(0, off, 5).copy_(torch::arange(5));
    key_real[1].narrow(0, off, 5).fill_(true);
    // Query t sees key s when s <= t and s is real; left-padded query rows see nothing at all.
    auto mask =
        causal_mask(8, torch::kCPU).unsqueeze(0) & key_real.unsqueeze(1) & key_real.unsqueeze(2);
    auto batch = model->forward_logits(ids, pos, mask);  // (2, 8, V)
    EXPECT_FALSE(batch.isnan().any().item<bool>());
    EXPECT_LT(max_abs_diff(batch[0], alone_long[0]), kShapeTol);
    EXPECT_LT(max_abs_diff(batch[1].narrow(0, off, 5), alone_short[0]), kShapeTol);
  }
}

TEST_P(ModelMaths, BlockDiagonalPackEqualsSeparateRuns) {
  auto model = random_model(config(), 6);
  const int64_t v = config().vocab_size;
  auto a = random_ids(1, 6, v, 7), b = random_ids(1, 4, v, 8);
  auto ids = torch::cat({a, b}, 1);                                      // (1, 10)
  auto pos = torch::cat({arange_positions(6), arange_positions(4)}, 1);  // restarts at 0
  auto mask = torch::zeros({1, 10, 10}, torch::kBool);
  mask[0].narrow(0, 0, 6).narrow(1, 0, 6).copy_(causal_mask(6, torch::kCPU));
  mask[0].narrow(0, 6, 4).narrow(1, 6, 4).copy_(causal_mask(4, torch::kCPU));
  auto packed = model->forward_logits(ids, pos, mask);  // (1, 10, V)
  auto alone_a = model->forward_logits(a, arange_positions(6));
  auto alone_b = model->forward_logits(b, arange_positions(4));
  EXPECT_LT(max_abs_diff(packed.narrow(1, 0, 6), alone_a), kShapeTol);
  EXPECT_LT(max_abs_diff(packed.narrow(1, 6, 4), alone_b), kShapeTol);
  // Without the block mask the second sample would see the first.
  auto leaky = model->forward_logits(ids, pos);
  EXPECT_GT(max_abs_diff(leaky.narrow(1, 6, 4), alone_b), 1e-2);
}

TEST_P(ModelMaths, ShiftingAllPositionsKeepsLogits) {
  // RoPE makes attention depend only on relative positions.
  auto model = random_model(config(), 9);
  auto ids = random_ids(1, 7, config().vocab_size, 10);
  auto a = model->forward_logits(ids, arange_positions(7));
  auto b = model->forward_logits(ids, arange_positions(7, 23));
  EXPECT_LT(max_abs_diff(a, b), 1e-4);
}

TEST_P(ModelMaths, BFloat16ForwardTracksFloat32) {
  auto model = random_model(config(), 11);
  auto ids = random_ids(1, 6, config().vocab_size, 12);
  auto f32 = model->forward_logits(ids, arange_positions(6));
  model->to(torch::kBFloat16);
  auto bf16 = model->forward_logits(ids, arange_positions(6));
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  const double scale = f32.abs().max().item<double>();
  EXPECT_LT(max_abs_diff(f32, bf16), 0.1 * scale);  // bf16 keeps ~3 significant digits per op
}

TEST_P(ModelMaths, GradientsReachEveryParameter) {
  auto model = random_model(config(), 13);
  auto ids = random_ids(2, 5, config().vocab_size, 14);
  auto logits = model->forward_logits(ids, arange_positions(5).expand({2, 5}));
  torch::nn::functional::cross_entropy(logits.reshape({-1, config().vocab_size}), ids.reshape({-1}))
      .backward();
  for (auto& [name, p] : model->hf_named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Flavours, ModelMaths, ::testing::Values("qwen2", "qwen3"));

TEST(MaskedAttention, GroupedHeadsEqualRepeatedKvHeads) {
  torch::manual_seed(0);
  auto q = torch::randn({2, 5, 6, 4});  // (B, Tq, H, D)
  auto k = torch::randn({2, 7, 2, 4});  // (B, Tk, Hkv, D)
  auto v = torch::randn({2, 7, 2, 4});
  auto mask = torch::rand({2, 5, 7}) > 0.3;
  auto grouped = masked_attention(q, k, v, mask);
  // HF repeat_kv: query head j uses kv head j / (H / Hkv).
  auto repeated = masked_attention(q, k.repeat_interleave(3, 2), v.repeat_interleave(3, 2), mask);
  EXPECT_LT(max_abs_diff(grouped, repeated), 1e-6);
  // And a direct per-head computation.
  for (int64_t h = 0; h < 6; ++h) {
    auto qh = q.select(2, h), kh = k.select(2, h / 3), vh = v.select(2, h / 3);  // (B, T, D)
    auto s = torch::matmul(qh, kh.transpose(1, 2)) / 2.0;                        // (B, Tq, Tk)
    s = s.masked_fill(mask.logical_not(), -1e30);
    auto p = torch::softmax(s, -1).masked_fill(mask.any(-1, true).logical_not(), 0.0);
    auto expect = torch::matmul(p, vh);  // (B, Tq, D)
    EXPECT_LT(max_abs_diff(grouped.narrow(2, h * 4, 4), expect), 1e-5) << "head " << h;
  }
}

TEST(MaskedAttention, FullyMaskedRowGivesZeros) {
  auto q = torch::randn({1, 3, 2, 4}), k = torch::randn({1, 3, 2, 4}),
       v = torch::randn({1, 3, 2, 4});
  auto mask = causal_mask(3, torch::kCPU).unsqueeze(0).clone();
  mask[0][1].fill_(false);
  auto out = masked_attention(q, k, v, mask);  // (1, 3, 8)
  EXPECT_FALSE(out.isnan().any().item<bool>());
  EXPECT_EQ(out[0][1].abs().max().item<float>(), 0.0f);
  EXPECT_GT(out[0][2].abs().max().item<float>(), 0.0f);
}

TEST(Rotary, TablesGrowOnDemandAndMatchTheFormula) {
  Rotary rotary(8, 10000.0, 16);
  auto positions = torch::tensor({3, 15, 40, 700}, torch::kLong);  // beyond the initial 16 rows
  auto [cos, sin] = rotary.cos_sin(positions, torch::kFloat);      // (4, 8)
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 8; ++j) {
      const double inv_freq = 1.0 / std::pow(10000.0, static_cast<double>(2 * (j % 4)) / 8.0);
      const double angle = static_cast<double>(positions[i].item<int64_t>()) * inv_freq;
      EXPECT_NEAR(cos[i][j].item<float>(), std::cos(angle), 1e-4) << i << "," << j;
      EXPECT_NEAR(sin[i][j].item<float>(), std::sin(angle), 1e-4) << i << "," << j;
    }
  }
  EXPECT_THROW(rotary.cos_sin(torch::tensor({-1}, torch::kLong), torch::kFloat), std::exception);
}

TEST(Init, SeededAndShapedLikeHuggingFace) {
  auto config = qwen2_config();
  Qwen2Model a(config), b(config), c(config);
  init_weights(a, 42);
  init_weights(b, 42);
  init_weights(c, 43);
  auto pa = a->hf_named_parameters(), pb = b->hf_named_parameters(), pc = c->hf_named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_differs = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << pa[i].first;
    const auto& name = pa[i].first;
    if (name.find("norm.weight") != std::string::npos) {
      EXPECT_TRUE(torch::all(pa[i].second == 1).item<bool>()) << name;
    } else if (name.find(".bias") != std::string::npos) {
      EXPECT_TRUE(torch::all(pa[i].second == 0).item<bool>()) << name;
    } else {
      any_differs |= !torch::equal(pa[i].second, pc[i].second);
      EXPECT_NEAR(pa[i].second.std().item<double>(), 0.02, 0.004) << name;
    }
  }
  EXPECT_TRUE(any_differs);
}

// The warm-up's initialisation (`ajet model init --init-std --scaled-residual-init --embed-std`):
// projections into the residual stream at std * output_scale, input embeddings at embed_std.
TEST(Init, ResidualScalingAndEmbeddingStd) {
  auto config = qwen2_config();
  Qwen2Model m(config);
  init_weights(m, 7, 0.05, 0.25, 0.3);
  for (const auto& [name, t] : m->hf_named_parameters()) {
    if (name.find("norm.weight") != std::string::npos || name.find(".bias") != std::string::npos)
      continue;
    const double std = t.std().item<double>();
    if (name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos) {
      EXPECT_NEAR(std, 0.05 * 0.25, 0.003) << name;
    } else if (name.find("embed_tokens") != std::string::npos) {
      EXPECT_NEAR(std, 0.3, 0.03) << name;
    } else {
      EXPECT_NEAR(std, 0.05, 0.008) << name;
    }
  }
}

TEST(Presets, SizesAndCountsAgreeWithTheModule) {
  for (const auto& preset : presets()) {
    auto config = preset_config(preset.name, 1024);
    Qwen2Model model(config);
    EXPECT_EQ(model->parameter_count(), count_parameters(config)) << preset.name;
    EXPECT_EQ(model->parameter_count(), [&] {
      int64_t n = 0;
      for (const auto& p : model->parameters()) n += p.numel();
      return n;
    }()) << preset.name;
  }
  EXPECT_GE(count_parameters(preset_config("tiny", 1024)), 1'000'000);
  EXPECT_LE(count_parameters(preset_config("tiny", 1024)), 5'000'000);
  EXPECT_GE(count_parameters(preset_config("small", 1024)), 20'000'000);
  EXPECT_LE(count_parameters(preset_config("small", 1024)), 50'000'000);
  EXPECT_THROW(preset_config("huge", 1024), std::exception);
}

// delta(x) = x A^T B^T: the LoRA shape, with B chosen by the test.
class TestAdapter : public LinearAdapter {
 public:
  TestAdapter(int64_t in, int64_t out, int64_t rank) {
    a = register_parameter("lora_A", torch::randn({rank, in}));
    b = register_parameter("lora_B", torch::zeros({out, rank}));
  }
  torch::Tensor delta(const torch::Tensor& x) override {
    return torch::matmul(torch::matmul(x, a.t()), b.t());
  }
  torch::Tensor a, b;
};

TEST(Adapters, AttachChangesOutputOnlyThroughDelta) {
  auto model = random_model(qwen2_config(), 15);
  auto ids = random_ids(1, 6, qwen2_config().vocab_size, 16);
  auto base = model->forward_logits(ids, arange_positions(6));
  const size_t hf_count = model->hf_named_parameters().size();
  const size_t all_count = model->parameters().size();
  auto adapter = std::make_shared<TestAdapter>(32, 32, 2);  // on q_proj: 32 → 4 heads * 8
  model->layer(1)->attach_adapter(*proj_from_name("q_proj"), adapter);
  EXPECT_EQ(model->hf_named_parameters().size(), hf_count);
  EXPECT_EQ(model->parameters().size(), all_count + 2);
  auto named = model->named_parameters();
  EXPECT_NE(named.find("model.layers.1.self_attn.q_proj.adapter.lora_B"), nullptr);
  EXPECT_EQ(max_abs_diff(model->forward_logits(ids, arange_positions(6)), base),
            0.0);  // B = 0: no change
  {
    torch::NoGradGuard no_grad;
    adapter->b.normal_();
  }
  EXPECT_GT(max_abs_diff(model->forward_logits(ids, arange_positions(6)), base), 1e-3);
  model->layer(1)->attach_adapter(Proj::kQ, nullptr);
  EXPECT_EQ(model->parameters().size(), all_count);
  EXPECT_EQ(max_abs_diff(model->forward_logits(ids, arange_positions(6)), base), 0.0);
  EXPECT_FALSE(proj_from_name("lm_head").has_value());
}

// The fused projections (q/k/v in one region; gate/up with the SiLU product; o and down with the
// residual) against the same layer one projection at a time, bit for bit (the same packed kernel
// per panel, the same SiLU product kernel), at row counts with tile and panel tails (intermediate
// 72 is two full panels and a partial one); an adapter takes the one-by-one path.
TEST(FusedProjections, LayerEqualsTheOneByOneLayer) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  auto model = random_model(qwen2_config(), 21);
  ASSERT_TRUE(fused_projections_enabled());
  torch::NoGradGuard no_grad;
  DecoderLayer& layer = model->layer(0);
  auto run = [&](const torch::Tensor& x, const torch::Tensor& positions, bool fused) {
    set_fused_projections_enabled(fused);
    QKV qkv = layer->attention_inputs(x, positions);
    const torch::Tensor attn = qkv.q.reshape({x.size(0), -1});  // any (N, H*D) input will do
    torch::Tensor out = layer->attention_outputs(x, attn);
    set_fused_projections_enabled(true);
    return std::make_pair(qkv, out);
  };
  for (int64_t rows : {2, 13, 64}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(rows));
    const torch::Tensor x = torch::randn({rows, 32}, gen);
    const torch::Tensor positions = torch::arange(rows, torch::kLong) + 3;
    const uint64_t runs = fused_projection_runs();
    auto [fq, fout] = run(x, positions, true);
    EXPECT_EQ(fused_projection_runs() - runs, 4u)
        << "q/k/v, o, gate/up and down each in one region";
    auto [q, out] = run(x, positions, false);
    EXPECT_EQ(fused_projection_runs() - runs, 4u);
    EXPECT_TRUE(torch::equal(fq.q, q.q)) << rows << " rows";
    EXPECT_TRUE(torch::equal(fq.k, q.k)) << rows << " rows";
    EXPECT_TRUE(torch::equal(fq.v, q.v)) << rows << " rows";
    EXPECT_TRUE(fq.q.is_contiguous() && fq.k.is_contiguous() && fq.v.is_contiguous());
    EXPECT_TRUE(torch::equal(fout, out)) << rows << " rows, max diff " << max_abs_diff(fout, out);
    EXPECT_GT(out.abs().max().item<double>(), 0.1);
  }
  // An adapter on up_proj: both settings take the one-by-one path, and the adapter counts.
  const torch::Tensor x = torch::randn({9, 32}, at::make_generator<at::CPUGeneratorImpl>(5));
  const torch::Tensor positions = torch::arange(9, torch::kLong);
  const torch::Tensor plain = run(x, positions, true).second;
  auto adapter = std::make_shared<TestAdapter>(32, 72, 2);
  adapter->b.normal_();
  layer->attach_adapter(Proj::kUp, adapter);
  const uint64_t runs = fused_projection_runs();
  const torch::Tensor fused = run(x, positions, true).second,
                      one_by_one = run(x, positions, false).second;
  EXPECT_EQ(fused_projection_runs() - runs, 3u) << "all but gate/up fused";
  EXPECT_TRUE(torch::equal(fused, one_by_one));
  EXPECT_GT(max_abs_diff(fused, plain), 1e-3);
  layer->attach_adapter(Proj::kUp, nullptr);
  at::set_num_threads(before);
}

TEST(Settings, DtypeAndDeviceNames) {
  EXPECT_EQ(parse_dtype("bfloat16"), torch::kBFloat16);
  EXPECT_EQ(parse_dtype("float32"), torch::kFloat);
  EXPECT_EQ(dtype_to_hf_name(torch::kBFloat16), "bfloat16");
  EXPECT_THROW(parse_dtype("int8"), std::exception);
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_THROW(parse_device("tpu"), std::exception);
  if (!torch::cuda::is_available()) {
    EXPECT_THROW(parse_device("cuda"), std::exception);
  }
}

}  // namespace
}  // namespace ajet::model
