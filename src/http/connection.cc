// One HTTP/1.1 connection: read a request, hand it to the handler, write the answer, repeat.
// Requests are handled one at a time, in order (pipelining-safe). The common path costs one
// event-loop wait per request: bytes already buffered are parsed in place, and responses are
// written straight into the socket when it has room, falling back to async I/O only when needed.
#include <algorithm>
#include <array>
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "common/strings.h"
#include "http/request_parse.h"
#include "http/response.h"
#include "http/server_internal.h"

namespace ajet::http::detail {

namespace {
constexpr size_t kFirstRead = 1024;         // asked for while waiting for a request
constexpr size_t kBodyRead = 64 * 1024;     // per read while a large body arrives
constexpr size_t kMaxDrainBytes = 64 << 20; // read-and-discarded after a 413/400 before closing
}  // namespace

Connection::Connection(Core& core, Worker& worker, Socket socket)
    : core_(core),
      worker_(worker),
      socket_(std::move(socket)),
      watchdog_(socket_.get_executor()),
      signal_(socket_.get_executor()),
      buffer_(core.options.max_header_bytes + kBodyRead) {}

Task<void> Connection::run(std::shared_ptr<Connection> self) {
  self->begin();
  try {
    co_await self->serve();
  } catch (const std::exception& e) {
    log().warn("http: connection {} failed: {}", self->remote_, e.what());
  }
  self->end();
}

void Connection::on_stop() {
  stopping_ = true;
  if (phase_ == Phase::kIdle) close_socket();
}

void Connection::force_close() {
  force_closed_ = true;
  close_socket();
  wake();
}

void Connection::begin() {
  error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  if (!ec) remote_ = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  socket_.non_blocking(true, ec);  // lets write_now() try the socket without waiting
  worker_.connections.insert(this);
  if (worker_.stopping) stopping_ = true;
  clear_deadline();
  arm_watchdog();
}

void Connection::end() {
  finished_ = true;
  close_socket();
  watchdog_.cancel();
  signal_.cancel();
  worker_.connections.erase(this);
  if (core_.live.fetch_sub(1) == 1 && core_.stopping.load()) core_.on_drained();
}

void Connection::close_socket() {
  error_code ec;
  socket_.shutdown(Socket::shutdown_both, ec);
  socket_.close(ec);
}

// One watchdog timer per connection enforces the deadline of the current phase. Moving the deadline
// later is a plain store (the timer notices when it fires and re-arms); only an earlier deadline
// touches the timer.
void Connection::set_deadline(std::chrono::milliseconds timeout) {
  deadline_ = Clock::now() + timeout;
  if (deadline_ < watchdog_.expiry()) watchdog_.expires_at(deadline_);  // the handler re-arms
}

void Connection::arm_watchdog() {
  watchdog_.expires_at(deadline_);
  watchdog_.async_wait([self = shared_from_this()](error_code) {
    if (self->finished_) return;
    if (Clock::now() >= self->deadline_) {
      self->timed_out_ = true;
      self->close_socket();
      self->wake();
      return;
    }
    self->arm_watchdog();
  });
}

Task<void> Connection::serve() {
  for (;;) {
    if (stopping_ && buffer_.size() == 0) co_return;
    if (buffer_.size() == 0) {  // idle: wait for the first bytes of the next request
      phase_ = Phase::kIdle;
      set_deadline(core_.options.idle_timeout);
      auto [ec, n] = co_await socket_.async_read_some(buffer_.prepare(kFirstRead), kNoThrow);
      if (ec) co_return;  // closed by the client, by stop(), or idle too long
      buffer_.commit(n);
    }
    phase_ = Phase::kReading;
    set_deadline(core_.options.read_header_timeout);
    parser_.emplace();
    limit_parser(*parser_, core_.options.max_header_bytes, core_.options.max_body_bytes);
    error_code ec;
    if (!parse_buffered(ec) && !ec) ec = co_await read_rest();
    if (ec) {
      parser_.reset();
      co_await reject_bad_request(ec);
      co_return;
    }
    if (std::optional<Response> bad = transfer_coding_error(parser_->get()); bad) {
      // The bytes after such a header would be read as the next request (request smuggling): answer
      // and close instead of keeping the connection.
      parser_.reset();
      co_await reject(std::move(*bad));
      co_return;
    }
    Request request;
    bool keep_alive = take_request(request);
    core_.requests.fetch_add(1, std::memory_order_relaxed);
    bool head_only = request.method == "HEAD";
    int version = request.version;

    phase_ = Phase::kHandling;
    clear_deadline();
    auto slot = std::make_shared<Slot<Response>>(worker_.gate);
    std::optional<Response> response = call_handler(std::move(request), slot);
    if (!response) response = co_await await_slot(*slot);  // answered later, from any thread
    if (!response) co_return;                               // torn down while waiting

    phase_ = Phase::kWriting;
    keep_alive = keep_alive && !stopping_;
    if (auto c = response->headers.get("Connection"); c && iequals(*c, "close")) keep_alive = false;
    bool ok;
    if (response->stream && !head_only && has_body(response->status)) {
      ok = co_await write_stream(*response, keep_alive, version);
    } else {
      std::array<asio::const_buffer, 2> out = prepare_plain(*response, keep_alive, head_only, version);
      error_code write_ec;
      size_t done = write_now(out, write_ec);
      ok = !write_ec;
      if (ok && done < asio::buffer_size(out)) ok = co_await write_rest(out, done);  // the socket was full
    }
    if (!ok || !keep_alive) co_return;
  }
}

// Feeds buffered bytes to the parser. True when the request is complete; false when it needs more
// bytes or failed (then `ec` is set).
bool Connection::parse_buffered(error_code& ec) {
  while (buffer_.size() > 0 && !parser_->is_done()) {
    size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == bhttp::error::need_more) {
      ec = {};
      return false;
    }
    if (ec) return false;
  }
  return parser_->is_done();
}

// Reads until the request in parser_ is complete; answers `Expect: 100-continue`; returns the error.
Task<error_code> Connection::read_rest() {
  bool body_phase = false;
  for (;;) {
    if (parser_->is_header_done() && !body_phase) {
      body_phase = true;
      const auto& header = parser_->get();
      if (header.version() >= 11 && iequals(header[bhttp::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!co_await write(asio::buffer(kContinue))) co_return asio::error::connection_aborted;
      }
      set_deadline(core_.options.read_body_timeout);
    }
    size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) co_return bhttp::error::header_limit;  // only an unfinished header accumulates
    auto [ec, n] = co_await socket_.async_read_some(buffer_.prepare(std::min(room, kBodyRead)), kNoThrow);
    if (ec) co_return ec;
    buffer_.commit(n);
    error_code parse_ec;
    if (parse_buffered(parse_ec)) co_return error_code{};
    if (parse_ec) co_return parse_ec;
  }
}

// Moves the parsed message into `request`; returns whether the connection may stay open.
bool Connection::take_request(Request& request) {
  const bool keep_alive = http::take_request(*parser_, request);
  parser_.reset();
  request.remote_address = remote_;
  return keep_alive;
}

// Calls the handler; the answer if it came at once (the common case), else std::nullopt and the
// connection waits on `slot`.
std::optional<Response> Connection::call_handler(Request request, const std::shared_ptr<Slot<Response>>& slot) {
  // Our own handle keeps the slot from counting as dropped while the handler unwinds, so that its
  // exception (not "dropped without responding") becomes the answer.
  Respond keep(slot);
  try {
    core_.handler(std::move(request), keep);
  } catch (const Error& e) {
    if (slot->claim()) slot->accept(error_response(e));
    log().warn("http: handler failed: {}", e.what());
  } catch (const std::exception& e) {
    if (slot->claim()) {
      slot->accept(error_response(500, std::string("internal error: ") + e.what(), "server_error", "internal"));
    }
    log().error("http: handler threw: {}", e.what());
  } catch (...) {
    if (slot->claim()) slot->accept(error_response(500, "internal error", "server_error", "internal"));
    log().error("http: handler threw a non-exception");
  }
  return slot->take_or_wait(this);
}

// Over a limit → 413, malformed → 400, then close. Anything else (the client left, a timeout,
// stop()) just closes.
Task<void> Connection::reject_bad_request(error_code ec) {
  Response response;
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    response = error_response(
        413, "request header exceeds the limit of " + std::to_string(core_.options.max_header_bytes) +
                 " bytes (max_header_bytes)",
        "invalid_request_error", "request_header_too_large");
  } else if (ec == bhttp::error::body_limit) {
    response = error_response(
        413, "request body exceeds the limit of " + std::to_string(core_.options.max_body_bytes) +
                 " bytes (max_body_bytes)",
        "invalid_request_error", "request_too_large");
  } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
             ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    response = error_response(400, "malformed HTTP request: " + ec.message(), "invalid_request_error", "bad_request");
  } else {
    co_return;
  }
  co_await reject(std::move(response));
}


// Writes an error response, then closes the connection after draining what the client still sends.
Task<void> Connection::reject(Response response) {
  serialize_head(response, false, false, 11, false);
  std::array<asio::const_buffer, 2> buffers{asio::buffer(head_), asio::buffer(response.body)};
  if (!co_await write(buffers)) co_return;
  // Read (and discard) what the client still sends before closing: closing a socket with unread
  // input sends a reset, which can destroy the response before the client has read it.
  error_code ignored;
  socket_.shutdown(Socket::shutdown_send, ignored);
  set_deadline(std::min(core_.options.read_body_timeout, core_.options.read_header_timeout));
  size_t drained = 0;
  std::array<char, 16 * 1024> sink;
  while (drained < kMaxDrainBytes) {
    auto [read_ec, n] = co_await socket_.async_read_some(asio::buffer(sink), kNoThrow);
    if (read_ec) break;
    drained += n;
  }
  clear_deadline();
}

}  // namespace ajet::http::detail
