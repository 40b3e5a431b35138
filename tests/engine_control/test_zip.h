// Zip archives built in memory (store or deflate, CRC-32, Unix modes) for the sync_train_code
// tests: members with any name and any declared size, including the unsafe and lying ones the
// server must refuse. Test-only.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ajet::engine_control::testing {

inline uint32_t crc32(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

struct ZipMember {
  std::string name;
  std::string data;
  uint32_t unix_mode = 0100644;  // S_IFLNK (0120777) makes a symbolic link
  bool deflate = false;
  std::optional<uint32_t> declared_size =
      std::nullopt;  // what the headers claim; default: the true size
};

// Raw deflate (no zlib header), as zip stores it.
inline std::string deflate_raw(const std::string& data) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&z, uLong(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
  return out;
}

// A zip archive with the given members, as `zip` would write it.
inline std::string make_zip(const std::vector<ZipMember>& members) {
  auto u16 = [](std::string& s, uint16_t v) {
    s += char(v & 0xFF);
    s += char(v >> 8);
  };
  auto u32 = [&](std::string& s, uint32_t v) {
    u16(s, uint16_t(v & 0xFFFF));
    u16(s, uint16_t(v >> 16));
  };
  std::string out, central;
  for (const auto& m : members) {
    const std::string stored = m.deflate ? deflate_raw(m.data) : m.data;
    const uint16_t method = m.deflate ? 8 : 0;
    const uint32_t offset = uint32_t(out.size()), crc = crc32(m.data);
    const uint32_t size = m.declared_size.value_or(uint32_t(m.data.size())),
                   packed = uint32_t(stored.size());
    u32(out, 0x04034b50);
    u16(out, 20);
    u16(out, 0);
    u16(out, method);
    u16(out, 0);
    u16(out, 0x21);
    u32(out, crc);
    u32(out, packed);
    u32(out, size);
    u16(out, uint16_t(m.name.size()));
    u16(out, 0);
    out += m.name;
    out += stored;
    u32(central, 0x02014b50);
    u16(central, 0x0314);  // made by Unix, version 2.0
    u16(central, 20);
    u16(central, 0);
    u16(central, method);
    u16(central, 0);
    u16(central, 0x21);
    u32(central, crc);
    u32(central, packed);
    u32(central, size);
    u16(central, uint16_t(m.name.size()));
    u16(central, 0);
    u16(central, 0);
    u16(central, 0);
    u16(central, 0);
    u32(central, m.unix_mode << 16);
    u32(central, offset);
    central += m.name;
  }
  const uint32_t cd_offset = uint32_t(out.size());
  out += central;
  u32(out, 0x06054b50);
  u16(out, 0);
  u16(out, 0);
  u16(out, uint16_t(members.size()));
  u16(out, uint16_t(members.size()));
  u32(out, uint32_t(central.size()));
  u32(out, cd_offset);
  u16(out, 0);
  return out;
}

}  // namespace ajet::engine_control::testing
