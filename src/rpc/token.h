// The engine RPC's shared secret: where it comes from (a token file or AJET_ENGINE_TOKEN), what a
// valid one looks like, and the rule that a TCP listener needs one. The handshake that carries it
// is in server.cc and client.cc; docs/engine-rpc.md describes it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "rpc/address.h"

namespace ajet::rpc {

// The variable both sides read when no token file is given; empty or unset means no token.
inline constexpr const char* kTokenEnv = "AJET_ENGINE_TOKEN";
// A token's length limit: it travels in the first frame, which is capped at a few KiB.
inline constexpr size_t kMaxTokenBytes = 1024;
// How to make a token; part of every message that asks for one.
inline constexpr const char* kTokenHowTo =
    "make one with `head -c 32 /dev/urandom | base64 > engine.token; chmod 600 engine.token` and "
    "pass --token-file engine.token (or set AJET_ENGINE_TOKEN)";

// Checks a token: 1 to kMaxTokenBytes printable ASCII characters, no spaces (base64, hex and the
// like; raw random bytes are refused because the frame header is JSON text). Returns it; throws
// Error(kInvalidArgument) naming `source` and the problem, never the token itself.
std::string check_token(std::string token, std::string_view source);

// Reads a token file: trailing whitespace (the newline of `base64 > file`) is dropped. Refuses,
// like ssh does for a private key, a file that group or others may read or write
// (kPermissionDenied, with the chmod that fixes it), and one that is not a regular file.
std::string read_token_file(const std::filesystem::path& path);

// The token a command uses: the file's when `token_file` is given, else AJET_ENGINE_TOKEN's when
// set and non-empty, else "" (no token).
std::string resolve_token(const std::string& token_file);

// Whether `host` (as in tcp:HOST:PORT) is a loopback name or address: localhost, 127.0.0.0/8, ::1.
bool is_loopback_host(std::string_view host);

// The listening rule: a TCP address needs a token unless `insecure_no_token` is given, which is
// only accepted for a loopback host. Unix sockets (mode 0600) need none. Throws
// Error(kFailedPrecondition) explaining how to make a token.
void check_listen_auth(const Address& address, bool has_token, bool insecure_no_token);

}  // namespace ajet::rpc
