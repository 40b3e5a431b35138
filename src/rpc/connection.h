// One framed RPC connection over an Asio stream socket (Unix or TCP), shared by the client and the
// server: a read loop that decodes frames, and a write queue any thread may push to without
// blocking. Internal to src/rpc (it includes Asio); never hands a malformed frame upward.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rpc/address.h"
#include "rpc/frame.h"

namespace ajet::rpc {

namespace asio = boost::asio;
using Socket = asio::generic::stream_protocol::socket;
using Acceptor = asio::basic_socket_acceptor<asio::generic::stream_protocol>;

struct ConnectionOptions {
  FrameLimits limits;
  // Encoded bytes waiting to be written; beyond this the peer is not reading and the connection
  // is closed (so a stuck peer cannot make the engine buffer without bound).
  size_t max_queued_bytes = 1ull << 30;
  // After a close frame is queued: how long to wait for the peer to hang up before closing hard.
  std::chrono::milliseconds close_grace{2000};
  // When set: the limits frames are read with until lift_read_limits() (a server caps the frames
  // of a peer that has not authenticated yet, so it cannot make the engine buffer megabytes).
  std::optional<FrameLimits> pre_auth_limits;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using FrameHandler = std::function<void(Frame&&)>;
  using CloseHandler = std::function<void(const std::string& reason)>;

  Connection(Socket socket, ConnectionOptions options, std::string peer);

  // Starts the read loop. Both handlers run on the socket's I/O thread; `on_close` runs exactly
  // once, after which neither is called again (they are released, breaking reference cycles).
  void start(FrameHandler on_frame, CloseHandler on_close);

  // Any thread. Queues a frame; false when the connection is closed or closing (frame dropped).
  bool send(EncodedFrame frame);
  // Any thread. Queues a kClose frame naming the problem, stops reading frames, and closes once
  // it is written and the peer hangs up (or after `close_grace`).
  void close_with_error(ErrorCode code, const std::string& message);
  // Any thread. Closes now; queued frames are dropped.
  void close(const std::string& reason);

  // I/O thread only (from the frame handler): frames after this one are read with
  // options.limits instead of options.pre_auth_limits.
  void lift_read_limits();

  bool is_open() const;
  const std::string& peer() const { return peer_; }
  const FrameLimits& limits() const { return options_.limits; }

 private:
  void read_prefix();
  void read_body();
  void discard_input();
  void protocol_error(const Error& error);
  void drain();
  void close_now(const std::string& reason);
  bool closing() const;

  Socket socket_;
  ConnectionOptions options_;
  std::string peer_;
  asio::steady_timer grace_timer_;

  // I/O thread only.
  FrameLimits read_limits_;  // pre_auth_limits until lifted, then limits
  bool pre_auth_ = false;    // read_limits_ are pre_auth_limits
  FrameHandler on_frame_;
  CloseHandler on_close_;
  std::array<std::byte, kPrefixBytes> prefix_{};
  std::string header_;              // reused between frames
  std::vector<std::byte> payload_;  // moved into each decoded frame
  std::vector<std::byte> scratch_;  // discard buffer while closing
  std::vector<EncodedFrame> writing_batch_;
  std::vector<asio::const_buffer> write_buffers_;

  // Shared with sending threads.
  mutable std::mutex mu_;
  std::deque<EncodedFrame> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;       // a drain is scheduled or a write is in flight
  bool closing_ = false;       // close frame queued; no more frames accepted
  std::string close_message_;  // why we sent a close frame: the reason reported when it closes
  bool closed_ = false;
};

// Connects a stream socket to `address` (one attempt). Throws Error(kUnavailable) naming the
// address and the OS error. TCP sockets get TCP_NODELAY (tokens are small and latency matters).
Socket connect_socket(asio::io_context& io, const Address& address);

}  // namespace ajet::rpc
