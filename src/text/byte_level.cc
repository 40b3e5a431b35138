#include "text/byte_level.h"

#include "text/utf8.h"

namespace ajet::text::byte_level {

namespace {

// The highest code point in the alphabet is U+0100 + 67 = U+0143.
constexpr char32_t kMaxChar = 0x143;

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, kMaxChar + 1> to_byte{};
  std::array<uint8_t, 256> order{};

  Tables() {
    to_byte.fill(-1);
    int n = 0;
    auto printable = [](int b) {
      return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    };
    int k = 0;
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) {
        to_char[b] = static_cast<char32_t>(b);
        order[k++] = static_cast<uint8_t>(b);
      }
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable(b)) {
        to_char[b] = static_cast<char32_t>(256 + n++);
        order[k++] = static_cast<uint8_t>(b);
      }
    }
    for (int b = 0; b < 256; ++b) {
      utf8::append(to_utf8[b], to_char[b]);
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().to_char[b]; }

const std::string& byte_to_utf8(uint8_t b) { return tables().to_utf8[b]; }

std::optional<uint8_t> char_to_byte(char32_t cp) {
  if (cp > kMaxChar) return std::nullopt;
  int16_t b = tables().to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

const std::array<uint8_t, 256>& alphabet_order() { return tables().order; }

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_utf8[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> decode_strict(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    utf8::Decoded d = utf8::decode(piece, i);
    if (d.len == 0) return std::nullopt;
    auto b = char_to_byte(d.cp);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    i += d.len;
  }
  return out;
}

std::string decode(std::string_view piece) {
  if (auto bytes = decode_strict(piece)) return *bytes;
  return std::string(piece);
}

}  // namespace ajet::text::byte_level
