#include "rpc/connection.h"

#include "common/log.h"

namespace ajet::rpc {
namespace {

constexpr size_t kMaxFramesPerWrite = 64;  // frames gathered into one scatter-gather write

}  // namespace

Connection::Connection(Socket socket, ConnectionOptions options, std::string peer)
    : socket_(std::move(socket)),
      options_(std::move(options)),
      peer_(std::move(peer)),
      grace_timer_(socket_.get_executor()),
      read_limits_(options_.pre_auth_limits.value_or(options_.limits)),
      pre_auth_(options_.pre_auth_limits.has_value()) {}

void Connection::lift_read_limits() {
  read_limits_ = options_.limits;
  pre_auth_ = false;
}

void Connection::start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->read_prefix(); });
}

bool Connection::is_open() const {
  std::lock_guard lk(mu_);
  return !closed_ && !closing_;
}

bool Connection::closing() const {
  std::lock_guard lk(mu_);
  return closing_ || closed_;
}

void Connection::read_prefix() {
  asio::async_read(socket_, asio::buffer(prefix_),
                   [self = shared_from_this()](boost::system::error_code ec, size_t) {
                     if (ec)
                       return self->close_now(ec == asio::error::eof
                                                  ? "peer closed the connection"
                                                  : "read failed: " + ec.message());
                     if (self->closing()) return self->discard_input();
                     Prefix p;
                     try {
                       p = decode_prefix(self->prefix_, self->read_limits_);
                     } catch (const Error& e) {
                       if (!self->pre_auth_ || e.code() != ErrorCode::kResourceExhausted)
                         return self->protocol_error(e);
                       // Refused from the prefix, before anything is buffered. The cause is the
                       // missing handshake, so the peer is told that.
                       return self->protocol_error(Error(
                           ErrorCode::kUnauthenticated,
                           "this engine requires a token: the first frame on a connection must be "
                           "a hello frame carrying it, and before it no frame may exceed the "
                           "pre-authentication limits; " +
                               std::string(e.what())));
                     }
                     self->header_.resize(p.header_bytes);
                     self->payload_.resize(p.payload_bytes);
                     self->read_body();
                   });
}

void Connection::read_body() {
  std::array<asio::mutable_buffer, 2> bufs{asio::buffer(header_), asio::buffer(payload_)};
  asio::async_read(
      socket_, bufs, [self = shared_from_this()](boost::system::error_code ec, size_t) {
        if (ec) {
          return self->close_now(ec == asio::error::eof
                                     ? "peer closed the connection in the middle of a frame"
                                     : "read failed: " + ec.message());
        }
        if (self->closing()) return self->discard_input();
        Frame frame;
        try {
          frame = decode_frame(self->header_, std::move(self->payload_), self->read_limits_);
        } catch (const Error& e) {
          return self->protocol_error(e);
        }
        self->payload_ = {};
        if (self->on_frame_) {
          try {
            self->on_frame_(std::move(frame));
          } catch (const std::exception& e) {
            // A handler bug must not take the connection (and every other request on it) down.
            log().error("rpc {}: frame handler threw: {}", self->peer_, e.what());
          }
        }
        self->read_prefix();
      });
}

void Connection::discard_input() {
  // While closing: keep reading (and dropping) so unread input never turns our close into a reset
  // that could destroy the close frame before the peer reads it.
  scratch_.resize(64 * 1024);
  socket_.async_read_some(asio::buffer(scratch_),
                          [self = shared_from_this()](boost::system::error_code ec, size_t) {
                            if (ec) return self->close_now("closed after a protocol error");
                            self->discard_input();
                          });
}

void Connection::protocol_error(const Error& error) {
  // Before authentication the server logs refused peers itself, rate-limited: anyone who reaches
  // the port can cause this line.
  if (pre_auth_) {
    log().debug("rpc {}: {}; closing the connection", peer_, error.what());
  } else {
    log().warn("rpc {}: {}; closing the connection", peer_, error.what());
  }
  close_with_error(error.code(), error.what());
  discard_input();
}

bool Connection::send(EncodedFrame frame) {
  std::unique_lock lk(mu_);
  if (closed_ || closing_) return false;
  if (queued_bytes_ + frame.size() > options_.max_queued_bytes) {
    lk.unlock();
    close("peer is not reading: " + std::to_string(options_.max_queued_bytes) +
          " bytes already queued for it");
    return false;
  }
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
  if (!writing_) {
    writing_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->drain(); });
  }
  return true;
}

void Connection::close_with_error(ErrorCode code, const std::string& message) {
  EncodedFrame frame;
  try {
    frame = encode_frame(make_close_frame(code, message), options_.limits);
  } catch (const Error& e) {
    frame = encode_frame(make_close_frame(code, message.substr(0, 1024)), options_.limits);
  }
  {
    std::lock_guard lk(mu_);
    if (closed_ || closing_) return;
    closing_ = true;
    close_message_ = message;
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    if (!writing_) {
      writing_ = true;
      asio::post(socket_.get_executor(), [self = shared_from_this()] { self->drain(); });
    }
  }
  asio::post(socket_.get_executor(), [self = shared_from_this(), message] {
    // The connection may have closed before this ran (close_now cancels only a started timer);
    // a timer started now would hold the I/O thread's work for close_grace for nothing.
    {
      std::lock_guard lk(self->mu_);
      if (self->closed_) return;
    }
    self->grace_timer_.expires_after(self->options_.close_grace);
    self->grace_timer_.async_wait([self, message](boost::system::error_code ec) {
      if (!ec) self->close_now("closed: " + message);
    });
  });
}

void Connection::close(const std::string& reason) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), reason] { self->close_now(reason); });
}

void Connection::drain() {
  writing_batch_.clear();
  write_buffers_.clear();
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    while (!queue_.empty() && writing_batch_.size() < kMaxFramesPerWrite) {
      writing_batch_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    if (writing_batch_.empty()) {
      writing_ = false;
      if (closing_) {
        // Everything, the close frame included, is written: tell the peer we are done sending.
        boost::system::error_code ignored;
        socket_.shutdown(asio::socket_base::shutdown_send, ignored);
      }
      return;
    }
  }
  for (const auto& f : writing_batch_) {
    write_buffers_.push_back(asio::buffer(f.head));
    if (!f.payload.empty()) write_buffers_.push_back(asio::buffer(f.payload));
  }
  asio::async_write(socket_, write_buffers_,
                    [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                      if (ec) return self->close_now("write failed: " + ec.message());
                      {
                        std::lock_guard lk(self->mu_);
                        self->queued_bytes_ -= n;
                      }
                      self->drain();
                    });
}

void Connection::close_now(const std::string& why) {
  std::string reason = why;
  {
    std::lock_guard lk(mu_);
    if (closed_) return;
    if (!close_message_.empty()) reason = close_message_;
    closed_ = true;
    queue_.clear();
    queued_bytes_ = 0;
  }
  grace_timer_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
  auto on_close = std::move(on_close_);
  on_frame_ = nullptr;
  on_close_ = nullptr;
  log().debug("rpc {}: connection closed: {}", peer_, reason);
  if (on_close) on_close(reason);
}

Socket connect_socket(asio::io_context& io, const Address& address) {
  Socket socket(io);
  boost::system::error_code ec;
  if (address.kind == Address::Kind::kUnix) {
    socket.connect(asio::local::stream_protocol::endpoint(address.path), ec);
  } else {
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(address.host, std::to_string(address.port), ec);
    if (!ec) {
      ec = asio::error::host_not_found;
      for (const auto& entry : results) {
        boost::system::error_code ignored;
        socket.close(ignored);
        socket.connect(entry.endpoint(), ec);
        if (!ec) break;
      }
    }
    if (!ec) socket.set_option(asio::ip::tcp::no_delay(true), ec);
  }
  if (ec) {
    throw Error(ErrorCode::kUnavailable,
                "cannot connect to the engine at " + to_string(address) + ": " + ec.message());
  }
  return socket;
}

}  // namespace ajet::rpc
