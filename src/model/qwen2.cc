#include "model/qwen2.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "model/linear_kernel.h"
#include "model/parallel.h"
#include "model/row_kernels.h"

namespace ajet::model {

namespace {

// q/k/v/o live under self_attn, gate/up/down under mlp.
bool is_attention_proj(Proj p) {
  return p == Proj::kQ || p == Proj::kK || p == Proj::kV || p == Proj::kO;
}

void check_config(const hf::ModelConfig& c) {
  auto positive = [](int64_t v, const char* field) {
    if (v <= 0)
      invalid_argument(std::string("model config: ") + field + " must be positive, got " +
                       std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    invalid_argument("model config: num_attention_heads (" + std::to_string(c.num_attention_heads) +
                     ") must be a multiple of num_key_value_heads (" +
                     std::to_string(c.num_key_value_heads) + ")");
  }
  if (c.head_dim % 2 != 0)
    invalid_argument("model config: head_dim must be even for rotary embeddings");
  if (c.hidden_act != "silu")
    invalid_argument("model config: hidden_act '" + c.hidden_act +
                     "' is not supported (silu only)");
}

// Rows up to which a no-grad float32 CPU linear runs linear_kernel.h instead of BLAS: decode steps
// of up to this many sequences. Beyond it OpenBLAS's packed GEMM wins (its copy of the weights is
// spread over enough rows); at one row its GEMV streams the weights as fast as the kernel.
// engine_bench's linear table (docs/benchmarks.md, 2026-12-04, both threads working): the kernel
// is 1.7x BLAS at 8 rows, 1.1x at 32, 0.85x at 64 on a 2-core Xeon with a 287 GFLOP/s GEMM peak.
constexpr int64_t kKernelMaxRows = 48;
// Rows up to which a weight with a packed copy goes through the packed kernel instead of both the
// above and BLAS: engine_bench's linear table (docs/benchmarks.md, 2026-12-04, second entry) has
// it 1.1-2.1x the better of them from 16 to 512 rows (a prefill chunk), and level with the
// small-row kernel at 8 rows of the small preset, where both stream the weights. Longer inputs were
// not measured: BLAS.
constexpr int64_t kPackedMaxRows = 512;
// A model keeps packed copies only while all its weights, once more, fit in this many bytes: the
// copy pays where a step is compute-bound (small models, many rows); a large model's decode streams
// weights.
constexpr int64_t kPackedModelMaxBytes = int64_t{512} << 20;

// The hand-written kernels' common condition: grad off (no autograd graph to keep), float32 on the
// CPU.
bool no_grad_cpu_f32(const torch::Tensor& x) {
  return !torch::GradMode::is_enabled() && x.is_cpu() && x.scalar_type() == torch::kFloat;
}

}  // namespace

namespace {

// Work units of `panels_per_unit` packed panels: a thread's share is worth starting only above ~64k
// multiply-adds.
int64_t packed_grain(int64_t m, int64_t k, int64_t panels_per_unit = 1) {
  return std::max<int64_t>(1, 65536 / (panels_per_unit * m * k * kPackedColumns));
}

// An uninitialised (..., n) tensor for the outputs of the rows of xc (..., K).
torch::Tensor empty_outputs(const torch::Tensor& xc, int64_t n) {
  auto shape = xc.sizes().vec();
  shape.back() = n;
  return torch::empty(shape, xc.options());
}

}  // namespace

torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& bias, PackedWeight* packed) {
  const int64_t k = w.size(1), n = w.size(0);
  const int64_t m = x.dim() > 0 && k > 0 ? x.numel() / k : 0;
  const bool invariant = batch_invariant();
  const bool eligible =
      no_grad_cpu_f32(x) && (m > 1 || (invariant && m == 1)) && x.size(-1) == k && w.is_cpu() &&
      w.scalar_type() == torch::kFloat && w.is_contiguous() &&
      (!bias.defined() || (bias.scalar_type() == torch::kFloat && bias.is_contiguous()));
  const bool use_packed = eligible && packed != nullptr && (invariant || m <= kPackedMaxRows);
  if (!use_packed && !(eligible && (invariant || m <= kKernelMaxRows)))
    return torch::nn::functional::linear(x, w, bias);
  const torch::Tensor xc = x.contiguous();
  auto shape = x.sizes().vec();
  shape.back() = n;
  torch::Tensor y = torch::empty(shape, x.options());  // (..., N)
  const float* xp = xc.data_ptr<float>();
  const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  if (use_packed) {
    const torch::Tensor pw = packed->of(w);
    const float* pp = pw.data_ptr<float>();
    parallel_for_stealing(
        packed_panels(n), packed_grain(m, k), 1, [&](int64_t begin, int64_t end, int64_t then) {
          linear_packed_f32(xp, pp, bp, yp, m, n, k, begin, end, packed_panel(pp, k, then));
        });
    return y;
  }
  const float* wp = w.data_ptr<float>();
  // Units of 8 columns; a thread's share is worth starting only above ~64k multiply-adds.
  const int64_t units = (n + kLinearColumnsPerUnit - 1) / kLinearColumnsPerUnit;
  const int64_t grain = std::max<int64_t>(1, 65536 / (m * k * kLinearColumnsPerUnit));
  at::parallel_for(0, units, grain, [&](int64_t begin, int64_t end) {
    linear_rows_f32(xp, wp, bp, yp, m, n, k, begin * kLinearColumnsPerUnit,
                    std::min(n, end * kLinearColumnsPerUnit));
  });
  return y;
}

namespace {
std::atomic<bool> g_batch_invariant{false};
std::atomic<bool> g_fused_projections{true};
std::atomic<uint64_t> g_fused_runs{0};
}  // namespace

uint64_t fused_projection_runs() { return g_fused_runs.load(std::memory_order_relaxed); }

void set_fused_projections_enabled(bool on) {
  g_fused_projections.store(on, std::memory_order_relaxed);
}
bool fused_projections_enabled() { return g_fused_projections.load(std::memory_order_relaxed); }

void set_batch_invariant(bool on) { g_batch_invariant.store(on, std::memory_order_relaxed); }
bool batch_invariant() { return g_batch_invariant.load(std::memory_order_relaxed); }

torch::Tensor PackedWeight::of(const torch::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.is_cpu() && w.scalar_type() == torch::kFloat && w.is_contiguous(),
              "PackedWeight: the weight must be a contiguous float32 CPU matrix");
  const int64_t n = w.size(0), k = w.size(1);
  const int64_t version = w._version();
  std::lock_guard lock(mu_);
  if (!packed_.defined() || !storage_.is_alias_of(w.storage()) || source_ != w.data_ptr() ||
      version_ != version || n_ != n || k_ != k) {
    torch::Tensor fresh = torch::empty({packed_floats(n, k)}, torch::kFloat);
    pack_weight_f32(w.data_ptr<float>(), n, k, fresh.data_ptr<float>());
    packed_ = std::move(fresh);
    storage_ = w.storage();
    source_ = w.data_ptr();
    version_ = version;
    n_ = n;
    k_ = k;
  }
  return packed_;
}

void PackedWeight::clear() {
  std::lock_guard lock(mu_);
  packed_ = torch::Tensor();
  storage_ = c10::Storage();
  source_ = nullptr;
}

std::optional<Proj> proj_from_name(std::string_view name) {
  for (size_t i = 0; i < kProjNames.size(); ++i) {
    if (kProjNames[i] == name) return static_cast<Proj>(i);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------
// RMSNorm

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // No grad, float32 on the CPU (the engine's steps): one pass per row (row_kernels.h).
  if (row_kernels_enabled() && no_grad_cpu_f32(x) && x.dim() > 0 && x.size(-1) > 0 &&
      weight.scalar_type() == torch::kFloat && weight.is_contiguous() &&
      weight.numel() == x.size(-1)) {
    const torch::Tensor xc = x.contiguous();
    torch::Tensor y = torch::empty_like(xc);
    const int64_t dim = xc.size(-1), rows = xc.numel() / dim;
    const float* xp = xc.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const auto eps = static_cast<float>(eps_);
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / dim), [&](int64_t begin, int64_t end) {
      rms_norm_rows_f32(xp, wp, yp, dim, eps, begin, end);
    });
    return y;
  }
  auto x32 = x.to(torch::kFloat);                                             // (..., dim)
  auto inv_rms = torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);  // (..., 1)
  return weight * (x32 * inv_rms).to(x.scalar_type());
}

// ---------------------------------------------------------------------------------------------------
// Rotary

Rotary::Rotary(int64_t head_dim, double theta, int64_t initial_positions)
    : head_dim_(head_dim),
      theta_(theta),
      initial_positions_(std::max<int64_t>(initial_positions, 16)) {}

int64_t Rotary::rows_needed(const torch::Tensor& positions) {
  TORCH_CHECK(positions.scalar_type() == torch::kLong,
              "rotary embedding: positions must be int64, got ", positions.scalar_type());
  {
    std::lock_guard lock(mu_);
    if (last_positions_.defined() && last_positions_.is_same(positions) &&
        positions._version() == last_version_) {
      return last_needed_;
    }
  }
  int64_t needed = 0;  // table rows needed: max position + 1
  if (positions.numel() > 0) {
    auto [lo, hi] = torch::aminmax(positions);
    auto range = torch::stack({lo, hi}).to(torch::kCPU);  // one device sync for both
    const int64_t min_pos = range[0].item<int64_t>(), max_pos = range[1].item<int64_t>();
    if (min_pos < 0)
      invalid_argument("rotary embedding: negative position " + std::to_string(min_pos));
    needed = max_pos + 1;
  }
  std::lock_guard lock(mu_);
  last_positions_ = positions;
  last_version_ = positions._version();
  last_needed_ = needed;
  return needed;
}

std::pair<torch::Tensor, torch::Tensor> Rotary::tables(torch::Device device,
                                                       torch::ScalarType dtype, int64_t needed) {
  std::lock_guard lock(mu_);
  auto it = std::find_if(tables_.begin(), tables_.end(),
                         [&](const Table& t) { return t.device == device && t.dtype == dtype; });
  if (it == tables_.end() || it->cos.size(0) < needed) {
    int64_t size = initial_positions_;
    while (size < needed) size *= 2;
    // As HF: inv_freq = 1 / theta^(arange(0, D, 2) / D) in float32; freqs = position * inv_freq in
    // float32.
    auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
    auto exponent =
        torch::arange(0, head_dim_, 2, torch::TensorOptions().dtype(torch::kLong).device(device))
            .to(torch::kFloat) /
        static_cast<float>(head_dim_);                                              // (D/2,)
    auto inv_freq = 1.0 / torch::pow(torch::scalar_tensor(theta_, f32), exponent);  // (D/2,)
    auto pos = torch::arange(size, f32);                                            // (P,)
    auto freqs = torch::outer(pos, inv_freq);                                       // (P, D/2)
    auto emb = torch::cat({freqs, freqs}, -1);                                      // (P, D)
    Table fresh{device, dtype, emb.cos().to(dtype).contiguous(), emb.sin().to(dtype).contiguous()};
    if (it == tables_.end()) {
      it = tables_.insert(tables_.end(), std::move(fresh));
    } else {
      *it = std::move(fresh);
    }
  }
  return {it->cos, it->sin};
}

std::pair<torch::Tensor, torch::Tensor> Rotary::cos_sin(const torch::Tensor& positions,
                                                        torch::ScalarType dtype) {
  auto [cos, sin] = tables(positions.device(), dtype, rows_needed(positions));
  auto flat = positions.reshape({-1});  // (N,)
  auto shape = positions.sizes().vec();
  shape.push_back(head_dim_);
  return {cos.index_select(0, flat).view(shape),
          sin.index_select(0, flat).view(shape)};  // (..., D)
}

torch::Tensor Rotary::apply(const torch::Tensor& x, const torch::Tensor& positions) {
  // No grad, float32 on the CPU (the engine's steps): one pass per row (row_kernels.h), the same
  // values.
  if (row_kernels_enabled() && no_grad_cpu_f32(x) && positions.is_cpu() && x.dim() >= 2 &&
      x.size(-1) == head_dim_ && x.size(-2) > 0 &&
      positions.numel() * x.size(-2) * head_dim_ == x.numel()) {
    const int64_t needed = rows_needed(positions);
    auto [cos, sin] = tables(x.device(), torch::kFloat, needed);
    const torch::Tensor xc = x.contiguous(), pc = positions.contiguous();
    torch::Tensor y = torch::empty_like(xc);
    const int64_t heads = x.size(-2), rows = xc.numel() / head_dim_;
    const float* xp = xc.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const int64_t* pp = pc.data_ptr<int64_t>();
    const float* cp = cos.data_ptr<float>();
    const float* sp = sin.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / head_dim_),
                     [&](int64_t begin, int64_t end) {
                       rotary_rows_f32(xp, yp, pp, cp, sp, heads, head_dim_, begin, end);
                     });
    return y;
  }
  auto [cos, sin] = cos_sin(positions, x.scalar_type());  // (..., D)
  cos = cos.unsqueeze(-2);                                // (..., 1, D) broadcast over heads
  sin = sin.unsqueeze(-2);
  const int64_t half = head_dim_ / 2;
  auto x1 = x.narrow(-1, 0, half);  // (..., heads, D/2)
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);  // rotate_half(x)
  return x * cos + rotated * sin;
}

// ---------------------------------------------------------------------------------------------------
// Attention

torch::Tensor causal_mask(int64_t t, torch::Device device) {
  return torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(device)).tril();
}

torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "masked_attention: q, k, v must be 4-d");
  const int64_t b = q.size(0), tq = q.size(1), h = q.size(2), d = q.size(3);
  const int64_t tk = k.size(1), hkv = k.size(2);
  TORCH_CHECK(h % hkv == 0, "masked_attention: ", h, " query heads not a multiple of ", hkv,
              " kv heads");
  TORCH_CHECK(mask.dim() == 3 && mask.size(1) == tq && mask.size(2) == tk &&
                  (mask.size(0) == b || mask.size(0) == 1),
              "masked_attention: mask must be (B, Tq, Tk) = (", b, ", ", tq, ", ", tk, "), got ",
              mask.sizes());
  TORCH_CHECK(mask.scalar_type() == torch::kBool, "masked_attention: mask must be bool");
  const int64_t rep = h / hkv;
  // Query head j uses kv head j / rep (HF repeat_kv): group the rep query heads of each kv head on
  // the row axis so one matmul per kv head covers them all.
  auto qg = q.to(torch::kFloat)
                .permute({0, 2, 1, 3})
                .reshape({b, hkv, rep * tq, d});        // (B, Hkv, rep*Tq, D)
  auto kt = k.to(torch::kFloat).permute({0, 2, 3, 1});  // (B, Hkv, D, Tk)
  auto scores =
      torch::matmul(qg, kt) * (1.0 / std::sqrt(static_cast<double>(d)));  // (B, Hkv, rep*Tq, Tk)
  scores = scores.view({b, h, tq, tk});                                   // (B, H, Tq, Tk)
  auto allowed = mask.unsqueeze(1);                                       // (B|1, 1, Tq, Tk)
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores, -1);  // (B, H, Tq, Tk)
  // A row with no allowed key is all -inf → NaN after softmax; it attends to nothing, so zeros.
  probs = probs.masked_fill(allowed.any(-1, /*keepdim=*/true).logical_not(), 0.0);
  auto pg = probs.view({b, hkv, rep * tq, tk}).to(v.scalar_type());  // (B, Hkv, rep*Tq, Tk)
  auto vg = v.permute({0, 2, 1, 3});                                 // (B, Hkv, Tk, D)
  auto out = torch::matmul(pg, vg).view({b, h, tq, d});              // (B, H, Tq, D)
  return out.permute({0, 2, 1, 3}).reshape({b, tq, h * d}).to(q.scalar_type());  // (B, Tq, H*D)
}

// ---------------------------------------------------------------------------------------------------
// Decoder layer

DecoderLayerImpl::DecoderLayerImpl(const hf::ModelConfig& c, int64_t layer_index)
    : num_heads_(c.num_attention_heads),
      num_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim) {
  check_config(c);
  const int64_t hidden = c.hidden_size, q_dim = num_heads_ * head_dim_,
                kv_dim = num_kv_heads_ * head_dim_;
  input_layernorm_ = register_module("input_layernorm", RMSNorm(hidden, c.rms_norm_eps));
  self_attn_ = register_module("self_attn", std::make_shared<torch::nn::Module>("SelfAttention"));
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", RMSNorm(hidden, c.rms_norm_eps));
  mlp_ = register_module("mlp", std::make_shared<torch::nn::Module>("MLP"));
  auto make = [&](Proj p, int64_t in, int64_t out, bool bias) {
    auto linear = torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
    auto& parent = is_attention_proj(p) ? self_attn_ : mlp_;
    linears_[static_cast<size_t>(p)] =
        parent->register_module(std::string(kProjNames[static_cast<size_t>(p)]), linear);
  };
  make(Proj::kQ, hidden, q_dim, c.attention_bias);
  make(Proj::kK, hidden, kv_dim, c.attention_bias);
  make(Proj::kV, hidden, kv_dim, c.attention_bias);
  // Qwen2's o_proj never has a bias; Llama and Qwen3 give it one exactly when attention_bias is
  // set.
  make(Proj::kO, q_dim, hidden, c.attention_bias && c.model_type != "qwen2");
  if (c.qk_norm) {
    q_norm_ = self_attn_->register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps));
    k_norm_ = self_attn_->register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps));
  }
  make(Proj::kGate, hidden, c.intermediate_size, false);
  make(Proj::kUp, hidden, c.intermediate_size, false);
  make(Proj::kDown, c.intermediate_size, hidden, false);
  // A layer built on its own gets its own table; Qwen2ModelImpl replaces it with a shared one.
  rotary_ = std::make_shared<Rotary>(head_dim_, c.rope_theta, c.max_position_embeddings);
  (void)layer_index;
}

torch::nn::Linear& DecoderLayerImpl::linear(Proj p) { return linears_[static_cast<size_t>(p)]; }

torch::Tensor DecoderLayerImpl::project(Proj p, const torch::Tensor& x) {
  const auto i = static_cast<size_t>(p);
  const torch::nn::Linear& base = linears_[i];
  auto out = linear_forward(x, base->weight, base->bias, pack_weights_ ? &packed_[i] : nullptr);
  if (adapters_[i]) out = out + adapters_[i]->delta(x);
  return out;
}

bool DecoderLayerImpl::fusable(std::initializer_list<Proj> ps, const torch::Tensor& x) {
  if (!pack_weights_ || !fused_projections_enabled() || !no_grad_cpu_f32(x) || x.dim() == 0)
    return false;
  const int64_t k = x.size(-1);
  const int64_t m = k > 0 ? x.numel() / k : 0;
  if (batch_invariant() ? m < 1 : (m < 2 || m > kPackedMaxRows)) return false;
  for (Proj p : ps) {
    const auto i = static_cast<size_t>(p);
    const torch::Tensor& w = linears_[i]->weight;
    const torch::Tensor& b = linears_[i]->bias;
    if (adapters_[i] || w.size(1) != k || !w.is_cpu() || w.scalar_type() != torch::kFloat ||
        !w.is_contiguous() ||
        (b.defined() && (b.scalar_type() != torch::kFloat || !b.is_contiguous()))) {
      return false;
    }
  }
  return true;
}

DecoderLayerImpl::PackedOperand DecoderLayerImpl::packed_operand(Proj p) {
  const auto i = static_cast<size_t>(p);
  const torch::nn::Linear& lin = linears_[i];
  return {packed_[i].of(lin->weight), lin->bias.defined() ? lin->bias.data_ptr<float>() : nullptr,
          lin->weight.size(0)};
}

std::vector<torch::Tensor> DecoderLayerImpl::project_fused(std::initializer_list<Proj> ps,
                                                           const torch::Tensor& x) {
  // One range of panels: projection j's panels follow projection j-1's, so the threads split the
  // work of all of them at once.
  g_fused_runs.fetch_add(1, std::memory_order_relaxed);
  const torch::Tensor xc = x.contiguous();
  const int64_t k = xc.size(-1), m = xc.numel() / k;
  std::vector<PackedOperand> ops;
  std::vector<torch::Tensor> outs;
  std::vector<int64_t> first;  // each operand's first panel in the range
  int64_t panels = 0;
  for (Proj p : ps) {
    ops.push_back(packed_operand(p));
    outs.push_back(empty_outputs(xc, ops.back().n));
    first.push_back(panels);
    panels += packed_panels(ops.back().n);
  }
  const float* xp = xc.data_ptr<float>();
  auto panel_at =
      [&](int64_t p) -> const float* {  // panel p of the range, in whichever operand holds it
    if (p < 0) return nullptr;
    size_t j = ops.size() - 1;
    while (first[j] > p) --j;
    return packed_panel(ops[j].packed.data_ptr<float>(), k, p - first[j]);
  };
  parallel_for_stealing(panels, packed_grain(m, k), 1,
                        [&](int64_t begin, int64_t end, int64_t then) {
                          for (size_t j = 0; j < ops.size(); ++j) {
                            const PackedOperand& op = ops[j];
                            const int64_t b = std::max(begin, first[j]),
                                          e = std::min(end, first[j] + packed_panels(op.n));
                            if (b < e) {
                              linear_packed_f32(xp, op.packed.data_ptr<float>(), op.bias,
                                                outs[j].data_ptr<float>(), m, op.n, k, b - first[j],
                                                e - first[j], e == end ? panel_at(then) : nullptr);
                            }
                          }
                        });
  return outs;
}

torch::Tensor DecoderLayerImpl::gated_activation(const torch::Tensor& x) {
  if (!fusable({Proj::kGate, Proj::kUp}, x)) {
    torch::Tensor g = project(Proj::kGate, x), u = project(Proj::kUp, x);  // (..., I)
    if (!row_kernels_enabled() || !no_grad_cpu_f32(g) || !no_grad_cpu_f32(u) || g.dim() == 0 ||
        g.sizes() != u.sizes()) {
      return torch::silu(g) * u;
    }
    // The fused path's SiLU product (row_kernels.h), so both paths agree bit for bit (an adapter
    // with B = 0 changes nothing).
    g = g.contiguous();
    u = u.contiguous();
    const int64_t n = g.size(-1), rows = n > 0 ? g.numel() / n : 0;
    float* gp = g.data_ptr<float>();
    const float* up = u.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)),
                     [&](int64_t begin, int64_t end) {
                       silu_mul_cols_f32(gp + begin * n, up + begin * n, gp + begin * n,
                                         end - begin, n, 0, n);
                     });
    return g;
  }
  g_fused_runs.fetch_add(1, std::memory_order_relaxed);
  const torch::Tensor xc = x.contiguous();
  const int64_t k = xc.size(-1), m = xc.numel() / k;
  const PackedOperand gate = packed_operand(Proj::kGate), up = packed_operand(Proj::kUp);
  const int64_t n = gate.n;
  TORCH_CHECK(up.n == n, "gated_activation: gate_proj and up_proj must have the same outputs");
  torch::Tensor g = empty_outputs(xc, n), u = empty_outputs(xc, n);  // (..., I)
  const float* xp = xc.data_ptr<float>();
  float* gp = g.data_ptr<float>();
  float* up_out = u.data_ptr<float>();
  // A unit is one panel of gate and the same panel of up; each thread then activates its own
  // columns, still in its cache.
  const float* gate_panels = gate.packed.data_ptr<float>();
  const float* up_panels = up.packed.data_ptr<float>();
  parallel_for_stealing(packed_panels(n), packed_grain(m, k, 2), 1,
                        [&](int64_t begin, int64_t end, int64_t then) {
                          linear_packed_f32(xp, gate_panels, gate.bias, gp, m, n, k, begin, end,
                                            packed_panel(up_panels, k, begin));
                          linear_packed_f32(xp, up_panels, up.bias, up_out, m, n, k, begin, end,
                                            packed_panel(gate_panels, k, then));
                          silu_mul_cols_f32(gp, up_out, gp, m, n, begin * kPackedColumns,
                                            std::min(n, end * kPackedColumns));
                        });
  return g;
}

torch::Tensor DecoderLayerImpl::project_add(Proj p, const torch::Tensor& x,
                                            const torch::Tensor& residual) {
  const auto i = static_cast<size_t>(p);
  const int64_t n = linears_[i]->weight.size(0);
  if (!fusable({p}, x) || residual.scalar_type() != torch::kFloat || residual.size(-1) != n ||
      residual.numel() != x.numel() / x.size(-1) * n) {
    return residual + project(p, x);
  }
  g_fused_runs.fetch_add(1, std::memory_order_relaxed);
  const torch::Tensor xc = x.contiguous(), rc = residual.contiguous();
  const int64_t k = xc.size(-1), m = xc.numel() / k;
  const PackedOperand op = packed_operand(p);
  torch::Tensor y = torch::empty(rc.sizes(), rc.options());  // (..., N)
  const float* xp = xc.data_ptr<float>();
  const float* rp = rc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const float* panels = op.packed.data_ptr<float>();
  parallel_for_stealing(
      packed_panels(n), packed_grain(m, k), 1, [&](int64_t begin, int64_t end, int64_t then) {
        linear_packed_f32(xp, panels, op.bias, yp, m, n, k, begin, end,
                          packed_panel(panels, k, then));
        add_cols_f32(yp, rp, m, n, begin * kPackedColumns, std::min(n, end * kPackedColumns));
      });
  return y;
}

void DecoderLayerImpl::attach_adapter(Proj p, std::shared_ptr<LinearAdapter> adapter) {
  const auto i = static_cast<size_t>(p);
  auto& base = linears_[i];
  if (adapters_[i]) base->unregister_module("adapter");
  adapters_[i] = std::move(adapter);
  if (adapters_[i]) base->register_module("adapter", adapters_[i]);
}

const std::shared_ptr<LinearAdapter>& DecoderLayerImpl::adapter(Proj p) const {
  return adapters_[static_cast<size_t>(p)];
}

void DecoderLayerImpl::set_rotary(std::shared_ptr<Rotary> rotary) { rotary_ = std::move(rotary); }

void DecoderLayerImpl::set_weight_packing(bool on) {
  pack_weights_ = on;
  if (!on) {
    for (auto& p : packed_) p.clear();
  }
}

QKV DecoderLayerImpl::attention_inputs(const torch::Tensor& x, const torch::Tensor& positions) {
  auto lead = x.sizes().vec();
  lead.pop_back();  // (...)
  auto with_heads = [&](int64_t heads) {
    auto s = lead;
    s.push_back(heads);
    s.push_back(head_dim_);
    return s;
  };
  auto normed = input_layernorm_->forward(x);  // (..., C)
  torch::Tensor q, k, v;
  if (fusable({Proj::kQ, Proj::kK, Proj::kV}, normed)) {
    auto qkv = project_fused({Proj::kQ, Proj::kK, Proj::kV}, normed);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = project(Proj::kQ, normed), k = project(Proj::kK, normed), v = project(Proj::kV, normed);
  }
  q = q.view(with_heads(num_heads_));     // (..., H, D)
  k = k.view(with_heads(num_kv_heads_));  // (..., Hkv, D)
  v = v.view(with_heads(num_kv_heads_));  // (..., Hkv, D)
  if (!q_norm_.is_empty()) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = rotary_->apply(q, positions);
  k = rotary_->apply(k, positions);
  return {q, k, v};
}

torch::Tensor DecoderLayerImpl::attention_outputs(const torch::Tensor& x,
                                                  const torch::Tensor& attn) {
  auto h = project_add(Proj::kO, attn, x);              // (..., C): x + o_proj(attn)
  auto normed = post_attention_layernorm_->forward(h);  // (..., C)
  auto act = gated_activation(normed);                  // (..., I)
  return project_add(Proj::kDown, act, h);              // (..., C)
}

// ---------------------------------------------------------------------------------------------------
// Model

Qwen2ModelImpl::Qwen2ModelImpl(const hf::ModelConfig& config) : config_(config) {
  if (config_.num_key_value_heads == 0) config_.num_key_value_heads = config_.num_attention_heads;
  if (config_.head_dim == 0 && config_.num_attention_heads > 0) {
    config_.head_dim = config_.hidden_size / config_.num_attention_heads;
  }
  if (config_.architectures
          .empty()) {  // what HF writes, so config() survives save → load unchanged
    config_.architectures = {config_.model_type == "qwen3"   ? "Qwen3ForCausalLM"
                             : config_.model_type == "llama" ? "LlamaForCausalLM"
                                                             : "Qwen2ForCausalLM"};
  }
  check_config(config_);
  hf::validate_model_config(config_, "model config");
  body_ = register_module("model", std::make_shared<torch::nn::Module>("Qwen2Body"));
  embed_tokens_ = body_->register_module(
      "embed_tokens", torch::nn::Embedding(config_.vocab_size, config_.hidden_size));
  layers_ = body_->register_module("layers", torch::nn::ModuleList());
  rotary_ = std::make_shared<Rotary>(config_.head_dim, config_.rope_theta,
                                     config_.max_position_embeddings);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    DecoderLayer layer(config_, i);
    layer->set_rotary(rotary_);
    layers_->push_back(layer);
    layer_list_.push_back(layer);
  }
  norm_ = body_->register_module("norm", RMSNorm(config_.hidden_size, config_.rms_norm_eps));
  if (!config_.tie_word_embeddings) {
    lm_head_ = register_module(
        "lm_head",
        torch::nn::Linear(
            torch::nn::LinearOptions(config_.hidden_size, config_.vocab_size).bias(false)));
  }
  int64_t bytes = 0;  // as float32, the only dtype the packed kernel takes
  for (const auto& p : parameters()) bytes += p.numel() * 4;
  pack_weights_ = bytes <= kPackedModelMaxBytes;
  for (auto& layer : layer_list_) layer->set_weight_packing(pack_weights_);
}

void Qwen2ModelImpl::set_weight_packing(bool on) {
  pack_weights_ = on;
  packed_head_.clear();
  for (auto& layer : layer_list_) layer->set_weight_packing(on);
}

const hf::ModelConfig& Qwen2ModelImpl::config() const { return config_; }
int64_t Qwen2ModelImpl::num_layers() const { return static_cast<int64_t>(layer_list_.size()); }
DecoderLayer& Qwen2ModelImpl::layer(int64_t i) { return layer_list_.at(static_cast<size_t>(i)); }

torch::TensorOptions Qwen2ModelImpl::options() const { return embed_tokens_->weight.options(); }

torch::Tensor Qwen2ModelImpl::embed(const torch::Tensor& ids) {
  return embed_tokens_->forward(ids);
}

torch::Tensor Qwen2ModelImpl::final_norm(const torch::Tensor& x) { return norm_->forward(x); }

torch::Tensor Qwen2ModelImpl::lm_head(const torch::Tensor& hidden) {
  const auto& w = lm_head_.is_empty() ? embed_tokens_->weight : lm_head_->weight;  // (V, C)
  return linear_forward(hidden, w, torch::Tensor(), pack_weights_ ? &packed_head_ : nullptr);
}

torch::Tensor Qwen2ModelImpl::forward_hidden(const torch::Tensor& ids,
                                             const torch::Tensor& positions,
                                             const std::optional<torch::Tensor>& mask) {
  TORCH_CHECK(ids.dim() == 2, "forward_hidden: ids must be (B, T), got ", ids.sizes());
  TORCH_CHECK(positions.sizes() == ids.sizes(), "forward_hidden: positions ", positions.sizes(),
              " must match ids ", ids.sizes());
  const int64_t t = ids.size(1);
  torch::Tensor m =
      mask.has_value() ? *mask : causal_mask(t, ids.device()).unsqueeze(0);  // (B|1, T, T)
  auto h = embed(ids);                                                       // (B, T, C)
  for (auto& layer : layer_list_) {
    QKV qkv = layer->attention_inputs(h, positions);       // (B, T, H|Hkv, D)
    auto attn = masked_attention(qkv.q, qkv.k, qkv.v, m);  // (B, T, H*D)
    h = layer->attention_outputs(h, attn);                 // (B, T, C)
  }
  return final_norm(h);
}

torch::Tensor Qwen2ModelImpl::forward_logits(const torch::Tensor& ids,
                                             const torch::Tensor& positions,
                                             const std::optional<torch::Tensor>& mask) {
  return lm_head(forward_hidden(ids, positions, mask));  // (B, T, V)
}

std::vector<std::pair<std::string, torch::Tensor>> Qwen2ModelImpl::hf_named_parameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", embed_tokens_->weight);
  for (size_t i = 0; i < layer_list_.size(); ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    // Module parameters in registration order, skipping adapters (they are not part of the HF
    // layout).
    for (const auto& item : layer_list_[i]->named_parameters(/*recurse=*/true)) {
      if (item.key().find(".adapter.") != std::string::npos) continue;
      out.emplace_back(prefix + item.key(), item.value());
    }
  }
  out.emplace_back("model.norm.weight", norm_->weight);
  if (!lm_head_.is_empty()) out.emplace_back("lm_head.weight", lm_head_->weight);
  return out;
}

int64_t Qwen2ModelImpl::parameter_count() {
  int64_t n = 0;
  for (const auto& [name, t] : hf_named_parameters()) n += t.numel();
  return n;
}

// ---------------------------------------------------------------------------------------------------
// Initialisation and settings

void init_weights(Qwen2Model& model, uint64_t seed, double std, double output_scale,
                  double embed_std) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& [name, param] : model->hf_named_parameters()) {
    auto ends_with = [&](std::string_view suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with(
            "norm.weight")) {  // input_layernorm, post_attention_layernorm, q_norm, k_norm, norm
      param.fill_(1.0);
    } else if (ends_with(".bias")) {
      param.zero_();
    } else {
      const bool writes_residual = ends_with("o_proj.weight") || ends_with("down_proj.weight");
      auto values = torch::empty(param.sizes(), torch::kFloat);
      const bool embedding = ends_with("embed_tokens.weight");
      values.normal_(0.0,
                     embedding && embed_std > 0 ? embed_std
                     : writes_residual          ? std * output_scale
                                                : std,
                     gen);
      param.copy_(values);
    }
  }
}

torch::ScalarType parse_dtype(std::string_view name) {
  if (name == "float32" || name == "fp32" || name == "float") return torch::kFloat;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return torch::kHalf;
  invalid_argument("unknown dtype '" + std::string(name) +
                   "' (expected float32, bfloat16 or float16)");
}

std::string dtype_to_hf_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kHalf: return "float16";
    default:
      invalid_argument(std::string("dtype ") + c10::toString(dtype) + " is not a model dtype");
  }
}

torch::Device parse_device(std::string_view name) {
  torch::Device device = torch::kCPU;
  try {
    device = torch::Device(std::string(name));
  } catch (const std::exception&) {
    invalid_argument("unknown device '" + std::string(name) + "' (expected cpu, cuda or cuda:N)");
  }
  if (device.is_cuda() && !torch::cuda::is_available()) {
    invalid_argument("device '" + std::string(name) +
                     "' asked for, but this libtorch has no usable CUDA");
  }
  if (!device.is_cpu() && !device.is_cuda())
    invalid_argument("device '" + std::string(name) + "' is not supported");
  return device;
}

}  // namespace ajet::model
