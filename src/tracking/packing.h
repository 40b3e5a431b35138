// Packs training samples into sequences without padding. Plain packing concatenates unrelated
// samples (block-diagonal causal attention); tree packing stores samples that share a prefix (the N
// samples of a GRPO group sharing a prompt, the branches of one episode) once per shared token,
// with a tree-shaped attention. Both produce the same PackedSequence, so a trainer has one code
// path. It never changes a sample: unpack() gives every sample back token for token (tests prove
// it).
//
// The attention structure is kept compact: parent[i] is the packed index of the token before token
// i in every sample containing it (-1 for a sample's first token); tokens are laid out depth-first,
// so token i's descendants are exactly [i + 1, subtree_end[i]). Query i may attend key j iff j is i
// or an ancestor of i, i.e. j <= i < subtree_end[j]. position_ids[i] = depth = the token's position
// in every sample containing it, so rotary positions equal the unpacked ones.
// dense_attention_mask() materialises the (T, T) bool mask Qwen2Model::forward_hidden takes (true =
// may attend).
//
// How a trainer gets exactly the unpacked loss. Unpacked, with per-sample weight w_s
// (Sample::weight), advantage A_s, behaviour logprobs old_s[p] and loss mask m_s[p]:
//     L = sum_s sum_p m_s[p] * w_s * f(lp_s[p], old_s[p], A_s) / N,   N = sum_s sum_p m_s[p]
// where lp_s[p] = log softmax(logits at position p-1 of sample s)[x_s[p]]. Packed:
//   * the logits that predict token i are the ones computed at packed index parent[i] (NOT i - 1:
//     after a branch point the previous packed token belongs to another branch); a token with
//     parent -1 is predicted by nothing and is never trained (packing throws if its mask is 1);
//   * every token i appears once, but stands for each occurrence (s, p) listed in
//     occurrences(i); its loss is the SUM over those occurrences of m_s[p] * w_s * f(lp[i],
//     old_s[p], A_s) (old logprobs may differ between occurrences: different episodes, policy
//     versions);
//   * N counts occurrences, not packed tokens: N = sum over occurrences of m_s[p] (token-mean over
//     each sample's tokens), the same N as unpacked.
// Then L and its gradients equal the unpacked ones up to float summation order. When f is linear
// in a per-occurrence coefficient c_s (e.g. REINFORCE with identical old logprobs), aggregate()
// sums m_s[p] * c_s per packed token so the trainer can use one coefficient per token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tracking/merge.h"

namespace ajet::tracking {

struct PackedSequence {
  std::vector<TokenId> token_ids;     // (T,)
  std::vector<int32_t> position_ids;  // (T,) depth: position of the token in its samples
  std::vector<int32_t> parent;  // (T,) packed index of the previous token; -1 for a first token
  std::vector<int32_t> subtree_end;  // (T,) descendants of i are [i + 1, subtree_end[i])
  std::vector<int32_t> segment_ids;  // (T,) tokens in different segments never attend each other
  // Occurrences in CSR form: token i is position occurrence_position[k] of packed sample
  // occurrence_sample[k] for k in [occurrence_begin[i], occurrence_begin[i + 1]).
  std::vector<int32_t> occurrence_begin;   // (T + 1,)
  std::vector<int32_t> occurrence_sample;  // index into `samples` below (not the input index)
  std::vector<int32_t> occurrence_position;
  std::vector<int32_t> samples;  // input indices of the samples packed here
  std::vector<std::vector<int32_t>>
      sample_tokens;         // per packed sample: packed index of each position
  bool over_budget = false;  // plain packing: one sample longer than the budget, packed alone
  // Tree packing: the tokens every sample packed here has at its start (one sample: all of them).
  // The budget bounds size() - shared_prefix, so a prompt longer than the budget is still computed
  // once.
  size_t shared_prefix = 0;

  size_t size() const { return token_ids.size(); }
  size_t sample_count() const { return samples.size(); }
  std::span<const int32_t> occurrence_samples(size_t token) const;
  std::span<const int32_t> occurrence_positions(size_t token) const;
};

// Unrelated samples: first-fit decreasing into sequences of at most `token_budget` tokens, each
// sample contiguous, positions restarting at 0, one segment per sample. Order inside a sequence is
// the order of `sequences`. A sample longer than the budget gets a sequence of its own.
std::vector<PackedSequence> pack_plain(std::span<const std::span<const TokenId>> sequences,
                                       size_t token_budget);
std::vector<PackedSequence> pack_plain(std::span<const Sample> samples, size_t token_budget);

// Samples sorted by their tokens, so those sharing prefixes are neighbours; each joins the current
// sequence while the sequence's distinct tokens beyond the prefix all its samples share stay within
// `token_budget` (a GRPO group with a prompt longer than the budget is one tree, its prompt
// computed once). One segment per distinct first token. `beyond_shared_prefix` false: the budget
// counts every distinct token, so a sample longer than the budget is packed alone (the rule before
// prompts were shared; benchmarks compare the two).
std::vector<PackedSequence> pack_tree(std::span<const std::span<const TokenId>> sequences,
                                      size_t token_budget, bool beyond_shared_prefix = true);
std::vector<PackedSequence> pack_tree(std::span<const Sample> samples, size_t token_budget);

// Throws Error(kInvalidArgument) when a sample's first token has loss mask 1 (it has no
// prediction).
void check_packable(std::span<const Sample> samples);

// (T, T) row-major, 1 where query i may attend key j.
std::vector<uint8_t> dense_attention_mask(const PackedSequence& seq);
bool may_attend(const PackedSequence& seq, size_t query, size_t key);

// Packed sample k's tokens, read back through sample_tokens.
std::vector<TokenId> unpack(const PackedSequence& seq, size_t k);

// Per packed token: sum over its occurrences (s, p) of loss_mask_s[p] * per_sample[input index of
// s]. `samples` and `per_sample` are indexed like the input given to the packer.
std::vector<double> aggregate(const PackedSequence& seq, std::span<const Sample> samples,
                              std::span<const double> per_sample);

// Tokens a forward pass computes: sum of sequence sizes.
size_t packed_tokens(std::span<const PackedSequence> seqs);

}  // namespace ajet::tracking
