// HttpServer: the HTTP/1.1 server of the swarm front (Boost.Beast + Asio, C++20 coroutines, a few
// I/O threads), hidden behind the plain structs of message.h. It owns sockets, limits, timeouts and
// shutdown; it never interprets a route. Handlers must never block an I/O thread.
//
//   Router router;
//   router.get("/health", [](Request, Respond respond) { respond(json_response({{"status",
//   "ok"}})); }); HttpServer server({.port = 10086}, std::move(router));   // binds now; port 0 →
//   server.port()
//
// Every request's head goes to the head check (a Router gives its own: 404/405, the route's check
// and body limit) before its body is read; a client that hangs up while its request is handled
// fires the request's CancelSignal.
//   server.handle_signals();                                  // SIGINT/SIGTERM/SIGHUP → stop()
//   server.run();                                             // until stopped and drained
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "http/message.h"
#include "http/router.h"

namespace ajet::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;   // 0: an ephemeral port, see HttpServer::port()
  int io_threads = 2;  // each runs its own event loop; connections are spread round-robin
  // Over a limit → 413 naming the limit, then the connection closes. max_body_bytes is the limit of
  // requests whose head verdict names none (HeadVerdict::body).
  size_t max_header_bytes = 32 * 1024;
  size_t max_body_bytes = 32 * 1024 * 1024;
  // Request-body bytes all requests together may hold in memory, from their head until their answer
  // comes: a Content-Length that does not fit what is left is answered 503 + Retry-After before the
  // body is read; a chunked body counts as it arrives (503 when it no longer fits).
  size_t max_body_memory_bytes = size_t(512) << 20;
  std::string body_memory_name = "max_body_memory_bytes";  // how the 503 names that limit
  // Open connections at most (0: from RLIMIT_NOFILE, see default_max_connections()); each I/O
  // thread takes an equal share. A connection accepted at the cap sheds the thread's connection
  // idle the longest (keep-alive), else the one reading its header the longest; when none can go,
  // it is answered 503 and closed.
  size_t max_connections = 0;
  // Slow clients: from a request's first byte to the end of its header; for its whole body; between
  // requests on a keep-alive connection (and before the first); for each write (a response, one
  // chunk of a stream). A connection past a timeout is closed. A stream waiting for its producer
  // has no timeout: the producer decides.
  std::chrono::milliseconds read_header_timeout{10'000};
  std::chrono::milliseconds read_body_timeout{60'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds write_timeout{30'000};
  // stop(): in-flight requests and streams get this long to finish before their connections close.
  std::chrono::milliseconds shutdown_grace{10'000};
};

struct ServerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t connections_shed = 0;     // closed to make room at max_connections
  uint64_t connections_refused = 0;  // answered 503 at max_connections (nothing could be shed)
  uint64_t max_connections = 0;      // the cap in force
  uint64_t requests = 0;             // requests read completely and handed to the handler
  uint64_t answered_at_head = 0;     // requests answered from their head, their body never read
  uint64_t body_bytes_read = 0;      // request-body bytes read into requests (not drained ones)
  uint64_t body_bytes_held = 0;      // request-body bytes held now (see max_body_memory_bytes)
};

// min(soft RLIMIT_NOFILE - 64, 16384): room for the process's other descriptors (files, pipes, the
// engine's sockets) below the limit.
size_t default_max_connections();

class HttpServer {
 public:
  // Binds and listens now (throws Error(kIo) naming host:port on failure); serves after start().
  // `check` (optional) judges each request's head before its body is read.
  HttpServer(ServerOptions options, Handler handler, HeadCheck check = nullptr);
  // The router handles requests and checks their heads (Router::check_head).
  HttpServer(ServerOptions options, Router router);
  // stop() and wait(): may take up to shutdown_grace when requests are still in flight.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;  // the bound port (the ephemeral one when options.port was 0)
  const std::string& host() const;

  // SIGINT/SIGTERM/SIGHUP → stop(); a second signal closes every connection at once. Call before
  // start().
  void handle_signals();
  // Starts the I/O threads and returns. A server runs once: it cannot be restarted after stop().
  void start();
  // start() (if needed) and wait().
  void run();
  // Graceful shutdown, from any thread (a handler too): stops accepting, closes idle keep-alive
  // connections, lets in-flight requests finish (their responses carry `Connection: close`), and
  // after shutdown_grace closes what is left, cancelling its streams. Idempotent. Called from
  // outside the I/O threads, it returns once the listening socket is closed and every connection
  // has been told; from a handler it only starts all that.
  void stop();
  // Blocks until stopped and every connection is closed and the I/O threads exited. Never call it
  // from a handler (an I/O thread).
  void wait();

  ServerStats stats() const;

 private:
  HttpServer(ServerOptions options, std::shared_ptr<const Router> router);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::http
