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

}  // namespace ajet
