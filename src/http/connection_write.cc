// The writing half of a connection: response heads, plain bodies, and streamed (chunked) bodies
// pulled from a BodyStream one chunk at a time, with a watch that notices a client leaving.
#include <cstdio>

#include "common/log.h"
#include "http/response.h"
#include "http/server_internal.h"

namespace ajet::http::detail {

namespace {
constexpr size_t kWatchRead = 1024;
}  // namespace

bool has_body(int status) {
  return status >= 200 && status <= 599 && status != 204 && status != 304;
}

void Connection::serialize_head(const Response& response, bool keep_alive, bool chunked,
                                int version, bool no_length) {
  head_.clear();
  head_ += "HTTP/1.1 ";
  head_ += std::to_string(response.status);
  head_ += ' ';
  head_ += bhttp::obsolete_reason(static_cast<bhttp::status>(response.status));
  head_ += "\r\n";
  for (const auto& [name, value] : response.headers) {
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") ||
        iequals(name, "Connection"))
      continue;
    if (name.find_first_of("\r\n:") != std::string::npos ||
        value.find_first_of("\r\n") != std::string::npos) {
      continue;  // never let a header split the response
    }
    head_ += name;
    head_ += ": ";
    head_ += value;
    head_ += "\r\n";
  }
  if (chunked) {
    head_ += "Transfer-Encoding: chunked\r\n";
  } else if (!no_length) {
    head_ += "Content-Length: ";
    head_ += std::to_string(response.body.size());
    head_ += "\r\n";
  }
  if (!keep_alive) {
    head_ += "Connection: close\r\n";
  } else if (version == 10) {
    head_ += "Connection: keep-alive\r\n";
  }
  head_ += "\r\n";
}

std::array<asio::const_buffer, 2> Connection::prepare_plain(Response& response, bool keep_alive,
                                                            bool head_only, int version) {
  if (response.status < 100 || response.status > 599) {
    int bad = response.status;
    cancel_orphan(response);
    response =
        error_response(500, "the handler answered with invalid status " + std::to_string(bad),
                       "server_error", "internal");
  }
  bool had_stream = response.stream != nullptr;
  if (had_stream) {  // a HEAD request or a status without a body: the stream is never read
    cancel_orphan(response);
    response.stream.reset();
  }
  bool bodyless = !has_body(response.status);
  serialize_head(response, keep_alive, false, version, bodyless || had_stream);
  if (head_only || bodyless) return {asio::buffer(head_), asio::const_buffer()};
  return {asio::buffer(head_), asio::buffer(response.body)};
}

// One body chunk as written: its size line (chunked encoding), the data, and its CRLF; with chunked
// false only the data. `size_line` holds the size line's text while the write runs. (A free
// function: a lambda local to the coroutine would put a type without linkage into its frame.)
static std::array<asio::const_buffer, 3> chunk_frame(std::string_view data, bool chunked,
                                                     char (&size_line)[24]) {
  const int len = chunked ? std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size()) : 0;
  return {asio::buffer(size_line, static_cast<size_t>(len)), asio::buffer(data),
          asio::buffer("\r\n", chunked ? 2 : 0)};
}

Task<bool> Connection::write_stream(Response& response, bool keep_alive, int version) {
  std::shared_ptr<BodyStream> stream = response.stream;
  bool chunked = version >= 11;  // HTTP/1.0 has no chunked encoding: there the body ends at close
  serialize_head(response, keep_alive && chunked, chunked, version, true);
  char size_line[24];
  bool ok = co_await write(asio::buffer(head_));
  if (ok && !response.body.empty())
    ok = co_await write(chunk_frame(response.body, chunked, size_line));
  if (!ok) {
    stream->cancel();
    co_return false;
  }
  watch_wanted_ = true;
  start_watch();
  for (;;) {
    auto slot = std::make_shared<Slot<Chunk>>(worker_.gate);
    bool threw = false;
    try {
      stream->next(Deliver(slot));
    } catch (const std::exception& e) {
      log().warn("http: body stream to {} cut short: {}", remote_, e.what());
      threw = true;
    } catch (...) {
      log().error("http: body stream threw a non-exception");
      threw = true;
    }
    if (threw) {  // cut the body short: closing without the last chunk tells the client it is
                  // incomplete
      slot->abandon();
      stream->cancel();
      ok = false;
      break;
    }
    std::optional<Chunk> chunk = slot->take_or_wait(this);
    if (!chunk) chunk = co_await await_slot(*slot);
    if (!chunk) {  // the client left, a write timed out, or a forced close
      stream->cancel();
      ok = false;
      break;
    }
    if (!chunk->has_value()) {
      if (chunked) ok = co_await write(asio::buffer(std::string_view("0\r\n\r\n")));
      break;
    }
    if ((*chunk)->empty()) continue;  // an empty chunk would end a chunked body
    if (!co_await write(chunk_frame(**chunk, chunked, size_line))) {
      stream->cancel();
      ok = false;
      break;
    }
  }
  watch_wanted_ = false;
  co_await stop_watch();
  co_return ok&& chunked && !client_gone_;
}

// While a handler works on a request, or a stream waits for its producer, nobody reads the socket,
// so a client that leaves would go unnoticed. This read notices: EOF or an error means the client
// is gone (a client that half-closes after its request counts as gone too). Bytes that arrive (a
// pipelined next request) are kept for the parser and end the watch (await_slot starts another).
void Connection::start_watch() {
  if (watching_ || client_gone_) return;
  if (buffer_.size() + kWatchRead > buffer_.max_size()) return;  // pipelined input already fills it
  watching_ = true;
  socket_.async_read_some(
      buffer_.prepare(kWatchRead), [self = shared_from_this()](error_code ec, size_t n) {
        self->watching_ = false;
        if (!ec) {
          self->buffer_.commit(n);
        } else if (ec != asio::error::operation_aborted) {
          self->client_gone_ =
              true;  // aborts come from stop_watch() or a close, which say so themselves
        }
        self->wake();
      });
}

Task<void> Connection::stop_watch() {
  if (!watching_) co_return;
  error_code ec;
  socket_.cancel(ec);
  while (watching_) {
    signal_.expires_at(Clock::time_point::max());
    co_await signal_.async_wait(kNoThrow);
  }
}

}  // namespace ajet::http::detail
