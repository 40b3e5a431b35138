#include "train/packed_forward.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace ajet::train {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t AttentionPlan::computed_pairs() const {
  int64_t n = 0;
  for (const auto& b : blocks) n += (b.q_end - b.q_begin) * b.key_count;
  return n;
}

AttentionPlan plan_attention(std::span<const int32_t> subtree_end, int64_t block_rows) {
  if (block_rows <= 0) invalid_argument("plan_attention: block_rows must be positive");
  std::vector<int64_t> starts;
  for (int64_t a = 0; a < static_cast<int64_t>(subtree_end.size()); a += block_rows) starts.push_back(a);
  return plan_attention(subtree_end, starts);
}

AttentionPlan plan_attention(std::span<const int32_t> subtree_end, std::span<const int64_t> block_starts) {
  const auto t = static_cast<int64_t>(subtree_end.size());
  for (int64_t j = 0; j < t; ++j) {
    if (subtree_end[j] <= j || subtree_end[j] > t) {
      invalid_argument("plan_attention: subtree_end[" + std::to_string(j) + "] = " + std::to_string(subtree_end[j]) +
                       " is outside (" + std::to_string(j) + ", " + std::to_string(t) + "]");
    }
  }
  if (t > 0 && (block_starts.empty() || block_starts.front() != 0)) {
    invalid_argument("plan_attention: the first block must start at row 0");
  }
  for (size_t i = 0; i < block_starts.size(); ++i) {
    if (block_starts[i] >= t || (i > 0 && block_starts[i] <= block_starts[i - 1])) {
      invalid_argument("plan_attention: block_starts must increase and stay below " + std::to_string(t) +
                       " (block " + std::to_string(i) + " starts at " + std::to_string(block_starts[i]) + ")");
    }
  }
  AttentionPlan plan;
  plan.tokens = t;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (size_t blk = 0; blk < block_starts.size(); ++blk) {
    const int64_t a = block_starts[blk];
    const int64_t b = blk + 1 < block_starts.size() ? block_starts[blk + 1] : t;
    std::vector<int64_t> keys;
    for (int64_t j = 0; j < b; ++j) {
      if (subtree_end[j] > a) keys.push_back(j);
    }
    AttentionBlock block;
    block.q_begin = a;
    block.q_end = b;
    block.key_count = static_cast<int64_t>(keys.size());
    const bool contiguous = keys.back() - keys.front() + 1 == block.key_count;
    if (contiguous) {
      block.key_begin = keys.front();
    } else {
      block.key_index = torch::tensor(keys, torch::kLong);
    }
    block.bias = torch::empty({b - a, block.key_count}, torch::kFloat);
    float* bias = block.bias.data_ptr<float>();
    for (int64_t i = a; i < b; ++i) {
      for (int64_t kk = 0; kk < block.key_count; ++kk) {
        const int64_t j = keys[static_cast<size_t>(kk)];
        *bias++ = (j <= i && i < subtree_end[j]) ? 0.0f : neg_inf;
      }
    }
    plan.blocks.push_back(std::move(block));
  }
  return plan;
}

namespace {

// Keys of one block from (Hkv, T, D): a view when they are one range, a gathered copy otherwise.
torch::Tensor block_keys(const torch::Tensor& kh, const AttentionBlock& b) {
  return b.key_index.defined() ? kh.index_select(1, b.key_index) : kh.narrow(1, b.key_begin, b.key_count);
}

// dst (Hkv, T, D) += src (Hkv, K, D) at the block's keys.
void add_to_keys(torch::Tensor& dst, const torch::Tensor& src, const AttentionBlock& b) {
  if (b.key_index.defined()) {
    dst.index_add_(1, b.key_index, src);
  } else {
    dst.narrow(1, b.key_begin, b.key_count).add_(src);
  }
}

class BlockAttention : public torch::autograd::Function<BlockAttention> {
 public:
  // q: (T, H, D) scaled; k, v: (T, Hkv, D). plan: address of an AttentionPlan (read during forward only).
  // Scores in float32 (float64 when q is float64, for gradient checks).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t plan_address, int64_t keep_probs_bytes) {
    const auto& plan = *reinterpret_cast<const AttentionPlan*>(plan_address);
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = k.size(1), rep = h / hkv;
    const auto ct = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    auto qg = q.to(ct).view({t, hkv, rep, d}).permute({1, 2, 0, 3}).contiguous();  // (Hkv, rep, T, D)
    auto kh = k.to(ct).permute({1, 0, 2}).contiguous();                          // (Hkv, T, D)
    auto vh = v.to(ct).permute({1, 0, 2}).contiguous();                          // (Hkv, T, D)
    auto og = torch::empty({hkv, rep, t, d}, qg.options());                      // (Hkv, rep, T, D)
    const bool keep_probs = plan.computed_pairs() * h * static_cast<int64_t>(c10::elementSize(ct)) <= keep_probs_bytes;
    c10::List<torch::Tensor> saved;  // per block: probs (Hkv, rep*Tq, K) or row logsumexp (Hkv, rep*Tq, 1)
    for (const auto& b : plan.blocks) {
      const int64_t tq = b.q_end - b.q_begin;
      auto qb = qg.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, d});  // (Hkv, rep*Tq, D)
      auto kb = block_keys(kh, b);                                        // (Hkv, K, D)
      auto vb = block_keys(vh, b);
      auto s = torch::bmm(qb, kb.transpose(1, 2));                        // (Hkv, rep*Tq, K)
      s.view({hkv, rep, tq, b.key_count}).add_(b.bias);
      torch::Tensor p;
      if (keep_probs) {
        p = torch::softmax(s, -1);
        saved.push_back(p);
      } else {
        auto lse = torch::logsumexp(s, -1, /*keepdim=*/true);            // (Hkv, rep*Tq, 1)
        p = s.sub_(lse).exp_();
        saved.push_back(lse);
      }
      og.narrow(2, b.q_begin, tq).copy_(torch::bmm(p, vb).view({hkv, rep, tq, d}));
    }
    ctx->save_for_backward({qg, kh, vh, og});
    // The plan travels with the graph (tensors are reference counted), so the caller's plan may go away
    // before backward runs.
    std::vector<int64_t> ranges;
    c10::List<torch::Tensor> key_index, bias;
    for (const auto& blk : plan.blocks) {
      ranges.insert(ranges.end(), {blk.q_begin, blk.q_end, blk.key_begin, blk.key_count});
      key_index.push_back(blk.key_index.defined() ? blk.key_index : torch::Tensor(torch::empty({0}, torch::kLong)));
      bias.push_back(blk.bias);
    }
    ctx->saved_data["ranges"] = ranges;
    ctx->saved_data["key_index"] = key_index;
    ctx->saved_data["bias"] = bias;
    ctx->saved_data["saved"] = saved;
    ctx->saved_data["keep_probs"] = keep_probs;
    ctx->saved_data["dtypes"] = std::vector<int64_t>{static_cast<int64_t>(q.scalar_type()),
                                                     static_cast<int64_t>(k.scalar_type()),
                                                     static_cast<int64_t>(v.scalar_type())};
    return og.permute({2, 0, 1, 3}).reshape({t, h * d}).to(q.scalar_type());              // (T, H*D)
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AttentionPlan plan;
    {
      const auto ranges = ctx->saved_data["ranges"].toIntVector();
      const auto key_index = ctx->saved_data["key_index"].toTensorList();
      const auto bias = ctx->saved_data["bias"].toTensorList();
      for (size_t i = 0; i < bias.size(); ++i) {
        AttentionBlock blk;
        blk.q_begin = ranges[4 * i];
        blk.q_end = ranges[4 * i + 1];
        blk.key_begin = ranges[4 * i + 2];
        blk.key_count = ranges[4 * i + 3];
        torch::Tensor index = key_index.get(i);
        if (index.numel() > 0) blk.key_index = index;
        blk.bias = bias.get(i);
        plan.blocks.push_back(std::move(blk));
      }
    }
    auto vars = ctx->get_saved_variables();
    const auto& qg = vars[0];  // (Hkv, rep, T, D)
    const auto& kh = vars[1];  // (Hkv, T, D)
    const auto& vh = vars[2];
    const auto& og = vars[3];
    const auto saved = ctx->saved_data["saved"].toTensorList();
    const bool keep_probs = ctx->saved_data["keep_probs"].toBool();
    const auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    const int64_t hkv = qg.size(0), rep = qg.size(1), t = qg.size(2), d = qg.size(3);
    auto dog = grads[0].to(qg.scalar_type()).view({t, hkv, rep, d}).permute({1, 2, 0, 3}).contiguous();  // (Hkv, rep, T, D)
    auto delta = (dog * og).sum(-1, /*keepdim=*/true);  // (Hkv, rep, T, 1): rowsum(dP * P) = dO . O
    auto dqg = torch::empty_like(qg);
    auto dkh = torch::zeros_like(kh);
    auto dvh = torch::zeros_like(vh);
    for (size_t i = 0; i < plan.blocks.size(); ++i) {
      const auto& b = plan.blocks[i];
      const int64_t tq = b.q_end - b.q_begin;
      auto qb = qg.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, d});
      auto kb = block_keys(kh, b);
      auto vb = block_keys(vh, b);
      torch::Tensor p;
      if (keep_probs) {
        p = saved.get(i);
      } else {
        auto s = torch::bmm(qb, kb.transpose(1, 2));
        s.view({hkv, rep, tq, b.key_count}).add_(b.bias);
        p = s.sub_(saved.get(i)).exp_();
      }
      auto dob = dog.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, d});   // (Hkv, rep*Tq, D)
      auto db = delta.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, 1});
      add_to_keys(dvh, torch::bmm(p.transpose(1, 2), dob), b);              // (Hkv, K, D)
      auto ds = torch::bmm(dob, vb.transpose(1, 2));                        // dP: (Hkv, rep*Tq, K)
      ds.sub_(db).mul_(p);                                                  // dS = P * (dP - delta)
      dqg.narrow(2, b.q_begin, tq).copy_(torch::bmm(ds, kb).view({hkv, rep, tq, d}));
      add_to_keys(dkh, torch::bmm(ds.transpose(1, 2), qb), b);
    }
    auto dq = dqg.permute({2, 0, 1, 3}).reshape({t, hkv * rep, d}).to(static_cast<c10::ScalarType>(dtypes[0]));
    auto dk = dkh.permute({1, 0, 2}).contiguous().to(static_cast<c10::ScalarType>(dtypes[1]));
    auto dv = dvh.permute({1, 0, 2}).contiguous().to(static_cast<c10::ScalarType>(dtypes[2]));
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

class TokenLogprobFn : public torch::autograd::Function<TokenLogprobFn> {
 public:
  // hidden (M, C), weight (V, C), targets (M,) int64. Returns {logprob (M,), entropy (M,)} in float32.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk_rows, int64_t keep_logits_bytes) {
    ctx->set_materialize_grads(false);
    const int64_t m = hidden.size(0), vocab = weight.size(0);
    const auto ct = hidden.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    auto w = weight.to(ct);
    auto h = hidden.to(ct);
    auto logprob = torch::empty({m}, h.options());
    auto entropy = torch::empty({m}, h.options());
    auto lse_all = torch::empty({m}, h.options());
    const bool keep = m * vocab * static_cast<int64_t>(c10::elementSize(ct)) <= keep_logits_bytes;
    c10::List<torch::Tensor> kept;
    for (int64_t a = 0; a < m; a += chunk_rows) {
      const int64_t n = std::min(chunk_rows, m - a);
      auto z = torch::mm(h.narrow(0, a, n), w.t());                            // (n, V)
      auto lse = torch::logsumexp(z, 1);                                       // (n,)
      auto tz = z.gather(1, targets.narrow(0, a, n).unsqueeze(1)).squeeze(1);  // (n,)
      logprob.narrow(0, a, n).copy_(tz - lse);
      auto p = torch::exp(z - lse.unsqueeze(1));                               // (n, V)
      entropy.narrow(0, a, n).copy_(lse - p.mul_(z).sum(1));                  // p * z in place
      lse_all.narrow(0, a, n).copy_(lse);
      if (keep) kept.push_back(z);
    }
    ctx->save_for_backward({hidden, weight, targets, lse_all, lse_all - entropy});  // last: E_p[z] per row
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["kept"] = kept;
    return {logprob, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto vars = ctx->get_saved_variables();
    const auto& hidden = vars[0];
    const auto& weight = vars[1];
    const auto& targets = vars[2];
    const auto& lse_all = vars[3];
    const auto& ez_all = vars[4];  // (M,) E_p[z] = lse - H
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const auto kept = ctx->saved_data["kept"].toTensorList();
    const auto& g_lp = grads[0];  // (M,) or undefined
    const auto& g_h = grads[1];
    const int64_t m = hidden.size(0);
    const auto ct = lse_all.scalar_type();
    auto w = weight.to(ct);
    auto h = hidden.to(ct);
    auto dh = torch::zeros_like(h);
    // A frozen lm_head (LoRA; tied embeddings under LoRA too) gets no (V, C) gradient: with Qwen's
    // 151,936 x 896 that buffer is 545 MB, and filling it a third of this backward's work.
    const bool weight_grad = ctx->needs_input_grad(1);
    torch::Tensor dw = weight_grad ? torch::zeros_like(w) : torch::Tensor();
    if (!g_lp.defined() && !g_h.defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    size_t chunk = 0;
    for (int64_t a = 0; a < m; a += chunk_rows, ++chunk) {
      const int64_t n = std::min(chunk_rows, m - a);
      auto hc = h.narrow(0, a, n);
      auto z = kept.empty() ? torch::mm(hc, w.t()) : kept.get(chunk);         // (n, V)
      auto lse = lse_all.narrow(0, a, n).unsqueeze(1);                        // (n, 1)
      auto p = torch::exp(z - lse);                                           // (n, V)
      // In place from here: three (n, V) buffers at most (z, p, gz), whatever the vocabulary.
      torch::Tensor gz;
      if (g_h.defined()) {
        // dH/dz = -p (z - E_p[z]).
        gz = z - ez_all.narrow(0, a, n).unsqueeze(1);
        gz.mul_(p).mul_(-g_h.narrow(0, a, n).unsqueeze(1));
      } else {
        gz = torch::zeros_like(p);
      }
      if (g_lp.defined()) {
        // d logp[target]/dz = onehot(target) - p.
        auto g = g_lp.narrow(0, a, n).unsqueeze(1);                           // (n, 1)
        gz.sub_(p.mul_(g));
        gz.scatter_add_(1, targets.narrow(0, a, n).unsqueeze(1), g);
      }
      dh.narrow(0, a, n).copy_(torch::mm(gz, w));                             // (n, C)
      if (weight_grad) dw.addmm_(gz.t(), hc);                                 // (V, C)
    }
    return {dh.to(hidden.scalar_type()), weight_grad ? dw.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

AttentionPlan AttentionPlan::to(torch::Device device) const {
  AttentionPlan out = *this;
  for (AttentionBlock& b : out.blocks) {
    if (b.key_index.defined()) b.key_index = b.key_index.to(device);
    b.bias = b.bias.to(device);
  }
  return out;
}

torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const AttentionPlan& plan, int64_t keep_probs_bytes) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "block_sparse_attention: q, k, v must be (T, heads, D)");
  TORCH_CHECK(q.size(0) == plan.tokens && k.size(0) == plan.tokens, "block_sparse_attention: ", q.size(0),
              " tokens but the plan has ", plan.tokens);
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "block_sparse_attention: query heads not a multiple of kv heads");
  if (!plan.blocks.empty() && plan.blocks.front().bias.device() != q.device()) {
    // A host plan with GPU activations (a caller that did not move it): correct, at one copy per layer.
    const AttentionPlan moved = plan.to(q.device());
    return BlockAttention::apply(q, k, v, reinterpret_cast<int64_t>(&moved), keep_probs_bytes);
  }
  return BlockAttention::apply(q, k, v, reinterpret_cast<int64_t>(&plan), keep_probs_bytes);
}

torch::Tensor packed_hidden(model::Qwen2Model& model, const torch::Tensor& ids, const torch::Tensor& positions,
                            const AttentionPlan& plan, const torch::Tensor& rows) {
  TORCH_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(), "packed_hidden: ids and positions must be (T,)");
  TORCH_CHECK(!rows.defined() || rows.dim() == 1, "packed_hidden: rows must be (M,)");
  const double scale = 1.0 / std::sqrt(static_cast<double>(model->config().head_dim));
  auto h = model->embed(ids.unsqueeze(0));  // (1, T, C)
  auto pos = positions.unsqueeze(0);        // (1, T)
  const int64_t layers = model->num_layers();
  for (int64_t l = 0; l < layers; ++l) {
    auto& layer = model->layer(l);
    model::QKV qkv = layer->attention_inputs(h, pos);  // (1, T, H|Hkv, D)
    auto attn = block_sparse_attention(qkv.q[0] * scale, qkv.k[0], qkv.v[0], plan);  // (T, H*D)
    if (rows.defined() && l + 1 == layers) {
      // Past the last attention every row is on its own: only the wanted rows go on.
      return model->final_norm(layer->attention_outputs(h[0].index_select(0, rows), attn.index_select(0, rows)));  // (M, C)
    }
    h = layer->attention_outputs(h, attn.unsqueeze(0));  // (1, T, C)
  }
  auto out = model->final_norm(h)[0];  // (T, C)
  return rows.defined() ? out.index_select(0, rows) : out;
}

torch::Tensor lm_head_weight(model::Qwen2Model& model) {
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    if (item.key() == "lm_head.weight") return item.value();
  }
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    if (item.key() == "model.embed_tokens.weight") return item.value();
  }
  fail(ErrorCode::kInternal, "model has neither lm_head.weight nor model.embed_tokens.weight");
}

TokenLogprobs token_logprobs(model::Qwen2Model& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                             int64_t chunk_rows, int64_t keep_logits_bytes) {
  TORCH_CHECK(hidden.dim() == 2 && targets.dim() == 1 && targets.size(0) == hidden.size(0),
              "token_logprobs: hidden must be (M, C) and targets (M,)");
  if (chunk_rows <= 0) invalid_argument("token_logprobs: chunk_rows must be positive");
  const torch::Tensor weight = lm_head_weight(model);
  // A chunk's few (rows, V) float32 buffers stay near kMaxLogitChunkBytes each: 1024 rows of Qwen's
  // 151,936 logits would be 622 MB per buffer, ~3 GB at once in the backward pass.
  chunk_rows = std::min(chunk_rows, std::max<int64_t>(1, kMaxLogitChunkBytes / (weight.size(0) * 4)));
  auto out = TokenLogprobFn::apply(hidden, weight, targets, chunk_rows, keep_logits_bytes);
  return {out[0], out[1]};
}

}  // namespace ajet::train
