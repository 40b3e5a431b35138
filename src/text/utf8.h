// UTF-8 helpers for the tokenizer: decode one code point, repair invalid bytes the way HF (Rust's
// from_utf8_lossy) and JS (TextDecoder) do, and find where a byte stream stops being complete.
// Never throws and never reads past the end of its input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ajet::text::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

struct Decoded {
  char32_t cp = 0;
  int len = 0;  // bytes consumed; 0 means the bytes at the position are not a valid character
};

// Decodes the code point starting at s[i] (i < s.size()).
Decoded decode(std::string_view s, size_t i);

void append(std::string& out, char32_t cp);

bool is_valid(std::string_view s);

// Replaces every maximal invalid subsequence with one U+FFFD (Unicode "substitution of maximal
// subparts", as Rust's String::from_utf8_lossy and the WHATWG TextDecoder do).
std::string repair(std::string_view s);

// Length of the longest prefix of `s` that does not end inside a character that could still be
// completed by more bytes. Invalid bytes count as complete (they will be repaired, not awaited).
size_t complete_prefix(std::string_view s);

}  // namespace ajet::text::utf8
