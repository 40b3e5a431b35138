#include "text/token_classes.h"

#include <algorithm>
#include <array>

namespace ajet::text {

namespace {

enum : uint8_t { kNeutral = 0, kLatin = 1, kCjk = 2, kCyrillic = 3, kOther = 4, kGarbage = 5 };

// Decodes one UTF-8 character at bytes[i]; false when it is not a whole, valid one.
bool next_code_point(std::string_view bytes, size_t& i, uint32_t& cp) {
  const auto b0 = static_cast<unsigned char>(bytes[i]);
  size_t extra = 0;
  if (b0 < 0x80) {
    extra = 0;
  } else if ((b0 & 0xE0) == 0xC0) {
    extra = 1;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3;
  } else {
    return false;
  }
  if (i + extra >= bytes.size()) return false;
  cp = extra == 0 ? b0 : b0 & (0x3Fu >> extra);
  for (size_t k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(bytes[i + k]);
    if ((b >> 6) != 2) return false;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  i += extra + 1;
  return true;
}

uint8_t class_of(uint32_t cp) {
  if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7F ||
      (cp >= 0x80 && cp < 0xA0) || cp == 0xFFFD)
    return kGarbage;
  if ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') ||
      (cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7) || (cp >= 0x1E00 && cp <= 0x1EFF))
    return kLatin;
  if ((cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
      (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7AF) ||
      (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x1100 && cp <= 0x11FF) ||
      (cp >= 0x20000 && cp <= 0x2FFFF))
    return kCjk;
  if (cp >= 0x400 && cp <= 0x52F) return kCyrillic;
  // Letters of other scripts: Greek, Armenian, Hebrew, Arabic, Syriac, Thaana, Indic, Thai, Lao,
  // Tibetan, Georgian, Ethiopic.
  if ((cp >= 0x370 && cp <= 0x3FF) || (cp >= 0x530 && cp <= 0x8FF) ||
      (cp >= 0x900 && cp <= 0xDFF) || (cp >= 0xE00 && cp <= 0xFFF) ||
      (cp >= 0x10A0 && cp <= 0x10FF) || (cp >= 0x1200 && cp <= 0x139F))
    return kOther;
  return kNeutral;
}

}  // namespace

uint8_t classify_token_bytes(std::string_view bytes) {
  std::array<int, 6> counts{};
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cp = 0;
    if (!next_code_point(bytes, i, cp)) {
      ++i;  // a fragment of a character another token completes: no script
      continue;
    }
    ++counts[class_of(cp)];
  }
  if (counts[kGarbage] > 0) return kGarbage;
  uint8_t best = kNeutral;
  int most = 0;
  for (uint8_t c : {kLatin, kCjk, kCyrillic, kOther}) {
    if (counts[c] > most) {
      most = counts[c];
      best = c;
    }
  }
  return best;
}

std::vector<uint8_t> token_classes(const Tokenizer& tokenizer,
                                   const std::vector<TokenId>& allowed) {
  std::vector<uint8_t> out(tokenizer.vocab_size(), kNeutral);
  for (size_t id = 0; id < out.size(); ++id) {
    const auto t = static_cast<TokenId>(id);
    if (!tokenizer.valid_id(t)) continue;
    if (tokenizer.is_special(t)) {
      out[id] = std::find(allowed.begin(), allowed.end(), t) == allowed.end() ? kGarbage : kNeutral;
      continue;
    }
    out[id] = classify_token_bytes(tokenizer.token_bytes(t));
  }
  return out;
}

}  // namespace ajet::text
