// Added tokens (special and not) are cut out of the text before normalization and BPE, by
// leftmost-longest matching over a byte trie, honouring HF's lstrip / rstrip / single_word flags.
// Holds pointers into the tokenizer's token list; never owns tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin;  // includes whitespace taken by lstrip
    size_t end;    // includes whitespace taken by rstrip
    const AddedToken* token;
  };

  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<const AddedToken*>& tokens);

  bool empty() const { return nodes_.size() <= 1; }
  // The leftmost match starting at or after `from` (the longest one there); special tokens are
  // only matched when `allow_special`. lstrip never reaches before `from`.
  std::optional<Match> find(std::string_view text, size_t from, bool allow_special) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // few per node: linear search
    const AddedToken* token = nullptr;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

// Unicode White_Space (Rust's char::is_whitespace, used by HF for lstrip / rstrip).
bool is_unicode_whitespace(char32_t cp);

}  // namespace ajet::text
