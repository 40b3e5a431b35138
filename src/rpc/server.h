// Engine RPC server transport: listens on `unix:/path` or `tcp:HOST:PORT`, reads frames on one I/O
// thread and hands each request to a Handler with a thread-safe ReplySink. It never interprets
// methods (see router.h and messages.h) and never blocks the thread that replies: frames are
// queued per connection and written by the I/O thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rpc/frame.h"

namespace ajet::rpc {

using ConnectionId = uint64_t;

namespace detail {
struct ServerConnection;
}

// Where the replies of one request go. Any thread may use it; one thread at a time per request
// keeps its frames in order. Exactly one final frame (done or error) is sent: later calls return
// false. Dropping an unfinished sink sends an `internal` error, so a client never waits forever.
class ReplySink {
 public:
  ReplySink(std::shared_ptr<detail::ServerConnection> connection, uint64_t request_id,
            std::string method);
  ~ReplySink();
  ReplySink(const ReplySink&) = delete;
  ReplySink& operator=(const ReplySink&) = delete;

  uint64_t request_id() const { return request_id_; }
  ConnectionId connection_id() const;
  const std::string& method() const { return method_; }

  // Each returns false (and sends nothing) when the request is already finished or the peer is
  // gone. A frame over the size limits is replaced by a `resource_exhausted` error (final).
  bool reply(Frame frame);           // a streamed reply (kind and id are set here)
  bool done(Frame frame = Frame{});  // the final success frame
  bool error(ErrorCode code, std::string_view message);

  bool finished() const;
  bool connected() const;

 private:
  bool send(Frame frame, FrameKind kind);

  std::shared_ptr<detail::ServerConnection> connection_;
  uint64_t request_id_;
  std::string method_;
  std::atomic<bool> finished_{false};
};

// What the server calls. All three run on the server's I/O thread and must return quickly
// (queue the work for the engine thread and return); they never run concurrently with each other.
class Handler {
 public:
  virtual ~Handler() = default;
  // A new request. An exception thrown here becomes the request's error reply.
  virtual void on_request(Frame request, std::shared_ptr<ReplySink> sink) = 0;
  // The client asked to abort request `request_id` (still in flight) on `connection`. The handler
  // should finish it soon through its sink (generate: finish reason `abort`).
  virtual void on_abort(ConnectionId connection, uint64_t request_id) {}
  // The peer is gone; `in_flight` are the ids of its requests that had no final frame yet (their
  // sinks now return false). Called once per connection, also when the server stops.
  virtual void on_disconnect(ConnectionId connection, std::vector<uint64_t> in_flight) {}
};

struct ServerOptions {
  FrameLimits limits;
  size_t max_connections = 16;           // beyond this a new peer gets a close frame and is dropped
  size_t max_queued_bytes = 1ull << 30;  // per connection, see ConnectionOptions
  std::chrono::milliseconds close_grace{2000};

  // The shared secret (rpc/token.h). Not empty: a connection's first frame must be a hello frame
  // carrying it; until then the server acts on no frame, reads frames only within
  // `pre_auth_limits`, and closes the connection after `auth_timeout`. Empty: no handshake (a
  // hello is still acknowledged); listen() then refuses TCP unless `insecure_no_token` is set
  // and the host is a loopback address.
  std::string token;
  bool insecure_no_token = false;
  std::chrono::milliseconds auth_timeout{10'000};
  // With a token: connections that have not authenticated yet, at most. A new connection beyond
  // this, or at max_connections, closes the oldest of them (resource_exhausted), so silent peers
  // cannot hold the slots: the front, which says hello within a round trip, always gets in.
  size_t max_unauthenticated = 4;
  FrameLimits pre_auth_limits{4096, 0, 0};  // header bytes, payload bytes, arrays
  // Refused connections are logged with the peer's address at most once per period (a line says
  // how many were held back), so that a peer hammering the port cannot flood the log.
  std::chrono::milliseconds refusal_log_period{10'000};
};

class Server {
 public:
  // `handler` must outlive the server.
  explicit Server(Handler& handler, ServerOptions options = {});
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts accepting on the I/O thread. Unix sockets: a stale socket file is removed
  // (a live server at the same path is an error), the new one gets mode 0600. Throws Error naming
  // the address on failure (kInvalidArgument for a bad address, kIo for bind/listen errors,
  // kFailedPrecondition for TCP without a token: see check_listen_auth in rpc/token.h).
  void listen(std::string_view address);
  // The bound address (`tcp:127.0.0.1:0` comes back with the real port).
  std::string address() const;
  // Closes the listener and every connection (the handler hears on_disconnect for each), joins
  // the I/O thread and removes the socket file. Idempotent.
  void stop();
  size_t connection_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::rpc
