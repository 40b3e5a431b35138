#include "text/added_tokens.h"

#include <utf8proc.h>

#include <cctype>

#include "text/utf8.h"

namespace ajet::text {

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

namespace {

// Rust's char::is_alphanumeric (approximated by the general category) or '_': HF's "word" test
// for single_word tokens.
bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) != 0;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

// The code point that ends just before byte `pos` (text is valid UTF-8, pos on a boundary).
char32_t char_before(std::string_view text, size_t pos, size_t& start) {
  start = pos - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::decode(text, start).cp;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens) {
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    int32_t node = 0;
    for (char c : t->content) {
      auto b = static_cast<uint8_t>(c);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(b, next);
        nodes_.emplace_back();
      }
      node = next;
    }
    nodes_[node].token = t;  // a later duplicate wins, like HF's map insertion
    first_byte_[static_cast<uint8_t>(t->content[0])] = true;
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : nodes_[node].children) {
    if (b == byte) return next;
  }
  return -1;
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, size_t from,
                                                                bool allow_special) const {
  if (empty()) return std::nullopt;
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    // Only start at character boundaries (added tokens are whole characters).
    if ((static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) continue;
    int32_t node = 0;
    const AddedToken* best = nullptr;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const AddedToken* t = nodes_[node].token;
      if (t != nullptr && (allow_special || !t->special)) {
        best = t;
        best_end = i + 1;
      }
    }
    if (best == nullptr) continue;
    if (best->single_word) {
      size_t s = 0;
      bool word_before = pos > 0 && is_word_char(char_before(text, pos, s));
      bool word_after = best_end < text.size() && is_word_char(utf8::decode(text, best_end).cp);
      if (word_before || word_after) continue;
    }
    Match m{pos, best_end, best};
    if (best->lstrip) {
      while (m.begin > from) {
        size_t s = 0;
        char32_t cp = char_before(text, m.begin, s);
        if (!is_unicode_whitespace(cp)) break;
        m.begin = s;
      }
    }
    if (best->rstrip) {
      while (m.end < text.size()) {
        utf8::Decoded d = utf8::decode(text, m.end);
        if (d.len == 0 || !is_unicode_whitespace(d.cp)) break;
        m.end += d.len;
      }
    }
    return m;
  }
  return std::nullopt;
}

}  // namespace ajet::text
