#include "engine_control/code_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include "common/error.h"
#include "common/fs.h"

namespace ajet::engine_control {

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr size_t kEocdSize = 22;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;

uint16_t u16(std::string_view s, size_t at) {
  return uint16_t(uint8_t(s[at])) | uint16_t(uint8_t(s[at + 1])) << 8;
}
uint32_t u32(std::string_view s, size_t at) {
  return uint32_t(u16(s, at)) | uint32_t(u16(s, at + 2)) << 16;
}

[[noreturn]] void bad(const std::string& message) {
  invalid_argument("sync_train_code: " + message);
}

// 'name' with control characters shown as '?', for messages.
std::string shown_name(std::string_view name) {
  std::string out;
  out.reserve(name.size() + 2);
  out.push_back('\'');
  for (char c : name) out.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  out.push_back('\'');
  return out;
}

void check_name(std::string_view name) {
  const std::string shown = shown_name(name);
  if (name.empty()) bad("an archive member has an empty name");
  if (name.find('\0') != std::string_view::npos)
    bad("member " + shown + " has a NUL byte in its name");
  if (name.find('\\') != std::string_view::npos) bad("member " + shown + " uses '\\' in its path");
  if (name.front() == '/') bad("member " + shown + " has an absolute path");
  if (name.size() >= 2 && name[1] == ':') bad("member " + shown + " has a drive-letter path");
  size_t pos = 0;
  while (pos <= name.size()) {
    size_t end = name.find('/', pos);
    if (end == std::string_view::npos) end = name.size();
    std::string_view part = name.substr(pos, end - pos);
    if (part == "..") bad("member " + shown + " leaves the archive's directory ('..')");
    pos = end + 1;
  }
}

// The member's data as stored: after its local header, whose name and extra field may differ in
// length from the central directory's.
std::string_view member_data(std::string_view zip, const ZipEntry& entry) {
  const std::string shown = shown_name(entry.name);
  const uint64_t at = entry.local_header_offset;
  if (u32(zip, at) != kLocalHeader)
    bad("member " + shown + " has no local header where the directory says");
  const uint64_t begin = at + kLocalSize + u16(zip, at + 26) + u16(zip, at + 28);
  if (begin + entry.compressed_size > zip.size())
    bad("member " + shown + "'s data runs past the end of the archive");
  return zip.substr(begin, entry.compressed_size);
}

// Writes one member to `path` (a new file), counting the bytes as they come: data that inflates
// past the declared size stops there, so no member writes more than inspect_zip let through.
void write_member(std::string_view zip, const ZipEntry& entry, const fs::path& path) {
  const std::string shown = shown_name(entry.name);
  const std::string_view data = member_data(zip, entry);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        entry.executable ? 0755 : 0644);
  if (fd < 0) bad("cannot create " + shown + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  uint64_t written = 0;
  uint32_t crc = ::crc32(0L, Z_NULL, 0);
  auto sink = [&](const unsigned char* bytes, size_t n) {
    if (written + n > entry.size) {
      bad("member " + shown + " unpacks to more than the " + std::to_string(entry.size) +
          " bytes its header declares (a corrupt or hostile archive)");
    }
    crc = ::crc32(crc, bytes, uInt(n));
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd, bytes + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        fail(ErrorCode::kIo, "sync_train_code: writing " + shown + ": " + std::strerror(errno));
      done += size_t(w);
    }
    written += n;
  };
  if (entry.method == 0) {
    constexpr size_t kChunk = 1 << 20;
    for (size_t at = 0; at < data.size(); at += kChunk) {
      sink(reinterpret_cast<const unsigned char*>(data.data()) + at,
           std::min(kChunk, data.size() - at));
    }
  } else {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
      fail(ErrorCode::kInternal, "sync_train_code: zlib inflateInit2 failed");
    std::unique_ptr<z_stream, int (*)(z_streamp)> guard(&z, inflateEnd);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    z.avail_in = uInt(data.size());
    std::vector<unsigned char> buffer(256 << 10);
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      z.next_out = buffer.data();
      z.avail_out = uInt(buffer.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        bad("member " + shown + " is not valid deflate data" +
            (z.msg ? std::string(" (") + z.msg + ")" : std::string()));
      }
      const size_t produced = buffer.size() - z.avail_out;
      if (produced == 0 && rc == Z_OK && z.avail_in == 0)
        bad("member " + shown + "'s deflate data ends early");
      sink(buffer.data(), produced);
    }
  }
  if (written != entry.size) {
    bad("member " + shown + " unpacks to " + std::to_string(written) +
        " bytes, but its header declares " + std::to_string(entry.size));
  }
  if (crc != entry.crc32) bad("member " + shown + " fails its CRC-32 check (a corrupt archive)");
}

}  // namespace

std::vector<ZipEntry> inspect_zip(std::string_view zip, const ArchiveLimits& limits) {
  if (zip.size() < kEocdSize)
    bad("the body is not a zip archive (" + std::to_string(zip.size()) + " bytes)");
  // The end-of-central-directory record sits in the last 22 + 65535 (comment) bytes.
  size_t eocd = std::string_view::npos;
  size_t lowest = zip.size() > kEocdSize + 65535 ? zip.size() - kEocdSize - 65535 : 0;
  for (size_t i = zip.size() - kEocdSize + 1; i-- > lowest;) {
    if (u32(zip, i) == kEndOfCentralDir) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string_view::npos)
    bad("the body is not a zip archive (no end-of-central-directory record)");
  const uint16_t disk = u16(zip, eocd + 4), cd_disk = u16(zip, eocd + 6);
  const uint16_t count = u16(zip, eocd + 10);
  const uint32_t cd_size = u32(zip, eocd + 12), cd_offset = u32(zip, eocd + 16);
  if (disk != 0 || cd_disk != 0) bad("multi-part archives are not supported");
  if (count == 0xFFFF || cd_offset == 0xFFFFFFFF || cd_size == 0xFFFFFFFF)
    bad("zip64 archives are not supported");
  if (count > limits.max_entries) {
    fail(ErrorCode::kResourceExhausted, "sync_train_code: the archive has " +
                                            std::to_string(count) + " members; the limit is " +
                                            std::to_string(limits.max_entries));
  }
  if (uint64_t(cd_offset) + cd_size > eocd) bad("the central directory lies outside the archive");

  std::vector<ZipEntry> entries;
  uint64_t total = 0;
  size_t at = cd_offset;
  for (uint16_t i = 0; i < count; ++i) {
    if (at + kCentralSize > eocd || u32(zip, at) != kCentralHeader)
      bad("central directory entry " + std::to_string(i) + " is corrupt");
    const uint16_t made_by = u16(zip, at + 4), flags = u16(zip, at + 8), method = u16(zip, at + 10);
    const uint32_t crc = u32(zip, at + 16), compressed = u32(zip, at + 20),
                   size = u32(zip, at + 24);
    const uint32_t local_offset = u32(zip, at + 42);
    const uint16_t name_len = u16(zip, at + 28), extra_len = u16(zip, at + 30),
                   comment_len = u16(zip, at + 32);
    const uint32_t external = u32(zip, at + 38);
    if (at + kCentralSize + name_len + extra_len + comment_len > eocd)
      bad("central directory entry " + std::to_string(i) + " is truncated");
    std::string name(zip.substr(at + kCentralSize, name_len));
    at += kCentralSize + name_len + extra_len + comment_len;
    check_name(name);
    const std::string shown = shown_name(name);
    if (flags & 0x1) bad("member " + shown + " is encrypted");
    if (method != 0 && method != 8)
      bad("member " + shown + " uses compression method " + std::to_string(method) +
          " (only store and deflate)");
    if (size == 0xFFFFFFFF || compressed == 0xFFFFFFFF || local_offset == 0xFFFFFFFF) {
      bad("member " + shown + " needs zip64 sizes, which are not supported");
    }
    const bool is_dir = name.back() == '/';
    bool executable = false;
    if ((made_by >> 8) == 3) {  // Unix: the high 16 bits of the external attributes are st_mode
      executable = ((external >> 16) & 0111) != 0;
      const uint32_t type = (external >> 16) & S_IFMT;
      if (type == S_IFLNK) bad("member " + shown + " is a symbolic link; links are not allowed");
      if (type != 0 && type != S_IFREG && type != S_IFDIR)
        bad("member " + shown + " is not a regular file or directory");
    }
    if (size > limits.max_file_bytes) {
      fail(ErrorCode::kResourceExhausted,
           "sync_train_code: member " + shown + " unpacks to " + std::to_string(size) +
               " bytes; the limit per file is " + std::to_string(limits.max_file_bytes));
    }
    total += size;
    if (total > limits.max_total_bytes) {
      fail(ErrorCode::kResourceExhausted, "sync_train_code: the archive unpacks to more than " +
                                              std::to_string(limits.max_total_bytes) +
                                              " bytes (the limit)");
    }
    if (uint64_t(local_offset) + kLocalSize > cd_offset)
      bad("member " + shown + "'s data lies outside the archive");
    entries.push_back(
        ZipEntry{std::move(name), size, is_dir, method, crc, compressed, local_offset, executable});
  }
  return entries;
}

UnpackedTree unpack_source_zip(std::string_view archive, const fs::path& dest,
                               const ArchiveLimits& limits) {
  std::vector<ZipEntry> entries = inspect_zip(archive, limits);
  if (fs::exists(dest))
    fail(ErrorCode::kFailedPrecondition, "sync_train_code: " + dest.string() + " already exists");
  fs::create_directories(dest);
  struct Cleanup {
    fs::path dir;
    bool keep = false;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(dir, ec);
    }
  } cleanup{dest};

  const fs::path tree = dest / "tree";
  fs::create_directories(tree);
  UnpackedTree out;
  out.dir = dest;
  std::set<std::string_view> seen;
  for (const ZipEntry& entry : entries) {
    if (!seen.insert(entry.name).second) bad("member " + shown_name(entry.name) + " appears twice");
    const fs::path path = tree / entry.name;
    std::error_code ec;
    fs::create_directories(entry.is_dir ? path : path.parent_path(), ec);
    if (ec)
      bad("cannot create the directory for member " + shown_name(entry.name) + ": " + ec.message());
    if (entry.is_dir) continue;
    write_member(archive, entry, path);
    out.files += 1;
    out.bytes += entry.size;
  }
  // The source root: the tree itself, or a single top-level directory (git archive --prefix=x/).
  out.root = tree;
  if (!fs::exists(tree / "CMakeLists.txt")) {
    std::vector<fs::path> tops;
    for (const auto& e : fs::directory_iterator(tree)) tops.push_back(e.path());
    if (tops.size() == 1 && fs::is_directory(tops[0]) && fs::exists(tops[0] / "CMakeLists.txt")) {
      out.root = tops[0];
    } else {
      bad("the archive has no CMakeLists.txt at its root (expected a source tree of this project, "
          "e.g. from "
          "`git archive --format=zip HEAD`)");
    }
  }
  cleanup.keep = true;
  return out;
}

}  // namespace ajet::engine_control
