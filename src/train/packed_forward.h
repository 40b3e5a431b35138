// The training forward over one packed sequence (plain or tree, see tracking/packing.h):
// block-sparse attention that only computes the query/key blocks the tree mask allows, and target
// logprobs (and entropies) computed chunk by chunk without keeping (T, V) logits for the backward
// pass. Both are custom autograd functions with hand-written backward passes; tests check them
// against the dense masked forward and plain log_softmax. It never owns the model or decides what
// is trained.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/qwen2.h"

namespace ajet::train {

// One query block [q_begin, q_end) and the keys any of its rows may attend.
struct AttentionBlock {
  int64_t q_begin = 0;
  int64_t q_end = 0;
  int64_t key_begin = 0;  // keys are [key_begin, key_begin + key_count) when key_index is undefined
  int64_t key_count = 0;
  torch::Tensor key_index;  // (K,) int64 packed indices of the keys, when they are not one range
  // The first `full_keys` keys are visible to every row of the block (a shared prompt, the earlier
  // blocks of a causal sequence): they need no mask. `bias` covers the rest, so a plan holds ~rows
  // entries per token instead of T, and its memory is linear in T.
  int64_t full_keys = 0;
  torch::Tensor
      bias;  // (Tq, K - full_keys) float32: 0 where the query may attend the key, -inf elsewhere
};

struct AttentionPlan {
  int64_t tokens = 0;
  std::vector<AttentionBlock> blocks;
  int64_t computed_pairs() const;  // sum of Tq * K: the score entries computed per head
  int64_t bias_bytes() const;      // what the blocks' masks hold
  // The same plan with its tensors (key_index, bias) on `device`: built on the host, moved once per
  // packed sequence rather than once per layer. On the plan's own device it shares the tensors.
  AttentionPlan to(torch::Device device) const;
};

// Query i may attend key j iff j <= i < subtree_end[j] (tracking::PackedSequence's rule; a plain
// causal sequence has subtree_end[j] = T). Blocks of `block_rows` queries; the keys of a block are
// every j < q_end with subtree_end[j] > q_begin, so key blocks no row may see are never computed.
AttentionPlan plan_attention(std::span<const int32_t> subtree_end, int64_t block_rows = 128);

// Whether plans mask only the keys some row of a block may not see (on by default). Off: every
// block's mask covers all its keys, (Tq, K) each, the layout before; benchmarks measure the
// difference.
void set_partial_block_masks(bool on);
bool partial_block_masks();

// Whether block_sparse_attention runs the flash kernel (train/flash_kernel.h) on CPU float32 and
// float64 inputs when a BLAS is loaded (on by default). Off: the tensor-op path, which forms each
// block's (rows, keys) scores at once and keeps the probabilities when they fit `keep_probs_bytes`;
// it also serves GPU and half-precision inputs. Benchmarks compare the two.
void set_flash_attention_enabled(bool on);
bool flash_attention_enabled();

// The same rule with query blocks that start at `block_starts` (strictly increasing, the first 0,
// all below T) and end where the next starts. A packer that knows where its sequences begin puts
// block borders there, so a block's keys are its own sequence's (and a shared prefix's) instead of
// also the masked tail of the sequence before it: ~30% fewer score entries for ~65-token SFT demos
// than 128-row blocks (docs/sft.md, "Faster SFT step").
AttentionPlan plan_attention(std::span<const int32_t> subtree_end,
                             std::span<const int64_t> block_starts);

// softmax(q k^T + bias) v per block, GQA by grouping query heads onto their kv head. q must already
// carry the 1/sqrt(D) scale. q: (T, H, D); k, v: (T, Hkv, D). Returns (T, H*D) in q's dtype. Scores
// in float32 (float64 for float64 inputs). On the CPU the flash kernel runs it: key tiles of 256
// with an online softmax, probabilities recomputed from the saved row log-sum-exp in the backward
// pass, memory linear in T. Otherwise (GPU, flash off) each block's scores are formed at once, and
// the backward pass reuses them when they fit in `keep_probs_bytes`. The graph keeps what it needs
// of the plan.
torch::Tensor block_sparse_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const AttentionPlan& plan,
                                     int64_t keep_probs_bytes = int64_t{192} << 20);

// Final-normed hidden states of one packed sequence. ids, positions: (T,) int64. Returns (T, C), or
// with `rows` ((M,) int64) only those rows, (M, C): the last layer's output projection and MLP then
// run on those rows alone (nothing after the last layer's attention mixes rows), which skips ~half
// the last layer's work for SFT, where about half the rows predict a target. Same values either
// way. Uses each layer's attention_inputs / attention_outputs with block_sparse_attention in
// between. `checkpoint_layers` (activation checkpointing): every layer but the last keeps only its
// input for the backward pass, which runs the layer again (with the same LoRA dropout masks) and
// back-propagates through it; the same gradients for one more forward's compute. The plan must then
// live until the backward pass has run.
torch::Tensor packed_hidden(model::Qwen2Model& model, const torch::Tensor& ids,
                            const torch::Tensor& positions, const AttentionPlan& plan,
                            const torch::Tensor& rows = {}, bool checkpoint_layers = false);

struct TokenLogprobs {
  torch::Tensor logprob;  // (M,) log softmax(lm_head(hidden))[target]
  torch::Tensor entropy;  // (M,) entropy of that distribution
};

// hidden: (M, C) the rows that predict `targets` (M,) int64. Logits are formed `chunk_rows` rows at
// a time, fewer when a chunk's logits would pass kMaxLogitChunkBytes (220 rows at Qwen's vocabulary
// of 151,936); the backward pass keeps them when they fit in `keep_logits_bytes`, else recomputes
// them. A frozen lm_head weight (LoRA) gets no gradient and costs no (V, C) buffer.
inline constexpr int64_t kMaxLogitChunkBytes = int64_t{128} << 20;
TokenLogprobs token_logprobs(model::Qwen2Model& model, const torch::Tensor& hidden,
                             const torch::Tensor& targets, int64_t chunk_rows = 1024,
                             int64_t keep_logits_bytes = int64_t{256} << 20);

// The lm_head weight (V, C) whether tied or not.
torch::Tensor lm_head_weight(model::Qwen2Model& model);

}  // namespace ajet::train
