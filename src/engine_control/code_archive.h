// sync_train_code's archive handling: a zip of a source tree is checked entry by entry from its
// central directory (no absolute paths, no `..`, no links or device files, no encryption, size and
// count limits) BEFORE anything touches the disk, then unpacked member by member into a fresh
// directory (store and deflate, through zlib). Sizes in a zip are claims: every member is counted
// as it is written and stops at the size its header declares, so the limits hold for what lands on
// disk, and its CRC-32 is checked. It never writes outside that directory and never over an
// existing one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::engine_control {

struct ArchiveLimits {
  uint64_t max_total_bytes = 512ull << 20;  // sum of uncompressed sizes
  uint64_t max_file_bytes = 64ull << 20;    // one member, uncompressed
  size_t max_entries = 20000;
};

struct ZipEntry {
  std::string name;   // as stored ("src/a.cc", "apps/")
  uint64_t size = 0;  // uncompressed bytes, as declared
  bool is_dir = false;
  // Where and how the data is stored (from the central directory).
  uint16_t method = 0;  // 0 store, 8 deflate
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t local_header_offset = 0;
  bool executable = false;  // a Unix mode with an x bit
};

// Reads and validates the central directory. Throws Error(kInvalidArgument) naming the offending
// entry (unsafe path, link, unsupported method/encryption, not a zip) or Error(kResourceExhausted)
// naming the limit that was exceeded.
std::vector<ZipEntry> inspect_zip(std::string_view archive, const ArchiveLimits& limits = {});

struct UnpackedTree {
  std::filesystem::path dir;   // the fresh directory everything went into
  std::filesystem::path root;  // the source root: `dir`, or its single top-level directory
  size_t files = 0;
  uint64_t bytes = 0;
};

// inspect_zip, then unpacks into `dest` (created; must not exist yet). The source root must hold a
// CMakeLists.txt. A member that inflates past its declared size, or whose data or CRC does not
// match its header, is Error(kInvalidArgument) naming it. `dest` is removed again on any failure.
UnpackedTree unpack_source_zip(std::string_view archive, const std::filesystem::path& dest,
                               const ArchiveLimits& limits = {});

}  // namespace ajet::engine_control
