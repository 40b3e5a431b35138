#include "tracking/packing.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"
#include "tracking/token_trie.h"

namespace ajet::tracking {

std::span<const int32_t> PackedSequence::occurrence_samples(size_t token) const {
  const auto b = static_cast<size_t>(occurrence_begin[token]);
  const auto e = static_cast<size_t>(occurrence_begin[token + 1]);
  return std::span<const int32_t>(occurrence_sample).subspan(b, e - b);
}

std::span<const int32_t> PackedSequence::occurrence_positions(size_t token) const {
  const auto b = static_cast<size_t>(occurrence_begin[token]);
  const auto e = static_cast<size_t>(occurrence_begin[token + 1]);
  return std::span<const int32_t>(occurrence_position).subspan(b, e - b);
}

namespace {

std::vector<std::span<const TokenId>> views(std::span<const Sample> samples) {
  std::vector<std::span<const TokenId>> v;
  v.reserve(samples.size());
  for (const Sample& s : samples) v.emplace_back(s.token_ids);
  return v;
}

// Fills occurrence_* from sample_tokens.
void build_occurrences(PackedSequence& seq) {
  const size_t t = seq.size();
  std::vector<int32_t> count(t + 1, 0);
  for (const auto& path : seq.sample_tokens) {
    for (int32_t i : path) ++count[static_cast<size_t>(i) + 1];
  }
  seq.occurrence_begin.assign(t + 1, 0);
  for (size_t i = 0; i < t; ++i)
    seq.occurrence_begin[i + 1] = seq.occurrence_begin[i] + count[i + 1];
  seq.occurrence_sample.assign(static_cast<size_t>(seq.occurrence_begin[t]), 0);
  seq.occurrence_position.assign(static_cast<size_t>(seq.occurrence_begin[t]), 0);
  std::vector<int32_t> fill(seq.occurrence_begin.begin(), seq.occurrence_begin.end() - 1);
  for (size_t k = 0; k < seq.sample_tokens.size(); ++k) {
    const auto& path = seq.sample_tokens[k];
    for (size_t p = 0; p < path.size(); ++p) {
      const auto at = static_cast<size_t>(fill[static_cast<size_t>(path[p])]++);
      seq.occurrence_sample[at] = static_cast<int32_t>(k);
      seq.occurrence_position[at] = static_cast<int32_t>(p);
    }
  }
}

// Lays out one group of sequences as a depth-first tree.
PackedSequence build_tree(std::span<const std::span<const TokenId>> sequences,
                          const std::vector<size_t>& members) {
  TokenTrie trie;
  std::vector<int32_t> ends;
  std::vector<TokenOrigin> origins;
  for (size_t m : members) {
    origins.assign(sequences[m].size(), TokenOrigin{});
    ends.push_back(trie.insert(sequences[m], origins, static_cast<int32_t>(m)));
  }
  PackedSequence seq;
  std::vector<int32_t> packed_of(trie.size(), -1);
  // Pre-order, children in insertion order; subtree_end set when a node's subtree is done.
  struct Frame {
    int32_t node;
    int32_t next_child;
  };
  std::vector<Frame> stack = {{TokenTrie::kRoot, trie.node(TokenTrie::kRoot).first_child}};
  int32_t segment = -1;
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next_child < 0) {
      if (f.node != TokenTrie::kRoot) {
        seq.subtree_end[static_cast<size_t>(packed_of[static_cast<size_t>(f.node)])] =
            static_cast<int32_t>(seq.size());
      }
      stack.pop_back();
      continue;
    }
    const int32_t c = f.next_child;
    f.next_child = trie.node(c).next_sibling;
    const TokenTrie::Node& n = trie.node(c);
    if (n.parent == TokenTrie::kRoot) ++segment;
    packed_of[static_cast<size_t>(c)] = static_cast<int32_t>(seq.size());
    seq.token_ids.push_back(n.token);
    seq.position_ids.push_back(n.depth);
    seq.parent.push_back(n.parent == TokenTrie::kRoot ? -1
                                                      : packed_of[static_cast<size_t>(n.parent)]);
    seq.subtree_end.push_back(-1);
    seq.segment_ids.push_back(segment);
    stack.push_back({c, n.first_child});
  }
  for (size_t k = 0; k < members.size(); ++k) {
    seq.samples.push_back(static_cast<int32_t>(members[k]));
    std::vector<int32_t> path = trie.path(ends[k]);
    for (int32_t& n : path) n = packed_of[static_cast<size_t>(n)];
    seq.sample_tokens.push_back(std::move(path));
  }
  build_occurrences(seq);
  return seq;
}

size_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
      a.begin());
}

}  // namespace

std::vector<PackedSequence> pack_plain(std::span<const std::span<const TokenId>> sequences,
                                       size_t token_budget) {
  if (token_budget == 0) invalid_argument("pack_plain: token_budget must be positive");
  std::vector<size_t> order(sequences.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sequences[a].size() > sequences[b].size(); });
  std::vector<std::vector<size_t>> bins;
  std::vector<size_t> used;
  for (size_t i : order) {
    const size_t len = sequences[i].size();
    size_t b = 0;
    while (b < bins.size() && used[b] + len > token_budget) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      used.push_back(0);
    }
    bins[b].push_back(i);
    used[b] += len;
  }
  std::vector<PackedSequence> out;
  for (std::vector<size_t>& bin : bins) {
    std::sort(bin.begin(), bin.end());
    PackedSequence seq;
    int32_t segment = 0;
    for (size_t i : bin) {
      const auto begin = static_cast<int32_t>(seq.size());
      const auto end = begin + static_cast<int32_t>(sequences[i].size());
      std::vector<int32_t> path;
      for (size_t p = 0; p < sequences[i].size(); ++p) {
        const auto at = static_cast<int32_t>(seq.size());
        seq.token_ids.push_back(sequences[i][p]);
        seq.position_ids.push_back(static_cast<int32_t>(p));
        seq.parent.push_back(p == 0 ? -1 : at - 1);
        seq.subtree_end.push_back(end);
        seq.segment_ids.push_back(segment);
        path.push_back(at);
      }
      seq.samples.push_back(static_cast<int32_t>(i));
      seq.sample_tokens.push_back(std::move(path));
      ++segment;
    }
    seq.over_budget = seq.size() > token_budget;
    build_occurrences(seq);
    out.push_back(std::move(seq));
  }
  return out;
}

std::vector<PackedSequence> pack_tree(std::span<const std::span<const TokenId>> sequences,
                                      size_t token_budget, bool beyond_shared_prefix) {
  if (token_budget == 0) invalid_argument("pack_tree: token_budget must be positive");
  std::vector<size_t> order(sequences.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::lexicographical_compare(sequences[a].begin(), sequences[a].end(),
                                        sequences[b].begin(), sequences[b].end());
  });
  std::vector<PackedSequence> out;
  std::vector<size_t> members;
  size_t distinct = 0;
  size_t common =
      0;  // tokens every member shares (in sorted order: the minimum of neighbours' prefixes)
  auto close = [&] {
    std::sort(members.begin(), members.end());
    out.push_back(build_tree(sequences, members));
    out.back().shared_prefix = common;
    members.clear();
    distinct = 0;
    common = 0;
  };
  for (size_t k = 0; k < order.size(); ++k) {
    const std::span<const TokenId> s = sequences[order[k]];
    // In sorted order the longest prefix shared with any earlier member is the one shared with the
    // previous member.
    const size_t shared = members.empty() ? 0 : common_prefix(sequences[members.back()], s);
    const size_t cost = s.size() - shared;
    // The budget bounds the tokens beyond the prefix all members share: a group whose shared prompt
    // is longer than the budget still packs as one tree, so that prompt is computed once, not per
    // sample.
    const size_t common_after = !beyond_shared_prefix ? 0
                                : members.empty()     ? s.size()
                                                      : std::min(common, shared);
    if (!members.empty() && distinct + cost - common_after > token_budget) close();
    common = members.empty() ? s.size() : std::min(common, shared);
    distinct += members.empty() ? s.size() : cost;
    members.push_back(order[k]);
  }
  if (!members.empty()) close();
  return out;
}

void check_packable(std::span<const Sample> samples) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!samples[i].loss_mask.empty() && samples[i].loss_mask.front() != 0) {
      invalid_argument("sample " + std::to_string(i) + " of episode " + samples[i].episode_uuid +
                       " has loss mask 1 on its first token, which nothing predicts");
    }
  }
}

std::vector<PackedSequence> pack_plain(std::span<const Sample> samples, size_t token_budget) {
  check_packable(samples);
  auto v = views(samples);
  return pack_plain(std::span<const std::span<const TokenId>>(v), token_budget);
}

std::vector<PackedSequence> pack_tree(std::span<const Sample> samples, size_t token_budget) {
  check_packable(samples);
  auto v = views(samples);
  return pack_tree(std::span<const std::span<const TokenId>>(v), token_budget);
}

bool may_attend(const PackedSequence& seq, size_t query, size_t key) {
  return key <= query && static_cast<int32_t>(query) < seq.subtree_end[key];
}

std::vector<uint8_t> dense_attention_mask(const PackedSequence& seq) {
  const size_t t = seq.size();
  std::vector<uint8_t> mask(t * t, 0);
  // Column j is allowed for rows [j, subtree_end[j]).
  for (size_t j = 0; j < t; ++j) {
    for (auto i = static_cast<int32_t>(j); i < seq.subtree_end[j]; ++i)
      mask[static_cast<size_t>(i) * t + j] = 1;
  }
  return mask;
}

std::vector<TokenId> unpack(const PackedSequence& seq, size_t k) {
  std::vector<TokenId> out;
  out.reserve(seq.sample_tokens[k].size());
  for (int32_t i : seq.sample_tokens[k]) out.push_back(seq.token_ids[static_cast<size_t>(i)]);
  return out;
}

std::vector<double> aggregate(const PackedSequence& seq, std::span<const Sample> samples,
                              std::span<const double> per_sample) {
  std::vector<double> out(seq.size(), 0.0);
  for (size_t i = 0; i < seq.size(); ++i) {
    auto ks = seq.occurrence_samples(i);
    auto ps = seq.occurrence_positions(i);
    for (size_t o = 0; o < ks.size(); ++o) {
      const auto input = static_cast<size_t>(seq.samples[static_cast<size_t>(ks[o])]);
      out[i] += samples[input].loss_mask[static_cast<size_t>(ps[o])] * per_sample[input];
    }
  }
  return out;
}

size_t packed_tokens(std::span<const PackedSequence> seqs) {
  size_t n = 0;
  for (const PackedSequence& s : seqs) n += s.size();
  return n;
}

}  // namespace ajet::tracking
