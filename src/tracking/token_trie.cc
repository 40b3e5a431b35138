#include "tracking/token_trie.h"

#include <algorithm>

#include "common/error.h"

namespace ajet::tracking {

TokenTrie::TokenTrie() { nodes_.push_back(Node{}); }

int32_t TokenTrie::child(int32_t parent, TokenId token) const {
  for (int32_t c = nodes_[static_cast<size_t>(parent)].first_child; c >= 0;
       c = nodes_[static_cast<size_t>(c)].next_sibling) {
    if (nodes_[static_cast<size_t>(c)].token == token) return c;
  }
  return -1;
}

int32_t TokenTrie::insert(std::span<const TokenId> ids, std::span<const TokenOrigin> origins,
                          int32_t stream) {
  if (ids.size() != origins.size()) {
    fail(ErrorCode::kInternal, "TokenTrie::insert: " + std::to_string(ids.size()) + " ids but " +
                                   std::to_string(origins.size()) + " origins");
  }
  int32_t at = kRoot;
  size_t i = 0;
  // Walk the shared prefix.
  for (; i < ids.size(); ++i) {
    const int32_t c = child(at, ids[i]);
    if (c < 0) break;
    Node& n = nodes_[static_cast<size_t>(c)];
    if (origins[i].generated()) {
      if (!n.generation.generated()) n.generation = origins[i];
      ++n.generated_count;
    }
    at = c;
  }
  // Grow the new suffix.
  for (; i < ids.size(); ++i) {
    Node n;
    n.token = ids[i];
    n.parent = at;
    n.depth = static_cast<int32_t>(i);
    n.first_stream = stream;
    if (origins[i].generated()) {
      n.generation = origins[i];
      n.generated_count = 1;
    }
    const auto idx = static_cast<int32_t>(nodes_.size());
    nodes_.push_back(n);
    Node& p = nodes_[static_cast<size_t>(at)];
    if (p.last_child < 0) {
      p.first_child = idx;
    } else {
      nodes_[static_cast<size_t>(p.last_child)].next_sibling = idx;
    }
    p.last_child = idx;
    at = idx;
  }
  return at;
}

std::vector<int32_t> TokenTrie::leaves(const std::vector<uint8_t>* alive) const {
  auto live = [&](int32_t n) { return alive == nullptr || (*alive)[static_cast<size_t>(n)] != 0; };
  std::vector<int32_t> out;
  std::vector<int32_t> stack;
  // Push live children in reverse so the first-inserted child is visited first; false if none.
  auto push_children = [&](int32_t n) {
    const size_t mark = stack.size();
    for (int32_t c = nodes_[static_cast<size_t>(n)].first_child; c >= 0;
         c = nodes_[static_cast<size_t>(c)].next_sibling) {
      if (live(c)) stack.push_back(c);
    }
    std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(mark), stack.end());
    return stack.size() > mark;
  };
  push_children(kRoot);
  while (!stack.empty()) {
    const int32_t n = stack.back();
    stack.pop_back();
    if (!push_children(n)) out.push_back(n);
  }
  return out;
}

std::vector<uint8_t> TokenTrie::generated_closure() const {
  std::vector<uint8_t> alive(nodes_.size(), 0);
  alive[kRoot] = 1;
  // A child is always created after its parent, so one backward sweep propagates to ancestors.
  for (size_t n = nodes_.size(); n-- > 1;) {
    if (nodes_[n].generation.generated()) alive[n] = 1;
    if (alive[n]) alive[static_cast<size_t>(nodes_[n].parent)] = 1;
  }
  return alive;
}

std::vector<int32_t> TokenTrie::path(int32_t node) const {
  std::vector<int32_t> out;
  if (node <= kRoot) return out;
  out.resize(static_cast<size_t>(nodes_[static_cast<size_t>(node)].depth) + 1);
  for (int32_t n = node; n > kRoot; n = nodes_[static_cast<size_t>(n)].parent) {
    out[static_cast<size_t>(nodes_[static_cast<size_t>(n)].depth)] = n;
  }
  return out;
}

}  // namespace ajet::tracking
