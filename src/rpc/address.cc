#include "rpc/address.h"

#include <charconv>

#include "common/error.h"

namespace ajet::rpc {
namespace {

constexpr size_t kMaxUnixPath = 107;  // sizeof(sockaddr_un::sun_path) - 1 on Linux

[[noreturn]] void bad_address(std::string_view text, const std::string& why) {
  invalid_argument("engine address '" + std::string(text) + "': " + why +
                   " (expected unix:/path/to.sock or tcp:HOST:PORT)");
}

}  // namespace

Address parse_address(std::string_view text) {
  Address a;
  if (text.starts_with("unix:")) {
    a.kind = Address::Kind::kUnix;
    a.path = std::string(text.substr(5));
    if (a.path.empty()) bad_address(text, "empty socket path");
    if (a.path.size() > kMaxUnixPath) {
      bad_address(text, "socket path is " + std::to_string(a.path.size()) +
                            " bytes, the limit is " + std::to_string(kMaxUnixPath));
    }
    if (a.path.find('\0') != std::string::npos)
      bad_address(text, "socket path contains a NUL byte");
    return a;
  }
  if (!text.starts_with("tcp:")) bad_address(text, "unknown scheme");
  a.kind = Address::Kind::kTcp;
  std::string_view rest = text.substr(4);
  std::string_view port;
  if (rest.starts_with("[")) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      bad_address(text, "IPv6 host must be written [ADDR]:PORT");
    }
    a.host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) bad_address(text, "missing ':PORT'");
    a.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
  }
  if (a.host.empty()) bad_address(text, "empty host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    bad_address(text, "port '" + std::string(port) + "' is not a number in 0-65535");
  }
  a.port = static_cast<uint16_t>(value);
  return a;
}

std::string to_string(const Address& address) {
  if (address.kind == Address::Kind::kUnix) return "unix:" + address.path;
  bool v6 = address.host.find(':') != std::string::npos;
  return "tcp:" + (v6 ? "[" + address.host + "]" : address.host) + ":" +
         std::to_string(address.port);
}

}  // namespace ajet::rpc
