#include "swarm/code_archive.h"

#include <sys/stat.h>

#include <cstring>

#include "common/error.h"
#include "common/fs.h"
#include "swarm/subprocess.h"

namespace ajet::swarm {

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr size_t kEocdSize = 22;
constexpr size_t kCentralSize = 46;

uint16_t u16(std::string_view s, size_t at) {
  return uint16_t(uint8_t(s[at])) | uint16_t(uint8_t(s[at + 1])) << 8;
}
uint32_t u32(std::string_view s, size_t at) { return uint32_t(u16(s, at)) | uint32_t(u16(s, at + 2)) << 16; }

[[noreturn]] void bad(const std::string& message) { invalid_argument("sync_train_code: " + message); }

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
  if (name.find('\0') != std::string_view::npos) bad("member " + shown + " has a NUL byte in its name");
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

}  // namespace

std::vector<ZipEntry> inspect_zip(std::string_view zip, const ArchiveLimits& limits) {
  if (zip.size() < kEocdSize) bad("the body is not a zip archive (" + std::to_string(zip.size()) + " bytes)");
  // The end-of-central-directory record sits in the last 22 + 65535 (comment) bytes.
  size_t eocd = std::string_view::npos;
  size_t lowest = zip.size() > kEocdSize + 65535 ? zip.size() - kEocdSize - 65535 : 0;
  for (size_t i = zip.size() - kEocdSize + 1; i-- > lowest;) {
    if (u32(zip, i) == kEndOfCentralDir) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string_view::npos) bad("the body is not a zip archive (no end-of-central-directory record)");
  const uint16_t disk = u16(zip, eocd + 4), cd_disk = u16(zip, eocd + 6);
  const uint16_t count = u16(zip, eocd + 10);
  const uint32_t cd_size = u32(zip, eocd + 12), cd_offset = u32(zip, eocd + 16);
  if (disk != 0 || cd_disk != 0) bad("multi-part archives are not supported");
  if (count == 0xFFFF || cd_offset == 0xFFFFFFFF || cd_size == 0xFFFFFFFF) bad("zip64 archives are not supported");
  if (count > limits.max_entries) {
    fail(ErrorCode::kResourceExhausted, "sync_train_code: the archive has " + std::to_string(count) +
                                            " members; the limit is " + std::to_string(limits.max_entries));
  }
  if (uint64_t(cd_offset) + cd_size > eocd) bad("the central directory lies outside the archive");

  std::vector<ZipEntry> entries;
  uint64_t total = 0;
  size_t at = cd_offset;
  for (uint16_t i = 0; i < count; ++i) {
    if (at + kCentralSize > eocd || u32(zip, at) != kCentralHeader) bad("central directory entry " + std::to_string(i) + " is corrupt");
    const uint16_t made_by = u16(zip, at + 4), flags = u16(zip, at + 8), method = u16(zip, at + 10);
    const uint32_t size = u32(zip, at + 24);
    const uint16_t name_len = u16(zip, at + 28), extra_len = u16(zip, at + 30), comment_len = u16(zip, at + 32);
    const uint32_t external = u32(zip, at + 38);
    if (at + kCentralSize + name_len + extra_len + comment_len > eocd) bad("central directory entry " + std::to_string(i) + " is truncated");
    std::string name(zip.substr(at + kCentralSize, name_len));
    at += kCentralSize + name_len + extra_len + comment_len;
    check_name(name);
    const std::string shown = shown_name(name);
    if (flags & 0x1) bad("member " + shown + " is encrypted");
    if (method != 0 && method != 8) bad("member " + shown + " uses compression method " + std::to_string(method) + " (only store and deflate)");
    if (size == 0xFFFFFFFF) bad("member " + shown + " needs zip64 sizes, which are not supported");
    const bool is_dir = name.back() == '/';
    if ((made_by >> 8) == 3) {  // Unix: the high 16 bits of the external attributes are st_mode
      const uint32_t type = (external >> 16) & S_IFMT;
      if (type == S_IFLNK) bad("member " + shown + " is a symbolic link; links are not allowed");
      if (type != 0 && type != S_IFREG && type != S_IFDIR) bad("member " + shown + " is not a regular file or directory");
    }
    if (size > limits.max_file_bytes) {
      fail(ErrorCode::kResourceExhausted, "sync_train_code: member " + shown + " unpacks to " + std::to_string(size) +
                                              " bytes; the limit per file is " + std::to_string(limits.max_file_bytes));
    }
    total += size;
    if (total > limits.max_total_bytes) {
      fail(ErrorCode::kResourceExhausted, "sync_train_code: the archive unpacks to more than " +
                                              std::to_string(limits.max_total_bytes) + " bytes (the limit)");
    }
    entries.push_back(ZipEntry{std::move(name), size, is_dir});
  }
  return entries;
}

UnpackedTree unpack_source_zip(std::string_view archive, const fs::path& dest, const ArchiveLimits& limits) {
  std::vector<ZipEntry> entries = inspect_zip(archive, limits);
  if (fs::exists(dest)) fail(ErrorCode::kFailedPrecondition, "sync_train_code: " + dest.string() + " already exists");
  fs::create_directories(dest);
  struct Cleanup {
    fs::path dir;
    bool keep = false;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) fs::remove_all(dir, ec);
    }
  } cleanup{dest};

  const fs::path zip_path = dest.string() + ".zip";
  write_file_atomic(zip_path, archive);
  const fs::path tree = dest / "tree";
  fs::create_directories(tree);
  // ulimit -f bounds every file unzip writes (in 512-byte blocks) even if a member lies about its size.
  const uint64_t blocks = limits.max_file_bytes / 512 + 1;
  SpawnOptions opts;
  opts.argv = {"/bin/sh", "-c", "ulimit -f " + std::to_string(blocks) + " && exec unzip -qq -o \"$0\" -d \"$1\"",
               zip_path.string(), tree.string()};
  CommandResult r = run_command(opts);
  std::error_code ec;
  fs::remove(zip_path, ec);
  if (!exited_cleanly(r.status)) {
    bad("unzip failed (" + describe_exit(r.status) + "): " + r.output.substr(0, 2000));
  }

  UnpackedTree out;
  out.dir = dest;
  uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(tree); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_symlink()) bad("the unpacked tree holds a link: " + it->path().string());
    if (it->is_regular_file()) {
      total += it->file_size();
      out.files += 1;
    }
  }
  if (total > limits.max_total_bytes) {
    fail(ErrorCode::kResourceExhausted, "sync_train_code: the archive unpacked to more than " +
                                            std::to_string(limits.max_total_bytes) + " bytes (the limit)");
  }
  out.bytes = total;
  // The source root: the tree itself, or a single top-level directory (git archive --prefix=x/).
  out.root = tree;
  if (!fs::exists(tree / "CMakeLists.txt")) {
    std::vector<fs::path> tops;
    for (const auto& e : fs::directory_iterator(tree)) tops.push_back(e.path());
    if (tops.size() == 1 && fs::is_directory(tops[0]) && fs::exists(tops[0] / "CMakeLists.txt")) {
      out.root = tops[0];
    } else {
      bad("the archive has no CMakeLists.txt at its root (expected a source tree of this project, e.g. from "
          "`git archive --format=zip HEAD`)");
    }
  }
  (void)entries;
  cleanup.keep = true;
  return out;
}

}  // namespace ajet::swarm
