#include "rpc/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace ajet::rpc {
namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// The whole file behind an open descriptor (a token file is small; more than a few KiB is refused
// by check_token anyway, so reading stops a little past the limit).
std::string read_fd(int fd, const std::string& where) {
  std::string text;
  char buf[4096];
  while (text.size() <= kMaxTokenBytes + 64) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorCode::kIo, where + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace

std::string check_token(std::string token, std::string_view source) {
  const std::string where = "engine token from " + std::string(source);
  if (token.empty()) invalid_argument(where + " is empty; " + kTokenHowTo);
  if (token.size() > kMaxTokenBytes) {
    invalid_argument(where + " is " + std::to_string(token.size()) + " bytes, the limit is " +
                     std::to_string(kMaxTokenBytes));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      invalid_argument(where +
                       " holds a byte that is not printable ASCII (spaces and raw random bytes "
                       "included): encode it, e.g. `head -c 32 /dev/urandom | base64`");
    }
  }
  return token;
}

std::string read_token_file(const std::filesystem::path& path) {
  const std::string where = "engine token file " + path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorCode::kNotFound, where + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  std::string text;
  try {
    // fstat on the open file: the mode checked is the mode of the file read.
    if (::fstat(fd, &st) != 0)
      fail(ErrorCode::kIo, where + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(ErrorCode::kInvalidArgument, where + ": not a regular file");
    if ((st.st_mode & 077) != 0) {
      fail(ErrorCode::kPermissionDenied,
           where + " has mode " + octal_mode(st.st_mode) +
               ": it must not be accessible by group or others (like an ssh private key); run "
               "`chmod 600 " +
               path.string() + "`");
    }
    text = read_fd(fd, where);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t')) {
    text.pop_back();
  }
  return check_token(std::move(text), path.string());
}

std::string resolve_token(const std::string& token_file) {
  if (!token_file.empty()) return read_token_file(token_file);
  const char* env = std::getenv(kTokenEnv);
  if (env == nullptr || *env == '\0') return "";
  return check_token(env, kTokenEnv);
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(std::string(host), ec);
  return !ec && address.is_loopback();
}

void check_listen_auth(const Address& address, bool has_token, bool insecure_no_token) {
  if (address.kind != Address::Kind::kTcp || has_token) return;
  const std::string where = "engine RPC server at " + to_string(address);
  if (!insecure_no_token) {
    fail(ErrorCode::kFailedPrecondition,
         where +
             ": refusing to listen on TCP without a shared secret (anyone who can reach the port "
             "could generate, train, load weights or stop the engine); " +
             kTokenHowTo + ". On a loopback address --insecure-no-token skips this check");
  }
  if (!is_loopback_host(address.host)) {
    fail(ErrorCode::kFailedPrecondition,
         where +
             ": --insecure-no-token is only accepted on a loopback address (127.0.0.1, ::1, "
             "localhost); another host needs a token: " +
             kTokenHowTo);
  }
}

}  // namespace ajet::rpc
