// Test helpers for the HTTP layer: a blocking raw TCP socket (to send what no well-behaved client
// sends) and running a subprocess (curl) with its output captured.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>

#include "support/run_command.h"

namespace ajet::http::testing {

// A blocking loopback connection. Every read gives up after 30 s so a broken server fails the test
// instead of hanging it; no test relies on that bound being reached.
class RawSocket {
 public:
  explicit RawSocket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect() to port " + std::to_string(port) + " failed");
    }
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  void send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send() failed");
      data.remove_prefix(static_cast<size_t>(n));
    }
  }

  // Reads until `needle` is in the received bytes (kept across calls); "" on EOF or error first.
  std::string read_until(std::string_view needle) {
    for (;;) {
      if (size_t at = pending_.find(needle); at != std::string::npos) {
        std::string out = pending_.substr(0, at + needle.size());
        pending_.erase(0, at + needle.size());
        return out;
      }
      if (!fill()) return "";
    }
  }

  // One response with a Content-Length body: head + body, or "" when the connection ended first.
  std::string read_response() {
    std::string head = read_until("\r\n\r\n");
    if (head.empty()) return "";
    size_t length = 0;
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (size_t at = lower.find("content-length:"); at != std::string::npos) {
      length = std::stoul(head.substr(at + 15));
    }
    while (pending_.size() < length) {
      if (!fill()) return "";
    }
    std::string body = pending_.substr(0, length);
    pending_.erase(0, length);
    return head + body;
  }

  // True once the peer closed: reads (discarding) until EOF or a reset. False on the 30 s bound.
  bool wait_closed() {
    pending_.clear();
    for (;;) {
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

  void close_now() {
    ::close(fd_);
    fd_ = -1;
  }

 private:
  bool fill() {
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string pending_;
};

using test_support::CommandResult;
using test_support::run_command;

inline bool have_curl() { return run_command("command -v curl >/dev/null 2>&1").exit_code == 0; }

}  // namespace ajet::http::testing
