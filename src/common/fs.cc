#include "common/fs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace ajet {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(ErrorCode::kIo, path.string() + ": cannot open (" + std::strerror(errno) + ")");
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) {
    fail(ErrorCode::kIo, path.string() + ": read failed");
  }
  return out.str();
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  std::filesystem::path tmp = path;
  tmp += ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      fail(ErrorCode::kIo, tmp.string() + ": cannot create (" + std::strerror(errno) + ")");
    }
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      fail(ErrorCode::kIo, tmp.string() + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    fail(ErrorCode::kIo, path.string() + ": rename failed (" + ec.message() + ")");
  }
}

std::filesystem::path temp_sibling(const std::filesystem::path& dir, const std::string& tag) {
  const std::filesystem::path parent =
      dir.parent_path().empty() ? std::filesystem::path(".") : dir.parent_path();
  std::string name = ".";  // appended piecewise: GCC 12 warns (-Wrestrict) on "literal" + string&&
  name.append(dir.filename().string())
      .append(".")
      .append(tag)
      .append("-")
      .append(std::to_string(::getpid()));
  return parent / name;
}

void publish_dir(const std::filesystem::path& tmp, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path old = temp_sibling(dir, "old");
  const bool replacing = fs::exists(dir);
  if (replacing) {
    fs::remove_all(old, ec);
    fs::rename(dir, old, ec);
    if (ec)
      fail(ErrorCode::kIo,
           dir.string() + ": cannot move the existing directory aside (" + ec.message() + ")");
  }
  fs::rename(tmp, dir, ec);
  if (ec) {
    std::error_code ignored;
    if (replacing) fs::rename(old, dir, ignored);
    fail(ErrorCode::kIo,
         dir.string() + ": cannot rename " + tmp.string() + " into place (" + ec.message() + ")");
  }
  if (replacing) fs::remove_all(old, ec);
}

}  // namespace ajet
