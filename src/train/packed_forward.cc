#include "train/packed_forward.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <limits>

#include "common/error.h"
#include "model/parallel.h"
#include "train/lora.h"
#include "train/flash_kernel.h"

namespace ajet::train {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t AttentionPlan::computed_pairs() const {
  int64_t n = 0;
  for (const auto& b : blocks) n += (b.q_end - b.q_begin) * b.key_count;
  return n;
}

int64_t AttentionPlan::bias_bytes() const {
  int64_t n = 0;
  for (const auto& b : blocks) n += b.bias.numel() * static_cast<int64_t>(sizeof(float));
  return n;
}

namespace {
std::atomic<bool> g_partial_masks{true};
std::atomic<bool> g_flash{true};
}  // namespace

void set_partial_block_masks(bool on) { g_partial_masks.store(on); }
void set_flash_attention_enabled(bool on) { g_flash.store(on); }
bool flash_attention_enabled() { return g_flash.load(); }
bool partial_block_masks() { return g_partial_masks.load(); }

AttentionPlan plan_attention(std::span<const int32_t> subtree_end, int64_t block_rows) {
  if (block_rows <= 0) invalid_argument("plan_attention: block_rows must be positive");
  std::vector<int64_t> starts;
  for (int64_t a = 0; a < static_cast<int64_t>(subtree_end.size()); a += block_rows)
    starts.push_back(a);
  return plan_attention(subtree_end, starts);
}

AttentionPlan plan_attention(std::span<const int32_t> subtree_end,
                             std::span<const int64_t> block_starts) {
  const auto t = static_cast<int64_t>(subtree_end.size());
  for (int64_t j = 0; j < t; ++j) {
    if (subtree_end[j] <= j || subtree_end[j] > t) {
      invalid_argument("plan_attention: subtree_end[" + std::to_string(j) +
                       "] = " + std::to_string(subtree_end[j]) + " is outside (" +
                       std::to_string(j) + ", " + std::to_string(t) + "]");
    }
  }
  if (t > 0 && (block_starts.empty() || block_starts.front() != 0)) {
    invalid_argument("plan_attention: the first block must start at row 0");
  }
  for (size_t i = 0; i < block_starts.size(); ++i) {
    if (block_starts[i] >= t || (i > 0 && block_starts[i] <= block_starts[i - 1])) {
      invalid_argument("plan_attention: block_starts must increase and stay below " +
                       std::to_string(t) + " (block " + std::to_string(i) + " starts at " +
                       std::to_string(block_starts[i]) + ")");
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
    // Keys come in packed order, so the ancestors every row shares (depth-first layout) lead.
    while (partial_block_masks() && block.full_keys < block.key_count) {
      const int64_t j = keys[static_cast<size_t>(block.full_keys)];
      if (j >= a || subtree_end[j] < b) break;
      ++block.full_keys;
    }
    block.bias = torch::empty({b - a, block.key_count - block.full_keys}, torch::kFloat);
    float* bias = block.bias.data_ptr<float>();
    for (int64_t i = a; i < b; ++i) {
      for (int64_t kk = block.full_keys; kk < block.key_count; ++kk) {
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
  return b.key_index.defined() ? kh.index_select(1, b.key_index)
                               : kh.narrow(1, b.key_begin, b.key_count);
}

// Scores s (Hkv, rep*Tq, K) += the block's mask on its keys past the full ones.
void add_mask(torch::Tensor& s, const AttentionBlock& b, int64_t hkv, int64_t rep, int64_t tq) {
  const int64_t masked = b.key_count - b.full_keys;
  if (masked > 0) s.view({hkv, rep, tq, b.key_count}).narrow(3, b.full_keys, masked).add_(b.bias);
}

// dst (Hkv, T, D) += src (Hkv, K, D) at the block's keys.
void add_to_keys(torch::Tensor& dst, const torch::Tensor& src, const AttentionBlock& b) {
  if (b.key_index.defined()) {
    dst.index_add_(1, b.key_index, src);
  } else {
    dst.narrow(1, b.key_begin, b.key_count).add_(src);
  }
}

// The flash kernel (flash_kernel.h) over a plan: one work item per (kv head, block), dealt out to
// the threads in turn, the costliest (most keys) first. Tensors are CPU, contiguous, of type T: qg
// (Hkv, rep, T, D), kh / vh (Hkv, T, D).
template <typename T>
struct FlashPlanRun {
  const std::vector<AttentionBlock>& blocks;
  int64_t hkv, rep, t, d;

  std::vector<int64_t> order() const {  // work items, most keys first
    std::vector<int64_t> items(static_cast<size_t>(hkv) * blocks.size());
    std::iota(items.begin(), items.end(), int64_t{0});
    const auto nb = static_cast<int64_t>(blocks.size());
    std::stable_sort(items.begin(), items.end(), [&](int64_t a, int64_t b) {
      return blocks[static_cast<size_t>(a % nb)].key_count >
             blocks[static_cast<size_t>(b % nb)].key_count;
    });
    return items;
  }
  int64_t max_rows() const {
    int64_t m = 0;
    for (const auto& b : blocks) m = std::max(m, b.q_end - b.q_begin);
    return m * rep;
  }
  int64_t max_gathered_keys() const {
    int64_t m = 0;
    for (const auto& b : blocks) {
      if (b.key_index.defined()) m = std::max(m, b.key_count);
    }
    return m;
  }
  // Runs fn(item, part) over every item, part in [0, threads()) naming the buffers it may write.
  // Part p takes items p, p + threads(), ... of the costliest-first order, whichever thread runs
  // it: the items a part sums, and their order, never depend on timing, so the key and value
  // gradients are the same bits on every run (a shared counter handing out items would not be).
  template <typename F>
  void for_each(F&& fn) const {
    const std::vector<int64_t> items = order();
    const auto parts = static_cast<size_t>(threads());
    at::parallel_for(0, threads(), 1, [&](int64_t begin, int64_t end) {
      for (auto part = static_cast<size_t>(begin); part < static_cast<size_t>(end); ++part) {
        for (size_t i = part; i < items.size(); i += parts) fn(items[i], static_cast<int>(part));
      }
    });
  }
  static int64_t threads() { return at::get_num_threads(); }
  // rows [b.q_begin, b.q_end) of every query head of kv head g: (rep, T, D)-strided src <->
  // (rep*tq, D) dst.
  void gather_rows(const T* src, T* dst, int64_t g, const AttentionBlock& b, int64_t width) const {
    const int64_t tq = b.q_end - b.q_begin;
    for (int64_t r = 0; r < rep; ++r) {
      std::memcpy(dst + r * tq * width, src + ((g * rep + r) * t + b.q_begin) * width,
                  static_cast<size_t>(tq * width) * sizeof(T));
    }
  }
  void scatter_rows(const T* src, T* dst, int64_t g, const AttentionBlock& b, int64_t width) const {
    const int64_t tq = b.q_end - b.q_begin;
    for (int64_t r = 0; r < rep; ++r) {
      std::memcpy(dst + ((g * rep + r) * t + b.q_begin) * width, src + r * tq * width,
                  static_cast<size_t>(tq * width) * sizeof(T));
    }
  }
  // The block's keys of kv head g from (Hkv, T, D): a pointer into it for a range, else gathered
  // into buf.
  const T* keys(const T* all, T* buf, int64_t g, const AttentionBlock& b) const {
    const T* head = all + g * t * d;
    if (!b.key_index.defined()) return head + b.key_begin * d;
    const int64_t* idx = b.key_index.data_ptr<int64_t>();
    for (int64_t kk = 0; kk < b.key_count; ++kk)
      std::memcpy(buf + kk * d, head + idx[kk] * d, static_cast<size_t>(d) * sizeof(T));
    return buf;
  }
  FlashTile<T> tile(const AttentionBlock& b, const T* q, const T* k, const T* v) const {
    FlashTile<T> ft;
    ft.rep = rep;
    ft.tq = b.q_end - b.q_begin;
    ft.d = d;
    ft.q = q;
    ft.keys = b.key_count;
    ft.k = k;
    ft.v = v;
    ft.full_keys = b.full_keys;
    ft.bias = b.bias.data_ptr<float>();
    return ft;
  }
};

// Whether the flash kernel runs these inputs: CPU, float32 or float64, and a BLAS to call.
bool use_flash(const torch::Tensor& q) {
  return flash_attention_enabled() && q.is_cpu() &&
         (q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kDouble) &&
         flash_available();
}

template <typename T>
void flash_plan_forward(const std::vector<AttentionBlock>& blocks, const torch::Tensor& qg,
                        const torch::Tensor& kh, const torch::Tensor& vh, torch::Tensor& og,
                        torch::Tensor& lse) {
  const FlashPlanRun<T> run{blocks, kh.size(0), qg.size(1), qg.size(2), qg.size(3)};
  const int64_t rows = run.max_rows(), d = run.d, gathered = run.max_gathered_keys();
  const int64_t per_thread = flash_scratch(rows, d) + 2 * rows * d + rows + 2 * gathered * d;
  std::vector<T> scratch(static_cast<size_t>(per_thread * run.threads()));
  const T* q = qg.data_ptr<T>();
  const T* k = kh.data_ptr<T>();
  const T* v = vh.data_ptr<T>();
  T* o = og.data_ptr<T>();
  T* l = lse.data_ptr<T>();
  const auto nb = static_cast<int64_t>(blocks.size());
  run.for_each([&](int64_t item, int thread) {
    const int64_t g = item / nb;
    const AttentionBlock& b = blocks[static_cast<size_t>(item % nb)];
    T* base = scratch.data() + thread * per_thread;
    T* qbuf = base + flash_scratch(rows, d);
    T* obuf = qbuf + rows * d;
    T* lbuf = obuf + rows * d;
    T* kbuf = lbuf + rows;
    T* vbuf = kbuf + gathered * d;
    run.gather_rows(q, qbuf, g, b, d);
    const FlashTile<T> ft = run.tile(b, qbuf, run.keys(k, kbuf, g, b), run.keys(v, vbuf, g, b));
    flash_forward(ft, obuf, lbuf, base);
    run.scatter_rows(obuf, o, g, b, d);
    run.scatter_rows(lbuf, l, g, b, 1);
  });
}

// dq (Hkv, rep, T, D) written; dk, dv (Hkv, T, D) zeroed and filled.
template <typename T>
void flash_plan_backward(const std::vector<AttentionBlock>& blocks, const torch::Tensor& qg,
                         const torch::Tensor& kh, const torch::Tensor& vh, const torch::Tensor& dog,
                         const torch::Tensor& delta, const torch::Tensor& lse, torch::Tensor& dq,
                         torch::Tensor& dk, torch::Tensor& dv) {
  const FlashPlanRun<T> run{blocks, kh.size(0), qg.size(1), qg.size(2), qg.size(3)};
  const int64_t rows = run.max_rows(), d = run.d, gathered = run.max_gathered_keys(), t = run.t,
                hkv = run.hkv;
  const int64_t per_thread = flash_scratch(rows, d) + 3 * rows * d + 2 * rows + 4 * gathered * d;
  const int64_t threads = run.threads();
  std::vector<T> scratch(static_cast<size_t>(per_thread * threads));
  // Each thread sums its items' key and value gradients in its own (Hkv, T, D) pair; added up
  // after.
  std::vector<T> acc(static_cast<size_t>(threads * 2 * hkv * t * d), T(0));
  const T* q = qg.data_ptr<T>();
  const T* k = kh.data_ptr<T>();
  const T* v = vh.data_ptr<T>();
  const T* go = dog.data_ptr<T>();
  const T* dl = delta.data_ptr<T>();
  const T* ls = lse.data_ptr<T>();
  T* gq = dq.data_ptr<T>();
  const auto nb = static_cast<int64_t>(blocks.size());
  run.for_each([&](int64_t item, int thread) {
    const int64_t g = item / nb;
    const AttentionBlock& b = blocks[static_cast<size_t>(item % nb)];
    T* base = scratch.data() + thread * per_thread;
    T* qbuf = base + flash_scratch(rows, d);
    T* gobuf = qbuf + rows * d;
    T* gqbuf = gobuf + rows * d;
    T* dlbuf = gqbuf + rows * d;
    T* lsbuf = dlbuf + rows;
    T* kbuf = lsbuf + rows;
    T* vbuf = kbuf + gathered * d;
    T* gkbuf = vbuf + gathered * d;
    T* gvbuf = gkbuf + gathered * d;
    run.gather_rows(q, qbuf, g, b, d);
    run.gather_rows(go, gobuf, g, b, d);
    run.gather_rows(dl, dlbuf, g, b, 1);
    run.gather_rows(ls, lsbuf, g, b, 1);
    T* gk_all = acc.data() + static_cast<size_t>(thread) * 2 * hkv * t * d;
    T* gv_all = gk_all + hkv * t * d;
    const FlashTile<T> ft = run.tile(b, qbuf, run.keys(k, kbuf, g, b), run.keys(v, vbuf, g, b));
    if (b.key_index.defined()) {
      std::fill(gkbuf, gkbuf + b.key_count * d, T(0));
      std::fill(gvbuf, gvbuf + b.key_count * d, T(0));
      flash_backward(ft, gobuf, dlbuf, lsbuf, gqbuf, gkbuf, gvbuf, base);
      const int64_t* idx = b.key_index.data_ptr<int64_t>();
      for (int64_t kk = 0; kk < b.key_count; ++kk) {
        T* dst_k = gk_all + (g * t + idx[kk]) * d;
        T* dst_v = gv_all + (g * t + idx[kk]) * d;
        for (int64_t c = 0; c < d; ++c) {
          dst_k[c] += gkbuf[kk * d + c];
          dst_v[c] += gvbuf[kk * d + c];
        }
      }
    } else {
      flash_backward(ft, gobuf, dlbuf, lsbuf, gqbuf, gk_all + (g * t + b.key_begin) * d,
                     gv_all + (g * t + b.key_begin) * d, base);
    }
    run.scatter_rows(gqbuf, gq, g, b, d);
  });
  T* gk = dk.data_ptr<T>();
  T* gv = dv.data_ptr<T>();
  const int64_t n = hkv * t * d;
  at::parallel_for(0, n, 16384, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      T sk = 0, sv = 0;
      for (int64_t th = 0; th < threads; ++th) {
        sk += acc[static_cast<size_t>(th * 2 * n + i)];
        sv += acc[static_cast<size_t>(th * 2 * n + n + i)];
      }
      gk[i] = sk;
      gv[i] = sv;
    }
  });
}

class BlockAttention : public torch::autograd::Function<BlockAttention> {
 public:
  // q: (T, H, D) scaled; k, v: (T, Hkv, D). plan: address of an AttentionPlan (read during forward
  // only). Scores in float32 (float64 when q is float64, for gradient checks).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t plan_address,
                               int64_t keep_probs_bytes) {
    const auto& plan = *reinterpret_cast<const AttentionPlan*>(plan_address);
    const int64_t t = q.size(0), h = q.size(1), d = q.size(2), hkv = k.size(1), rep = h / hkv;
    const auto ct = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    auto qg =
        q.to(ct).view({t, hkv, rep, d}).permute({1, 2, 0, 3}).contiguous();  // (Hkv, rep, T, D)
    auto kh = k.to(ct).permute({1, 0, 2}).contiguous();                      // (Hkv, T, D)
    auto vh = v.to(ct).permute({1, 0, 2}).contiguous();                      // (Hkv, T, D)
    auto og = torch::empty({hkv, rep, t, d}, qg.options());                  // (Hkv, rep, T, D)
    if (use_flash(qg)) {
      auto lse = torch::empty({hkv, rep, t}, qg.options());  // (Hkv, rep, T)
      if (ct == torch::kDouble) {
        flash_plan_forward<double>(plan.blocks, qg, kh, vh, og, lse);
      } else {
        flash_plan_forward<float>(plan.blocks, qg, kh, vh, og, lse);
      }
      ctx->save_for_backward({qg, kh, vh, og, lse});
      save_plan(ctx, plan, q, k, v);
      ctx->saved_data["flash"] = true;
      return og.permute({2, 0, 1, 3}).reshape({t, h * d}).to(q.scalar_type());  // (T, H*D)
    }
    const bool keep_probs =
        plan.computed_pairs() * h * static_cast<int64_t>(c10::elementSize(ct)) <= keep_probs_bytes;
    c10::List<torch::Tensor>
        saved;  // per block: probs (Hkv, rep*Tq, K) or row logsumexp (Hkv, rep*Tq, 1)
    for (const auto& b : plan.blocks) {
      const int64_t tq = b.q_end - b.q_begin;
      auto qb = qg.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, d});  // (Hkv, rep*Tq, D)
      auto kb = block_keys(kh, b);                                        // (Hkv, K, D)
      auto vb = block_keys(vh, b);
      auto s = torch::bmm(qb, kb.transpose(1, 2));  // (Hkv, rep*Tq, K)
      add_mask(s, b, hkv, rep, tq);
      torch::Tensor p;
      if (keep_probs) {
        p = torch::softmax(s, -1);
        saved.push_back(p);
      } else {
        auto lse = torch::logsumexp(s, -1, /*keepdim=*/true);  // (Hkv, rep*Tq, 1)
        p = s.sub_(lse).exp_();
        saved.push_back(lse);
      }
      og.narrow(2, b.q_begin, tq).copy_(torch::bmm(p, vb).view({hkv, rep, tq, d}));
    }
    ctx->save_for_backward({qg, kh, vh, og});
    save_plan(ctx, plan, q, k, v);
    ctx->saved_data["saved"] = saved;
    ctx->saved_data["keep_probs"] = keep_probs;
    ctx->saved_data["flash"] = false;
    return og.permute({2, 0, 1, 3}).reshape({t, h * d}).to(q.scalar_type());  // (T, H*D)
  }

  // The plan travels with the graph (tensors are reference counted), so the caller's plan may go
  // away before backward runs.
  static void save_plan(AutogradContext* ctx, const AttentionPlan& plan, const torch::Tensor& q,
                        const torch::Tensor& k, const torch::Tensor& v) {
    std::vector<int64_t> ranges;
    c10::List<torch::Tensor> key_index, bias;
    for (const auto& blk : plan.blocks) {
      ranges.insert(ranges.end(),
                    {blk.q_begin, blk.q_end, blk.key_begin, blk.key_count, blk.full_keys});
      key_index.push_back(blk.key_index.defined() ? blk.key_index
                                                  : torch::Tensor(torch::empty({0}, torch::kLong)));
      bias.push_back(blk.bias);
    }
    ctx->saved_data["ranges"] = ranges;
    ctx->saved_data["key_index"] = key_index;
    ctx->saved_data["bias"] = bias;
    ctx->saved_data["dtypes"] = std::vector<int64_t>{static_cast<int64_t>(q.scalar_type()),
                                                     static_cast<int64_t>(k.scalar_type()),
                                                     static_cast<int64_t>(v.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    AttentionPlan plan;
    {
      const auto ranges = ctx->saved_data["ranges"].toIntVector();
      const auto key_index = ctx->saved_data["key_index"].toTensorList();
      const auto bias = ctx->saved_data["bias"].toTensorList();
      for (size_t i = 0; i < bias.size(); ++i) {
        AttentionBlock blk;
        blk.q_begin = ranges[5 * i];
        blk.q_end = ranges[5 * i + 1];
        blk.key_begin = ranges[5 * i + 2];
        blk.key_count = ranges[5 * i + 3];
        blk.full_keys = ranges[5 * i + 4];
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
    const auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    const int64_t hkv = qg.size(0), rep = qg.size(1), t = qg.size(2), d = qg.size(3);
    auto dog = grads[0]
                   .to(qg.scalar_type())
                   .view({t, hkv, rep, d})
                   .permute({1, 2, 0, 3})
                   .contiguous();                       // (Hkv, rep, T, D)
    auto delta = (dog * og).sum(-1, /*keepdim=*/true);  // (Hkv, rep, T, 1): rowsum(dP * P) = dO . O
    auto finish = [&](const torch::Tensor& dqg, const torch::Tensor& dkh,
                      const torch::Tensor& dvh) -> variable_list {
      auto dq = dqg.permute({2, 0, 1, 3})
                    .reshape({t, hkv * rep, d})
                    .to(static_cast<c10::ScalarType>(dtypes[0]));
      auto dk = dkh.permute({1, 0, 2}).contiguous().to(static_cast<c10::ScalarType>(dtypes[1]));
      auto dv = dvh.permute({1, 0, 2}).contiguous().to(static_cast<c10::ScalarType>(dtypes[2]));
      return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
    };
    if (ctx->saved_data["flash"].toBool()) {
      const auto& lse = vars[4];
      auto dqg = torch::empty_like(qg);
      auto dkh = torch::empty_like(kh);
      auto dvh = torch::empty_like(vh);
      auto dl = delta.contiguous();
      if (qg.scalar_type() == torch::kDouble) {
        flash_plan_backward<double>(plan.blocks, qg, kh, vh, dog, dl, lse, dqg, dkh, dvh);
      } else {
        flash_plan_backward<float>(plan.blocks, qg, kh, vh, dog, dl, lse, dqg, dkh, dvh);
      }
      return finish(dqg, dkh, dvh);
    }
    const auto saved = ctx->saved_data["saved"].toTensorList();
    const bool keep_probs = ctx->saved_data["keep_probs"].toBool();
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
        add_mask(s, b, hkv, rep, tq);
        p = s.sub_(saved.get(i)).exp_();
      }
      auto dob = dog.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, d});  // (Hkv, rep*Tq, D)
      auto db = delta.narrow(2, b.q_begin, tq).reshape({hkv, rep * tq, 1});
      add_to_keys(dvh, torch::bmm(p.transpose(1, 2), dob), b);  // (Hkv, K, D)
      auto ds = torch::bmm(dob, vb.transpose(1, 2));            // dP: (Hkv, rep*Tq, K)
      ds.sub_(db).mul_(p);                                      // dS = P * (dP - delta)
      dqg.narrow(2, b.q_begin, tq).copy_(torch::bmm(ds, kb).view({hkv, rep, tq, d}));
      add_to_keys(dkh, torch::bmm(ds.transpose(1, 2), qb), b);
    }
    return finish(dqg, dkh, dvh);
  }
};

class TokenLogprobFn : public torch::autograd::Function<TokenLogprobFn> {
 public:
  // hidden (M, C), weight (V, C), targets (M,) int64. Returns {logprob (M,), entropy (M,)} in
  // float32.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets,
                               int64_t chunk_rows, int64_t keep_logits_bytes) {
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
      auto p = torch::exp(z - lse.unsqueeze(1));              // (n, V)
      entropy.narrow(0, a, n).copy_(lse - p.mul_(z).sum(1));  // p * z in place
      lse_all.narrow(0, a, n).copy_(lse);
      if (keep) kept.push_back(z);
    }
    ctx->save_for_backward(
        {hidden, weight, targets, lse_all, lse_all - entropy});  // last: E_p[z] per row
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
    if (!g_lp.defined() && !g_h.defined())
      return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    size_t chunk = 0;
    for (int64_t a = 0; a < m; a += chunk_rows, ++chunk) {
      const int64_t n = std::min(chunk_rows, m - a);
      auto hc = h.narrow(0, a, n);
      auto z = kept.empty() ? torch::mm(hc, w.t()) : kept.get(chunk);  // (n, V)
      auto lse = lse_all.narrow(0, a, n).unsqueeze(1);                 // (n, 1)
      auto p = torch::exp(z - lse);                                    // (n, V)
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
        auto g = g_lp.narrow(0, a, n).unsqueeze(1);  // (n, 1)
        gz.sub_(p.mul_(g));
        gz.scatter_add_(1, targets.narrow(0, a, n).unsqueeze(1), g);
      }
      dh.narrow(0, a, n).copy_(torch::mm(gz, w));  // (n, C)
      if (weight_grad) dw.addmm_(gz.t(), hc);      // (V, C)
    }
    return {dh.to(hidden.scalar_type()),
            weight_grad ? dw.to(weight.scalar_type()) : torch::Tensor(), torch::Tensor(),
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

torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const AttentionPlan& plan,
                                     int64_t keep_probs_bytes) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
              "block_sparse_attention: q, k, v must be (T, heads, D)");
  TORCH_CHECK(q.size(0) == plan.tokens && k.size(0) == plan.tokens,
              "block_sparse_attention: ", q.size(0), " tokens but the plan has ", plan.tokens);
  TORCH_CHECK(q.size(1) % k.size(1) == 0,
              "block_sparse_attention: query heads not a multiple of kv heads");
  if (!plan.blocks.empty() && plan.blocks.front().bias.device() != q.device()) {
    // A host plan with GPU activations (a caller that did not move it): correct, at one copy per
    // layer.
    const AttentionPlan moved = plan.to(q.device());
    return BlockAttention::apply(q, k, v, reinterpret_cast<int64_t>(&moved), keep_probs_bytes);
  }
  return BlockAttention::apply(q, k, v, reinterpret_cast<int64_t>(&plan), keep_probs_bytes);
}

namespace {

// One decoder layer over a packed sequence: h (1, T, C) → (1, T, C).
torch::Tensor run_layer(model::DecoderLayer& layer, const torch::Tensor& h,
                        const torch::Tensor& pos, const AttentionPlan& plan, double scale) {
  model::QKV qkv = layer->attention_inputs(h, pos);  // (1, T, H|Hkv, D)
  auto attn = block_sparse_attention(qkv.q[0] * scale, qkv.k[0], qkv.v[0], plan);  // (T, H*D)
  return layer->attention_outputs(h, attn.unsqueeze(0));
}

// A layer whose activations are not kept: forward without a graph, and in backward the layer again
// with one, back-propagated at once (its parameters' gradients accumulate as usual). The LoRA
// dropout generator's state is put back for the rerun, so it draws the forward's masks.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h,
                               const torch::Tensor& pos, int64_t layer_address,
                               int64_t plan_address, double scale, at::Generator dropout) {
    auto& layer = *reinterpret_cast<model::DecoderLayer*>(layer_address);
    const auto& plan = *reinterpret_cast<const AttentionPlan*>(plan_address);
    ctx->saved_data["layer"] = layer_address;
    ctx->saved_data["plan"] = plan_address;
    ctx->saved_data["scale"] = scale;
    if (dropout.defined()) {
      ctx->saved_data["rng"] = dropout.get_state();
      ctx->saved_data["generator"] = dropout;
    }
    ctx->save_for_backward({h, pos});
    return run_layer(layer, h, pos, plan,
                     scale);  // forward runs with grad mode off: no graph is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& layer = *reinterpret_cast<model::DecoderLayer*>(ctx->saved_data["layer"].toInt());
    const auto& plan = *reinterpret_cast<const AttentionPlan*>(ctx->saved_data["plan"].toInt());
    const auto vars = ctx->get_saved_variables();
    auto h = vars[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      at::Generator gen;
      torch::Tensor after;
      if (ctx->saved_data.count("rng") != 0) {
        gen = ctx->saved_data["generator"].toGenerator();
        after = gen.get_state();
        gen.set_state(ctx->saved_data["rng"].toTensor());
      }
      torch::AutoGradMode grad_on(true);
      out = run_layer(layer, h, vars[1], plan, ctx->saved_data["scale"].toDouble());
      if (gen.defined()) gen.set_state(after);
    }
    torch::autograd::backward({out}, {grads[0]});
    return {h.grad(),        torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor packed_hidden(model::Qwen2Model& model, const torch::Tensor& ids,
                            const torch::Tensor& positions, const AttentionPlan& plan,
                            const torch::Tensor& rows, bool checkpoint_layers) {
  TORCH_CHECK(ids.dim() == 1 && positions.sizes() == ids.sizes(),
              "packed_hidden: ids and positions must be (T,)");
  TORCH_CHECK(!rows.defined() || rows.dim() == 1, "packed_hidden: rows must be (M,)");
  const double scale = 1.0 / std::sqrt(static_cast<double>(model->config().head_dim));
  auto h = model->embed(ids.unsqueeze(0));  // (1, T, C)
  auto pos = positions.unsqueeze(0);        // (1, T)
  const int64_t layers = model->num_layers();
  const bool checkpoint = checkpoint_layers && torch::GradMode::is_enabled();
  at::Generator dropout;
  if (checkpoint) {
    dropout = lora_dropout_generator(model);
    // Without an input that needs a gradient (frozen embeddings under LoRA) the layer's output
    // would need none either, and its parameters would get no gradient.
    if (!h.requires_grad()) h = h.detach().requires_grad_(true);
  }
  for (int64_t l = 0; l < layers; ++l) {
    auto& layer = model->layer(l);
    if (checkpoint && l + 1 < layers) {
      h = CheckpointedLayer::apply(h, pos, reinterpret_cast<int64_t>(&layer),
                                   reinterpret_cast<int64_t>(&plan), scale, dropout);
      continue;
    }
    model::QKV qkv = layer->attention_inputs(h, pos);  // (1, T, H|Hkv, D)
    auto attn = block_sparse_attention(qkv.q[0] * scale, qkv.k[0], qkv.v[0], plan);  // (T, H*D)
    if (rows.defined() && l + 1 == layers) {
      // Past the last attention every row is on its own: only the wanted rows go on.
      return model->final_norm(layer->attention_outputs(h[0].index_select(0, rows),
                                                        attn.index_select(0, rows)));  // (M, C)
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

TokenLogprobs token_logprobs(model::Qwen2Model& model, const torch::Tensor& hidden,
                             const torch::Tensor& targets, int64_t chunk_rows,
                             int64_t keep_logits_bytes) {
  TORCH_CHECK(hidden.dim() == 2 && targets.dim() == 1 && targets.size(0) == hidden.size(0),
              "token_logprobs: hidden must be (M, C) and targets (M,)");
  if (chunk_rows <= 0) invalid_argument("token_logprobs: chunk_rows must be positive");
  const torch::Tensor weight = lm_head_weight(model);
  // A chunk's few (rows, V) float32 buffers stay near kMaxLogitChunkBytes each: 1024 rows of Qwen's
  // 151,936 logits would be 622 MB per buffer, ~3 GB at once in the backward pass.
  chunk_rows =
      std::min(chunk_rows, std::max<int64_t>(1, kMaxLogitChunkBytes / (weight.size(0) * 4)));
  auto out = TokenLogprobFn::apply(hidden, weight, targets, chunk_rows, keep_logits_bytes);
  return {out[0], out[1]};
}

}  // namespace ajet::train
