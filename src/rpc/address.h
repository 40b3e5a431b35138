// Engine RPC addresses as they appear in configs and command lines: `unix:/path/to.sock` or
// `tcp:HOST:PORT` (`tcp:[::1]:7000` for IPv6). Parsing only; no sockets here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ajet::rpc {

struct Address {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string path;   // kUnix: socket file path (at most 107 bytes: the sockaddr_un limit)
  std::string host;   // kTcp: name or literal address, without brackets
  uint16_t port = 0;  // kTcp: 0 asks the server for an ephemeral port
};

// Throws Error(kInvalidArgument) naming the address and what is wrong with it.
Address parse_address(std::string_view text);
std::string to_string(const Address& address);

}  // namespace ajet::rpc
