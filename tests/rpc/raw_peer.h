// A raw POSIX peer of the engine RPC server, for sending bytes the real client would never send
// (garbage, oversize prefixes, frames out of order) and reading what the server answers.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rpc/address.h"
#include "rpc/frame.h"

namespace ajet::rpc::testing {

class RawPeer {
 public:
  explicit RawPeer(const std::string& address_text) {
    Address a = parse_address(address_text);
    if (a.kind == Address::Kind::kUnix) {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      std::strncpy(sa.sun_path, a.path.c_str(), sizeof(sa.sun_path) - 1);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
        throw std::runtime_error("raw connect");
    } else {
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(a.port);
      ::inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr);
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
        throw std::runtime_error("raw connect");
    }
    timeval tv{30, 0};  // safety net: a broken server fails the test instead of hanging it
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawPeer() { ::close(fd_); }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  void send(std::span<const std::byte> bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0)
        return;  // the server may already have closed on us: that is what some tests expect
      sent += static_cast<size_t>(n);
    }
  }
  void send(std::string_view text) { send(std::as_bytes(std::span(text.data(), text.size()))); }
  void shutdown_send() { ::shutdown(fd_, SHUT_WR); }

  // Reads until the server closes; returns everything it sent.
  std::vector<std::byte> read_to_end() {
    std::vector<std::byte> out;
    std::byte buf[4096];
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.insert(out.end(), buf, buf + n);
    }
    return out;
  }

  // Reads frames until the server closes (or 30 s pass); returns them in order.
  std::vector<Frame> read_frames() {
    auto bytes = read_to_end();
    std::vector<Frame> frames;
    size_t at = 0;
    while (at + kPrefixBytes <= bytes.size()) {
      Prefix p = decode_prefix(
          std::span<const std::byte, kPrefixBytes>(bytes.data() + at, kPrefixBytes), {});
      size_t size = kPrefixBytes + p.header_bytes + p.payload_bytes;
      frames.push_back(decode_frame_bytes(std::span(bytes.data() + at, size), {}));
      at += size;
    }
    return frames;
  }

  // Reads frames until the server closes; returns the last one (expected: its close frame).
  Frame read_close_frame() {
    std::vector<Frame> frames = read_frames();
    if (frames.empty()) throw std::runtime_error("server closed without a close frame");
    return frames.back();
  }

  void send_frame(Frame frame) { send(flatten(encode_frame(std::move(frame), {}))); }

 private:
  int fd_ = -1;
};

}  // namespace ajet::rpc::testing
