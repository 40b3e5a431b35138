#include "rpc/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/encoding.h"
#include "common/log.h"
#include "rpc/address.h"
#include "rpc/connection.h"
#include "rpc/token.h"

namespace ajet::rpc {

namespace detail {

// Server-side state of one peer: its framed connection and the requests it has in flight.
struct ServerConnection {
  ConnectionId id = 0;
  FrameLimits limits;
  std::mutex mu;
  std::shared_ptr<Connection>
      connection;  // reset when the peer is gone, so sinks do not pin the socket
  std::unordered_set<uint64_t> in_flight;
  bool gone = false;

  // I/O thread only.
  std::string peer;            // for log lines: the listener, a counter and the remote address
  bool authenticated = false;  // true from the start when the server has no token
  bool evicted = false;        // closed to make room for a newer connection (not authenticated)
  uint64_t frames_seen = 0;
  std::unique_ptr<asio::steady_timer> auth_timer;  // closes a peer that does not authenticate
};

}  // namespace detail

using detail::ServerConnection;

// ---------------------------------------------------------------------------------------------
// ReplySink

ReplySink::ReplySink(std::shared_ptr<ServerConnection> connection, uint64_t request_id,
                     std::string method)
    : connection_(std::move(connection)), request_id_(request_id), method_(std::move(method)) {}

ReplySink::~ReplySink() {
  if (!finished_.load()) {
    error(ErrorCode::kInternal, "the engine dropped request " + std::to_string(request_id_) +
                                    " ('" + method_ + "') without a final reply");
  }
}

ConnectionId ReplySink::connection_id() const { return connection_->id; }

bool ReplySink::reply(Frame frame) { return send(std::move(frame), FrameKind::kReply); }
bool ReplySink::done(Frame frame) { return send(std::move(frame), FrameKind::kDone); }
bool ReplySink::error(ErrorCode code, std::string_view message) {
  return send(make_error_frame(request_id_, code, message), FrameKind::kError);
}

bool ReplySink::finished() const { return finished_.load(); }

bool ReplySink::connected() const {
  std::lock_guard lk(connection_->mu);
  return !connection_->gone && connection_->connection && connection_->connection->is_open();
}

bool ReplySink::send(Frame frame, FrameKind kind) {
  if (kind == FrameKind::kReply ? finished_.load() : finished_.exchange(true)) return false;
  frame.kind = kind;
  frame.id = request_id_;
  bool sent_as_asked = true;
  EncodedFrame encoded;
  try {
    encoded = encode_frame(std::move(frame), connection_->limits);
  } catch (const Error& e) {
    // Usually an oversize reply: the client gets a final error instead of a frame it would refuse.
    std::string message = "reply to request " + std::to_string(request_id_) + " ('" + method_ +
                          "') could not be sent: " + std::string(e.what()).substr(0, 4096);
    log().warn("rpc: {}", message);
    finished_.store(true);
    kind = FrameKind::kError;
    sent_as_asked = false;
    encoded = encode_frame(make_error_frame(request_id_, e.code(), message), connection_->limits);
  }
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lk(connection_->mu);
    if (connection_->gone || !connection_->connection) return false;
    if (kind != FrameKind::kReply) connection_->in_flight.erase(request_id_);
    connection = connection_->connection;
  }
  return connection->send(std::move(encoded)) && sent_as_asked;
}

// ---------------------------------------------------------------------------------------------
// Server

struct Server::Impl {
  Impl(Handler& h, ServerOptions o) : handler(h), options(std::move(o)) {
    if (!options.token.empty()) {
      check_token(options.token, "ServerOptions::token");
      digest_key = random_bytes(32);
      token_digest = hmac_sha256(digest_key, options.token);
    }
  }

  Handler& handler;
  ServerOptions options;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<Acceptor> acceptor;
  std::thread thread;
  Address bound;
  bool owns_socket_file = false;
  bool listening = false;

  mutable std::mutex mu;
  std::unordered_map<ConnectionId, std::shared_ptr<ServerConnection>> connections;
  ConnectionId next_id = 1;
  uint64_t peers_seen = 0;
  std::vector<std::weak_ptr<Connection>> refused;  // over the connection limit, closing

  // The token is compared as HMAC digests under a key of this process: equal lengths, compared
  // in constant time, so neither the bytes nor the length of the secret leak through timing.
  std::string digest_key, token_digest;
  // I/O thread only: the rate limit of the refused-connection lines.
  std::chrono::steady_clock::time_point last_refusal_line{};
  int64_t refusals_held = 0;
  bool stopping = false;  // I/O thread only: stop() closes every connection, refusals included

  bool requires_token() const { return !options.token.empty(); }

  ConnectionOptions connection_options() const {
    ConnectionOptions o{options.limits, options.max_queued_bytes, options.close_grace, {}};
    if (requires_token()) o.pre_auth_limits = options.pre_auth_limits;
    return o;
  }

  void accept_next();
  void on_accept(Socket socket);
  void start_auth_deadline(const std::shared_ptr<ServerConnection>& peer);
  void on_frame(const std::shared_ptr<ServerConnection>& peer, Frame&& frame);
  void on_trusted_frame(const std::shared_ptr<ServerConnection>& peer,
                        const std::shared_ptr<Connection>& connection, Frame&& frame);
  void on_request(const std::shared_ptr<ServerConnection>& peer,
                  const std::shared_ptr<Connection>& connection, Frame&& frame);
  void on_pre_auth_frame(const std::shared_ptr<ServerConnection>& peer,
                         const std::shared_ptr<Connection>& connection, const Frame& frame);
  bool token_matches(const Json& hello_body) const;
  void log_refusal(const std::string& peer, const std::string& reason);
  void on_close(const std::shared_ptr<ServerConnection>& peer, const std::string& reason);
};

namespace {

// The remote end of an accepted socket for log lines: ADDRESS:PORT for TCP, the peer process's pid
// and uid for a Unix socket.
std::string describe_remote(Socket& socket, Address::Kind kind) {
  if (kind == Address::Kind::kUnix) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
      return "unknown process";
    return "pid " + std::to_string(cred.pid) + ", uid " + std::to_string(cred.uid);
  }
  boost::system::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  if (ec) return "unknown address";
  char host[INET6_ADDRSTRLEN] = "?";
  const auto* sa = reinterpret_cast<const sockaddr*>(remote.data());
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
}

}  // namespace

void Server::Impl::accept_next() {
  acceptor->async_accept([this](boost::system::error_code ec, Socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      log().warn("rpc server {}: accept failed: {}", to_string(bound), ec.message());
    } else {
      on_accept(std::move(socket));
    }
    accept_next();
  });
}

void Server::Impl::on_accept(Socket socket) {
  std::string peer = to_string(bound) + " peer #" + std::to_string(++peers_seen) + " (" +
                     describe_remote(socket, bound.kind) + ")";
  if (bound.kind == Address::Kind::kTcp) {
    boost::system::error_code ignored;
    socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  }
  auto connection = std::make_shared<Connection>(std::move(socket), connection_options(), peer);
  std::shared_ptr<ServerConnection> state;
  std::shared_ptr<Connection> evict;
  std::string evicted_peer;
  {
    std::lock_guard lk(mu);
    // Connections still waiting to authenticate, oldest first. Beyond max_unauthenticated (or at
    // max_connections) the oldest of them makes room: a peer with the token says hello within a
    // round trip, so silent peers cannot hold the slots the front needs.
    size_t waiting = 0;
    ServerConnection* oldest = nullptr;
    if (requires_token()) {
      for (const auto& [id, c] : connections) {
        if (c->authenticated || c->evicted) continue;
        waiting += 1;
        if (!oldest || c->id < oldest->id) oldest = c.get();
      }
    }
    size_t open = 0;
    for (const auto& [id, c] : connections) open += c->evicted ? 0 : 1;
    const bool full = open >= options.max_connections;
    if (oldest && (full || waiting >= options.max_unauthenticated)) {
      oldest->evicted = true;
      std::lock_guard olk(oldest->mu);
      evict = oldest->connection;
      evicted_peer = oldest->peer;
    } else if (full) {
      const std::string why = "too many connections to the engine (limit " +
                              std::to_string(options.max_connections) + ")";
      log_refusal(peer, why);  // rate-limited: a peer hammering the port cannot flood the log
      std::erase_if(refused, [](const auto& w) { return w.expired(); });
      refused.push_back(connection);
      connection->start([](Frame&&) {}, [](const std::string&) {});
      connection->close_with_error(ErrorCode::kResourceExhausted, why);
      return;
    }
    state = std::make_shared<ServerConnection>();
    state->id = next_id++;
    state->limits = options.limits;
    state->connection = connection;
    state->peer = peer;
    state->authenticated = !requires_token();
    connections.emplace(state->id, state);
  }
  if (evict) {
    evict->close_with_error(ErrorCode::kResourceExhausted,
                            "closed to make room: too many connections waiting to authenticate "
                            "(limit " +
                                std::to_string(options.max_unauthenticated) +
                                "); send the hello frame at once");
  }
  log().debug("rpc server: accepted {} as connection {}", peer, state->id);
  if (requires_token()) start_auth_deadline(state);
  connection->start([this, state](Frame&& frame) { on_frame(state, std::move(frame)); },
                    [this, state](const std::string& reason) { on_close(state, reason); });
}

void Server::Impl::start_auth_deadline(const std::shared_ptr<ServerConnection>& peer) {
  peer->auth_timer = std::make_unique<asio::steady_timer>(io, options.auth_timeout);
  peer->auth_timer->async_wait(
      [this, weak = std::weak_ptr<ServerConnection>(peer)](boost::system::error_code ec) {
        auto peer = weak.lock();
        if (ec || !peer || peer->authenticated) return;
        std::shared_ptr<Connection> connection;
        {
          std::lock_guard lk(peer->mu);
          connection = peer->connection;
        }
        if (connection) {
          connection->close_with_error(ErrorCode::kUnauthenticated,
                                       "no hello frame with the engine token within " +
                                           std::to_string(options.auth_timeout.count()) +
                                           " ms of connecting");
        }
      });
}

void Server::Impl::on_frame(const std::shared_ptr<ServerConnection>& peer, Frame&& frame) {
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard lk(peer->mu);
    if (peer->gone) return;
    connection = peer->connection;
  }
  ++peer->frames_seen;
  if (!peer->authenticated) return on_pre_auth_frame(peer, connection, frame);
  on_trusted_frame(peer, connection, std::move(frame));
}

bool Server::Impl::token_matches(const Json& hello_body) const {
  auto it = hello_body.find("token");
  if (it == hello_body.end() || !it->is_string()) return false;
  return constant_time_equal(hmac_sha256(digest_key, it->get_ref<const std::string&>()),
                             token_digest);
}

// Until the hello frame with the right token arrives, no frame is acted on: a request is answered
// with an `unauthenticated` error (so the caller sees why) and every other frame only closes.
void Server::Impl::on_pre_auth_frame(const std::shared_ptr<ServerConnection>& peer,
                                     const std::shared_ptr<Connection>& connection,
                                     const Frame& frame) {
  if (frame.kind == FrameKind::kHello) {
    const auto token = frame.body.find("token");
    if (token == frame.body.end() || !token->is_string()) {
      connection->close_with_error(
          ErrorCode::kUnauthenticated,
          "this engine requires a token: the hello frame has no string 'token' in its body");
    } else if (!token_matches(frame.body)) {
      connection->close_with_error(
          ErrorCode::kUnauthenticated,
          "wrong engine token: the hello frame's token does not match this engine's "
          "(--token-file or AJET_ENGINE_TOKEN of `ajet-engine serve`)");
    } else {
      peer->authenticated = true;
      if (peer->auth_timer) peer->auth_timer->cancel();
      connection->lift_read_limits();
      connection->send(encode_frame(make_hello_frame(""), peer->limits));
      log().debug("rpc server: {} authenticated", peer->peer);
    }
    return;
  }
  const std::string message =
      "this engine requires a token: the first frame on a connection must be a hello frame "
      "carrying it (the client's token option, --token-file or AJET_ENGINE_TOKEN); got a '" +
      std::string(frame_kind_name(frame.kind)) + "' frame first";
  if (frame.kind == FrameKind::kRequest) {
    connection->send(encode_frame(make_error_frame(frame.id, ErrorCode::kUnauthenticated, message),
                                  peer->limits));
  }
  connection->close_with_error(ErrorCode::kUnauthenticated, message);
}

void Server::Impl::on_request(const std::shared_ptr<ServerConnection>& peer,
                              const std::shared_ptr<Connection>& connection, Frame&& frame) {
  {
    std::lock_guard lk(peer->mu);
    if (!peer->in_flight.insert(frame.id).second) {
      connection->close_with_error(
          ErrorCode::kInvalidArgument,
          "request id " + std::to_string(frame.id) + " is already in flight");
      return;
    }
  }
  auto sink = std::make_shared<ReplySink>(peer, frame.id, frame.method);
  try {
    handler.on_request(std::move(frame), sink);
  } catch (const Error& e) {
    sink->error(e.code(), e.what());
  } catch (const std::exception& e) {
    sink->error(ErrorCode::kInternal, std::string("engine handler failed: ") + e.what());
  }
}

void Server::Impl::on_trusted_frame(const std::shared_ptr<ServerConnection>& peer,
                                    const std::shared_ptr<Connection>& connection, Frame&& frame) {
  switch (frame.kind) {
    case FrameKind::kRequest: return on_request(peer, connection, std::move(frame));
    case FrameKind::kAbort: {
      bool live = false;
      {
        std::lock_guard lk(peer->mu);
        live = peer->in_flight.count(frame.id) > 0;
      }
      // An abort for a request that already finished is normal (the final frame crossed it).
      if (!live) return;
      try {
        handler.on_abort(peer->id, frame.id);
      } catch (const std::exception& e) {
        log().error("rpc server: abort handler threw: {}", e.what());
      }
      return;
    }
    case FrameKind::kHello: {
      // Acknowledged when it opens the connection (a server without a token accepts any), so a
      // client with a token works against any engine.
      if (peer->frames_seen == 1) {
        connection->send(encode_frame(make_hello_frame(""), peer->limits));
      } else {
        connection->close_with_error(ErrorCode::kInvalidArgument,
                                     "a hello frame must be the first frame on a connection");
      }
      return;
    }
    case FrameKind::kClose: {
      Error e = frame_error(frame);
      log().warn("rpc server: {} reported {}: {}", connection->peer(), error_code_name(e.code()),
                 e.what());
      connection->close(std::string("peer reported an error: ") + e.what());
      return;
    }
    default:
      connection->close_with_error(
          ErrorCode::kInvalidArgument,
          "unexpected '" + std::string(frame_kind_name(frame.kind)) +
              "' frame from a client (clients send hello, request and abort frames)");
  }
}

void Server::Impl::log_refusal(const std::string& peer, const std::string& reason) {
  const auto now = std::chrono::steady_clock::now();
  if (last_refusal_line != std::chrono::steady_clock::time_point{} &&
      now - last_refusal_line < options.refusal_log_period) {
    ++refusals_held;
    return;
  }
  const std::string held = refusals_held == 0 ? ""
                                              : " (and " + std::to_string(refusals_held) +
                                                    " more refused since the last such line)";
  log().warn("rpc server: refused {} before it authenticated: {}{}", peer, reason.substr(0, 512),
             held);
  last_refusal_line = now;
  refusals_held = 0;
}

void Server::Impl::on_close(const std::shared_ptr<ServerConnection>& peer,
                            const std::string& reason) {
  std::vector<uint64_t> in_flight;
  {
    std::lock_guard lk(peer->mu);
    peer->gone = true;
    in_flight.assign(peer->in_flight.begin(), peer->in_flight.end());
    peer->in_flight.clear();
    peer->connection.reset();
  }
  if (peer->auth_timer) {
    peer->auth_timer->cancel();
    peer->auth_timer.reset();
  }
  if (!peer->authenticated && !stopping) log_refusal(peer->peer, reason);
  std::sort(in_flight.begin(), in_flight.end());
  {
    std::lock_guard lk(mu);
    connections.erase(peer->id);
  }
  log().debug("rpc server: connection {} closed ({}), {} requests in flight", peer->id, reason,
              in_flight.size());
  try {
    handler.on_disconnect(peer->id, std::move(in_flight));
  } catch (const std::exception& e) {
    log().error("rpc server: disconnect handler threw: {}", e.what());
  }
}

Server::Server(Handler& handler, ServerOptions options)
    : impl_(std::make_unique<Impl>(handler, std::move(options))) {}

Server::~Server() { stop(); }

namespace {

void listen_unix(Acceptor& acceptor, asio::io_context& io, const Address& address) {
  namespace fs = std::filesystem;
  const std::string where = "engine RPC server at " + to_string(address);
  std::error_code fec;
  auto status = fs::symlink_status(address.path, fec);
  if (!fec && fs::exists(status)) {
    if (!fs::is_socket(status)) {
      throw Error(ErrorCode::kIo,
                  where + ": a file that is not a socket exists there; refusing to replace it");
    }
    Socket probe(io);
    boost::system::error_code ec;
    probe.connect(asio::local::stream_protocol::endpoint(address.path), ec);
    if (!ec) throw Error(ErrorCode::kIo, where + ": another server is already listening there");
    fs::remove(address.path, fec);  // stale socket of a process that died
  }
  asio::generic::stream_protocol::endpoint endpoint{
      asio::local::stream_protocol::endpoint(address.path)};
  boost::system::error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec) throw Error(ErrorCode::kIo, where + ": cannot bind: " + ec.message());
  // Before listen(): nobody can connect yet, so there is no window with the umask's permissions.
  if (::chmod(address.path.c_str(), 0600) != 0) {
    throw Error(ErrorCode::kIo,
                where + ": cannot chmod 0600 the socket file: " + std::strerror(errno));
  }
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error(ErrorCode::kIo, where + ": cannot listen: " + ec.message());
}

uint16_t listen_tcp(Acceptor& acceptor, asio::io_context& io, const Address& address) {
  const std::string where = "engine RPC server at " + to_string(address);
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(address.host, std::to_string(address.port),
                                  asio::ip::tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw Error(ErrorCode::kIo, where + ": cannot resolve host: " + ec.message());
  asio::generic::stream_protocol::endpoint endpoint{results.begin()->endpoint()};
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error(ErrorCode::kIo, where + ": cannot listen: " + ec.message());
  auto local = acceptor.local_endpoint(ec);
  if (ec) throw Error(ErrorCode::kIo, where + ": cannot read the bound port: " + ec.message());
  // sin_port and sin6_port sit at the same offset; both are in network byte order.
  const auto* sa = reinterpret_cast<const sockaddr_in*>(local.data());
  return ntohs(sa->sin_port);
}

}  // namespace

void Server::listen(std::string_view address_text) {
  Impl& s = *impl_;
  if (s.listening)
    throw Error(ErrorCode::kFailedPrecondition,
                "engine RPC server is already listening on " + to_string(s.bound));
  Address address = parse_address(address_text);
  check_listen_auth(address, s.requires_token(), s.options.insecure_no_token);
  if (s.io.stopped()) s.io.restart();
  s.work.emplace(s.io.get_executor());
  s.acceptor.emplace(s.io);
  if (address.kind == Address::Kind::kUnix) {
    listen_unix(*s.acceptor, s.io, address);
    s.owns_socket_file = true;
  } else {
    address.port = listen_tcp(*s.acceptor, s.io, address);
  }
  s.bound = address;
  s.listening = true;
  s.accept_next();
  s.thread = std::thread([this] { impl_->io.run(); });
  log().info("engine RPC server listening on {}", to_string(s.bound));
}

std::string Server::address() const { return to_string(impl_->bound); }

size_t Server::connection_count() const {
  std::lock_guard lk(impl_->mu);
  return impl_->connections.size();
}

void Server::stop() {
  Impl& s = *impl_;
  if (!s.listening) return;
  if (s.thread.get_id() == std::this_thread::get_id()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "Server::stop() called from its own I/O thread (a handler)");
  }
  asio::post(s.io, [&s] {
    s.stopping = true;
    boost::system::error_code ignored;
    s.acceptor->close(ignored);
    std::vector<std::shared_ptr<ServerConnection>> peers;
    {
      std::lock_guard lk(s.mu);
      for (auto& [id, peer] : s.connections) peers.push_back(peer);
      for (auto& weak : s.refused) {
        if (auto c = weak.lock()) c->close("engine RPC server stopping");
      }
      s.refused.clear();
    }
    for (auto& peer : peers) {
      std::shared_ptr<Connection> connection;
      {
        std::lock_guard lk(peer->mu);
        connection = peer->connection;
      }
      // A close frame tells the client why (rather than a bare hang-up); a peer that does not hang
      // up in turn is closed after close_grace.
      if (connection)
        connection->close_with_error(ErrorCode::kUnavailable, "the engine RPC server is stopping");
    }
    s.work.reset();
  });
  s.thread.join();
  s.listening = false;
  s.stopping = false;
  if (s.owns_socket_file) {
    std::error_code ignored;
    std::filesystem::remove(s.bound.path, ignored);
    s.owns_socket_file = false;
  }
  log().info("engine RPC server on {} stopped", to_string(s.bound));
}

}  // namespace ajet::rpc
