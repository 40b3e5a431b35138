// One HTTP/1.1 connection: read a request, hand it to the handler, write the answer, repeat.
// Requests are handled one at a time, in order (pipelining-safe). The common path costs one
// event-loop wait per request: bytes already buffered are parsed in place, and responses are
// written straight into the socket when it has room, falling back to async I/O only when needed.
#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "common/log.h"
#include "common/strings.h"
#include "http/request_parse.h"
#include "http/response.h"
#include "http/server_internal.h"

namespace ajet::http::detail {

namespace {
constexpr size_t kFirstRead = 1024;          // asked for while waiting for a request
constexpr size_t kBodyRead = 64 * 1024;      // per read while a large body arrives
constexpr size_t kMaxDrainBytes = 64 << 20;  // read-and-discarded after a 413/400 before closing
constexpr int64_t kMaxRefusing =
    256;  // 503s at the cap being written at once; beyond: closed at once
constexpr auto kRefusalLinger = std::chrono::seconds(2);

std::string bytes_text(uint64_t bytes) { return std::to_string(bytes) + " bytes"; }

// "65536 bytes (64 KiB; NAME)": the exact figure, a round one when there is one, and how to change
// it.
std::string limit_text(uint64_t bytes, const std::string& name) {
  std::string round;
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) {
    round = std::to_string(bytes >> 20) + " MiB; ";
  } else if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) {
    round = std::to_string(bytes >> 10) + " KiB; ";
  }
  return bytes_text(bytes) + " (" + round + name + ")";
}
}  // namespace

Connection::Connection(Core& core, Worker& worker, Socket socket)
    : core_(core),
      worker_(worker),
      socket_(std::move(socket)),
      watchdog_(socket_.get_executor()),
      signal_(socket_.get_executor()),
      buffer_(core.options.max_header_bytes + kBodyRead) {}

Task<void> Connection::run(std::shared_ptr<Connection> self) {
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

void Connection::shed() {
  close_socket();  // its pending read fails: the connection ends quietly
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
  release_body();
  // The client left (or the server closed) before the answer was written: the handler stops.
  if (std::shared_ptr<CancelSignal> cancel = std::move(cancel_)) cancel->cancel();
  worker_.connections.erase(this);
  worker_.assigned.fetch_sub(1, std::memory_order_relaxed);
  core_.connection_done();
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

void Connection::enter(Phase phase) {
  phase_ = phase;
  if (phase == Phase::kIdle || phase == Phase::kReading) phase_since_ = Clock::now();
}

Task<void> Connection::serve() {
  for (;;) {
    if (stopping_ && buffer_.size() == 0) co_return;
    if (buffer_.size() == 0) {  // idle: wait for the first bytes of the next request
      enter(Phase::kIdle);
      set_deadline(core_.options.idle_timeout);
      auto [ec, n] = co_await socket_.async_read_some(buffer_.prepare(kFirstRead), kNoThrow);
      if (ec) co_return;  // closed by the client, by stop(), shed, or idle too long
      buffer_.commit(n);
    }
    enter(Phase::kReading);
    set_deadline(core_.options.read_header_timeout);
    Incoming in = co_await read_request();
    if (in.close) co_return;
    const bool head_only = in.request.method == "HEAD";
    const int version = in.request.version;
    bool keep_alive = in.keep_alive;

    std::optional<Response> response = std::move(in.answer);
    if (!response) {
      enter(Phase::kHandling);
      clear_deadline();
      core_.requests.fetch_add(1, std::memory_order_relaxed);
      cancel_ = std::make_shared<CancelSignal>();
      in.request.cancel = cancel_;
      auto slot = std::make_shared<Slot<Response>>(worker_.gate);
      response = call_handler(std::move(in.request), slot);
      if (!response) {  // answered later, from any thread: meanwhile a watch notices a hang-up
        watch_wanted_ = true;
        response = co_await await_slot(*slot);
        watch_wanted_ = false;
        co_await stop_watch();
      }
      if (!response) co_return;  // torn down while waiting; end() fires the cancel signal
    }
    release_body();

    enter(Phase::kWriting);
    keep_alive = keep_alive && !stopping_;
    if (auto c = response->headers.get("Connection"); c && iequals(*c, "close")) keep_alive = false;
    bool ok;
    if (response->stream && !head_only && has_body(response->status)) {
      ok = co_await write_stream(*response, keep_alive, version);
    } else {
      std::array<asio::const_buffer, 2> out =
          prepare_plain(*response, keep_alive, head_only, version);
      error_code write_ec;
      size_t done = write_now(out, write_ec);
      ok = !write_ec;
      if (ok && done < asio::buffer_size(out))
        ok = co_await write_rest(out, done);  // the socket was full
    }
    if (ok) cancel_.reset();  // answered: a hang-up from now on cancels nothing
    if (!ok || !keep_alive) co_return;
  }
}

// Header, head check, then the body within the route's limit and the server's body-memory budget.
// A request refused on the way is answered here (and the connection closes: `close`).
Task<Connection::Incoming> Connection::read_request() {
  Incoming in;
  body_memory_full_ = false;
  parser_.emplace();
  limit_parser(*parser_, core_.options.max_header_bytes, std::numeric_limits<size_t>::max());
  if (error_code ec = co_await read_header(); ec) {
    parser_.reset();
    co_await reject_bad_request(ec);
    in.close = true;
    co_return in;
  }
  if (std::optional<Response> bad = transfer_coding_error(parser_->get()); bad) {
    // The bytes after such a header would be read as the next request (request smuggling): answer
    // and close instead of keeping the connection.
    parser_.reset();
    co_await reject(std::move(*bad));
    in.close = true;
    co_return in;
  }
  static_cast<RequestHead&>(in.request) = make_head(parser_->get());
  in.request.remote_address = remote_;
  HeadVerdict verdict = check_head(in.request);
  const bool has_body = !parser_->is_done();
  std::optional<Response> refused = std::move(verdict.answer);
  if (refused) core_.answered_at_head.fetch_add(1, std::memory_order_relaxed);
  body_rules_ = std::move(verdict.body);
  if (!refused && has_body) refused = admit_body();
  if (refused &&
      has_body) {  // the body is never read: answer, drain what comes without keeping it, close
    parser_.reset();
    co_await reject(std::move(*refused));
    in.close = true;
    co_return in;
  }
  if (refused) {  // nothing to skip: the connection may serve the next request
    in.keep_alive = parser_->keep_alive();
    parser_.reset();
    in.answer = std::move(refused);
    co_return in;
  }
  if (has_body) {
    error_code ec = co_await read_body();
    if (ec || body_memory_full_) {
      std::optional<Response> answer;
      if (body_memory_full_) {
        answer = body_memory_full(parser_->get().body().size());
      } else if (ec == bhttp::error::body_limit) {
        answer = body_too_large(std::nullopt);
      }
      parser_.reset();
      release_body();
      if (answer) {
        co_await reject(std::move(*answer));
      } else {
        co_await reject_bad_request(ec);
      }
      in.close = true;
      co_return in;
    }
  }
  in.keep_alive = take_body(*parser_, in.request.body);
  parser_.reset();
  core_.body_bytes_read.fetch_add(in.request.body.size(), std::memory_order_relaxed);
  co_return in;
}

// Feeds buffered bytes to the parser, up to the end of the header (whole_message false) or of the
// whole request. True when that end is reached; false when it needs more bytes or failed (then
// `ec`).
bool Connection::parse_buffered(error_code& ec, bool whole_message) {
  auto reached = [&] { return whole_message ? parser_->is_done() : parser_->is_header_done(); };
  while (buffer_.size() > 0 && !reached()) {
    size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == bhttp::error::need_more) {
      ec = {};
      return false;
    }
    if (ec) return false;
  }
  return reached();
}

Task<error_code> Connection::read_header() {
  for (;;) {
    error_code ec;
    if (parse_buffered(ec, false)) co_return error_code{};
    if (ec) co_return ec;
    size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) co_return bhttp::error::header_limit;  // only an unfinished header accumulates
    auto [read_ec, n] =
        co_await socket_.async_read_some(buffer_.prepare(std::min(room, kBodyRead)), kNoThrow);
    if (read_ec) co_return read_ec;
    buffer_.commit(n);
  }
}

// Reads the body the head check let through; answers `Expect: 100-continue` first. A chunked body
// takes its bytes from the body-memory budget as they arrive (body_memory_full_ when they no longer
// fit).
Task<error_code> Connection::read_body() {
  set_deadline(core_.options.read_body_timeout);
  bool asked = false;
  for (;;) {
    error_code ec;
    const bool done = parse_buffered(ec, true);
    if (!hold_body(parser_->get().body().size())) {
      body_memory_full_ = true;
      co_return ec;
    }
    if (done || ec) co_return ec;
    if (!asked) {
      asked = true;
      const auto& header = parser_->get();
      if (header.version() >= 11 && iequals(header[bhttp::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!co_await write(asio::buffer(kContinue))) co_return asio::error::connection_aborted;
      }
    }
    size_t room = buffer_.max_size() - buffer_.size();
    auto [read_ec, n] =
        co_await socket_.async_read_some(buffer_.prepare(std::min(room, kBodyRead)), kNoThrow);
    if (read_ec) co_return read_ec;
    buffer_.commit(n);
  }
}

HeadVerdict Connection::check_head(const RequestHead& head) {
  if (!core_.head_check) return {};
  try {
    return core_.head_check(head);
  } catch (const Error& e) {
    return HeadVerdict{error_response(e), nullptr};
  } catch (const std::exception& e) {
    log().error("http: head check threw: {}", e.what());
    return HeadVerdict{
        error_response(500, std::string("internal error: ") + e.what(), "server_error", "internal"),
        nullptr};
  }
}

size_t Connection::body_limit() const {
  if (body_rules_ && body_rules_->max_body_bytes) return *body_rules_->max_body_bytes;
  return core_.options.max_body_bytes;
}

// Before the body: a declared length over the route's limit → 413, one the body-memory budget
// cannot hold → 503; a chunked body is limited as it arrives. nullopt: read it.
std::optional<Response> Connection::admit_body() {
  const size_t limit = body_limit();
  if (boost::optional<uint64_t> length = parser_->content_length(); length) {
    if (*length > limit) return body_too_large(*length);
    if (!hold_body(size_t(*length))) return body_memory_full(*length);
  } else {
    parser_->body_limit(limit);  // chunked: Beast counts the chunks
  }
  return std::nullopt;
}

// Ensures this request holds `total` bytes of the budget; false when the rest does not fit.
bool Connection::hold_body(size_t total) {
  if (total <= body_held_) return true;
  if (!core_.hold_body_bytes(total - body_held_)) return false;
  body_held_ = total;
  return true;
}

void Connection::release_body() {
  if (body_held_ == 0) return;
  core_.release_body_bytes(body_held_);
  body_held_ = 0;
}

Response Connection::body_error(int status, const std::string& message,
                                const std::string& code) const {
  if (body_rules_ && body_rules_->error_shape)
    return body_rules_->error_shape(status, message, code);
  return error_response(status, message, "", code);
}

Response Connection::body_too_large(std::optional<uint64_t> declared) const {
  const size_t limit = body_limit();
  const std::string name =
      body_rules_ && body_rules_->max_body_bytes && !body_rules_->limit_name.empty()
          ? body_rules_->limit_name
          : std::string("max_body_bytes");
  std::string message = "request body";
  if (declared) message += " of " + bytes_text(*declared);
  message += " exceeds this endpoint's limit of " + limit_text(limit, name);
  return body_error(413, message, "request_too_large");
}

Response Connection::body_memory_full(uint64_t wanted) const {
  Response response = body_error(
      503,
      "the server holds as many request-body bytes in memory as it may, " +
          limit_text(core_.options.max_body_memory_bytes, core_.options.body_memory_name) +
          "; a body of " + bytes_text(wanted) + " does not fit now: retry shortly",
      "server_busy");
  set_retry_after(response, std::chrono::seconds(1));
  return response;
}

// Calls the handler; the answer if it came at once (the common case), else std::nullopt and the
// connection waits on `slot`.
std::optional<Response> Connection::call_handler(Request request,
                                                 const std::shared_ptr<Slot<Response>>& slot) {
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
      slot->accept(error_response(500, std::string("internal error: ") + e.what(), "server_error",
                                  "internal"));
    }
    log().error("http: handler threw: {}", e.what());
  } catch (...) {
    if (slot->claim())
      slot->accept(error_response(500, "internal error", "server_error", "internal"));
    log().error("http: handler threw a non-exception");
  }
  return slot->take_or_wait(this);
}

// Over a limit → 413, malformed → 400, then close. Anything else (the client left, a timeout,
// stop()) just closes.
Task<void> Connection::reject_bad_request(error_code ec) {
  Response response;
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    response = error_response(413,
                              "request header exceeds the limit of " +
                                  std::to_string(core_.options.max_header_bytes) +
                                  " bytes (max_header_bytes)",
                              "invalid_request_error", "request_header_too_large");
  } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
             ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    response = error_response(400, "malformed HTTP request: " + ec.message(),
                              "invalid_request_error", "bad_request");
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

namespace {

// Answers a connection accepted at the cap with nothing to shed: 503, then a short drain (so the
// answer is not destroyed by a reset) and close. The socket is shared with the linger timer.
Task<void> refuse_connection(Core& core, std::shared_ptr<Socket> socket) {
  static const std::string kAnswer = [] {
    const std::string body =
        R"({"error":{"message":"the server is at its connection limit (max_connections) and every connection is )"
        R"(busy; retry shortly","type":"service_unavailable_error","code":"too_many_connections"}})";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
           "1\r\n"
           "Connection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  Timer linger(socket->get_executor(), kRefusalLinger);
  linger.async_wait([socket](error_code ec) {
    if (!ec) socket->close(ec);
  });
  auto [write_ec, n] = co_await asio::async_write(*socket, asio::buffer(kAnswer), kNoThrow);
  if (!write_ec) {
    error_code ignored;
    socket->shutdown(Socket::shutdown_send, ignored);
    std::array<char, 4096> sink;
    for (size_t drained = 0; drained < 64 * 1024;) {
      auto [read_ec, got] = co_await socket->async_read_some(asio::buffer(sink), kNoThrow);
      if (read_ec) break;
      drained += got;
    }
  }
  linger.cancel();
  error_code ignored;
  socket->close(ignored);
  core.refusing.fetch_sub(1);
  core.connection_done();
}

// This worker's connection idle the longest, else the one reading its header the longest.
Connection* shed_candidate(const Worker& worker) {
  Connection* idle = nullptr;
  Connection* reading = nullptr;
  for (Connection* c : worker.connections) {
    if (c->idle()) {
      if (!idle || c->phase_since() < idle->phase_since()) idle = c;
    } else if (c->reading_header()) {
      if (!reading || c->phase_since() < reading->phase_since()) reading = c;
    }
  }
  return idle ? idle : reading;
}

}  // namespace

void admit(Core& core, Worker& worker, Socket socket) {
  if (worker.connections.size() >= core.worker_share && !worker.stopping) {
    if (Connection* victim = shed_candidate(worker)) {
      victim->shed();
      core.shed.fetch_add(1, std::memory_order_relaxed);
    } else {
      worker.assigned.fetch_sub(1, std::memory_order_relaxed);
      core.refused.fetch_add(1, std::memory_order_relaxed);
      if (core.refusing.fetch_add(1) >=
          kMaxRefusing) {  // a flood: no answer, just the descriptor back
        core.refusing.fetch_sub(1);
        error_code ignored;
        socket.close(ignored);
        core.connection_done();
        return;
      }
      asio::co_spawn(worker.ioc,
                     refuse_connection(core, std::make_shared<Socket>(std::move(socket))),
                     asio::detached);
      return;
    }
  }
  auto connection = std::make_shared<Connection>(core, worker, std::move(socket));
  connection->begin();
  asio::co_spawn(worker.ioc, Connection::run(std::move(connection)), asio::detached);
}

}  // namespace ajet::http::detail
