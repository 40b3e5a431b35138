#include "store/blob.h"

#include <bit>
#include <cstring>

#include "common/error.h"
#include "common/json.h"

namespace ajet::store {

namespace {

void put_u32(std::string& out, uint32_t v) {
  char bytes[4] = {char(v & 0xff), char((v >> 8) & 0xff), char((v >> 16) & 0xff),
                   char((v >> 24) & 0xff)};
  out.append(bytes, 4);
}

uint32_t get_u32(const char* p) {
  return uint32_t(uint8_t(p[0])) | uint32_t(uint8_t(p[1])) << 8 | uint32_t(uint8_t(p[2])) << 16 |
         uint32_t(uint8_t(p[3])) << 24;
}

void check_size(std::string_view bytes, std::string_view what) {
  if (bytes.size() % 4 != 0) {
    fail(ErrorCode::kDataLoss, std::string(what) + ": blob of " + std::to_string(bytes.size()) +
                                   " bytes is not a whole number of 4-byte values");
  }
}

}  // namespace

std::string encode_i32(std::span<const int32_t> values) {
  std::string out;
  out.reserve(values.size() * 4);
  for (int32_t v : values) put_u32(out, static_cast<uint32_t>(v));
  return out;
}

std::string encode_f32(std::span<const float> values) {
  std::string out;
  out.reserve(values.size() * 4);
  for (float v : values) put_u32(out, std::bit_cast<uint32_t>(v));
  return out;
}

std::vector<int32_t> decode_i32(std::string_view bytes, std::string_view what) {
  check_size(bytes, what);
  std::vector<int32_t> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<int32_t>(get_u32(bytes.data() + 4 * i));
  return out;
}

std::vector<float> decode_f32(std::string_view bytes, std::string_view what) {
  check_size(bytes, what);
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = std::bit_cast<float>(get_u32(bytes.data() + 4 * i));
  return out;
}

Json parse_stored_json(std::string_view text, std::string_view what) {
  std::optional<Json> value = try_parse_json(text);
  if (!value) fail(ErrorCode::kDataLoss, std::string(what) + ": stored JSON is corrupt");
  return std::move(*value);
}

}  // namespace ajet::store
