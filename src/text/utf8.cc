#include "text/utf8.h"

#include <cstdint>

namespace ajet::text::utf8 {

namespace {

// For a lead byte: how many continuation bytes follow and the allowed range of the first one
// (Unicode Table 3-7, well-formed UTF-8 byte sequences). need == -1: not a lead byte.
struct Lead {
  int need;
  uint8_t lo;
  uint8_t hi;
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {0, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}

// Scans one sequence at s[i]. Returns the number of bytes that belong to it: a full character
// (valid = true), or the maximal invalid subpart (valid = false, at least 1 byte). `truncated` is
// set when the subpart is a valid prefix cut off by the end of the input.
size_t scan(std::string_view s, size_t i, bool& valid, bool& truncated) {
  auto b = static_cast<uint8_t>(s[i]);
  Lead lead = lead_of(b);
  valid = false;
  truncated = false;
  if (lead.need == 0) {
    valid = true;
    return 1;
  }
  if (lead.need < 0) return 1;
  size_t j = i + 1;
  for (int k = 0; k < lead.need; ++k, ++j) {
    if (j >= s.size()) {
      truncated = true;
      return j - i;
    }
    auto c = static_cast<uint8_t>(s[j]);
    uint8_t lo = k == 0 ? lead.lo : 0x80;
    uint8_t hi = k == 0 ? lead.hi : 0xBF;
    if (c < lo || c > hi) return j - i;
  }
  valid = true;
  return j - i;
}

}  // namespace

Decoded decode(std::string_view s, size_t i) {
  bool valid = false;
  bool truncated = false;
  size_t n = scan(s, i, valid, truncated);
  if (!valid) return {0, 0};
  auto b0 = static_cast<uint8_t>(s[i]);
  char32_t cp = 0;
  switch (n) {
    case 1: cp = b0; break;
    case 2: cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu); break;
    case 3:
      cp = ((b0 & 0x0Fu) << 12) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 6) |
           (static_cast<uint8_t>(s[i + 2]) & 0x3Fu);
      break;
    default:
      cp = ((b0 & 0x07u) << 18) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 12) |
           ((static_cast<uint8_t>(s[i + 2]) & 0x3Fu) << 6) |
           (static_cast<uint8_t>(s[i + 3]) & 0x3Fu);
      break;
  }
  return {cp, static_cast<int>(n)};
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool valid = false;
    bool truncated = false;
    size_t n = scan(s, i, valid, truncated);
    if (!valid) return false;
    i += n;
  }
  return true;
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    bool valid = false;
    bool truncated = false;
    size_t n = scan(s, i, valid, truncated);
    if (valid) {
      out.append(s.substr(i, n));
    } else {
      out.append(kReplacementUtf8);
    }
    i += n;
  }
  return out;
}

size_t complete_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    bool valid = false;
    bool truncated = false;
    size_t n = scan(s, i, valid, truncated);
    if (truncated) return i;
    i += n;
  }
  return s.size();
}

}  // namespace ajet::text::utf8
