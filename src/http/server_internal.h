// Internals of HttpServer, shared by server.cc (listening, threads, shutdown) and connection.cc
// (one HTTP/1.1 connection). Includes Asio and Beast: never include it outside those two files.
//
// Threading: each I/O thread runs its own io_context (no strands, no locks on the hot path) and a
// connection lives on one thread for its whole life. Answers from other threads (Respond, Deliver)
// land in a Slot and wake the connection by posting to its io_context through a Gate, which the
// server closes before destroying the io_contexts, so a late answer is dropped, never a crash.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "http/message.h"
#include "http/server.h"

namespace ajet::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// Concrete executor types everywhere: no type-erased any_io_executor on the hot path.
using Executor = asio::io_context::executor_type;
using Socket = asio::basic_stream_socket<asio::ip::tcp, Executor>;
using Acceptor = asio::basic_socket_acceptor<asio::ip::tcp, Executor>;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, Executor>;
using SignalSet = asio::basic_signal_set<Executor>;
template <class T>
using Task = asio::awaitable<T, Executor>;
inline constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable_t<Executor>{});

class Connection;

// Posts to one worker's io_context until the server closes it; safe from any thread.
class Gate {
 public:
  explicit Gate(asio::io_context& ioc) : ioc_(&ioc) {}
  template <class F>
  void post(F&& fn) {
    std::lock_guard lock(mu_);
    if (ioc_) asio::post(*ioc_, std::forward<F>(fn));
  }
  void close() {
    std::lock_guard lock(mu_);
    ioc_ = nullptr;
  }

 private:
  std::mutex mu_;
  asio::io_context* ioc_;
};

struct Worker {
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<Executor>> guard;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>(ioc);
  std::unordered_set<Connection*> connections;  // this worker's thread only
  bool stopping = false;                        // this worker's thread only
  // Connections accepted for this worker and not yet finished (the acceptor's view, for choosing a
  // worker under its share; `connections` is the exact one, on the worker's thread).
  std::atomic<size_t> assigned{0};
  std::thread thread;
};

// What every connection shares with the server.
struct Core {
  ServerOptions options;
  Handler handler;
  HeadCheck head_check;        // null: every request is read with the server's own limits
  size_t max_connections = 0;  // resolved (never 0)
  size_t worker_share = 0;     // max_connections / io_threads, rounded up
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> shed{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> answered_at_head{0};
  std::atomic<uint64_t> body_bytes_read{0};
  std::atomic<size_t> body_bytes_held{0};  // see ServerOptions::max_body_memory_bytes
  std::atomic<int64_t> refusing{0};        // connections being answered 503 at the cap
  std::atomic<int64_t> live{0};            // connections accepted and not yet finished
  std::atomic<bool> stopping{false};
  std::function<void()> on_drained;  // called once `live` reaches 0 while stopping

  // Takes `bytes` more of the body-memory budget; false (nothing taken) when they do not fit.
  bool hold_body_bytes(size_t bytes) {
    size_t held = body_bytes_held.load(std::memory_order_relaxed);
    do {
      if (bytes > options.max_body_memory_bytes || held > options.max_body_memory_bytes - bytes)
        return false;
    } while (!body_bytes_held.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    return true;
  }
  void release_body_bytes(size_t bytes) {
    body_bytes_held.fetch_sub(bytes, std::memory_order_relaxed);
  }
  // A connection (or a refusal) finished.
  void connection_done() {
    if (live.fetch_sub(1) == 1 && stopping.load()) on_drained();
  }
};

// Worker thread: takes a freshly accepted socket, making room at the worker's share of
// max_connections (connection.cc).
void admit(Core& core, Worker& worker, Socket socket);

// Whether a response with this status carries a body (1xx, 204 and 304 never do).
bool has_body(int status);

inline void cancel_orphan(Response& response) {
  if (response.stream) response.stream->cancel();
}
inline void cancel_orphan(Chunk&) {}

// One value (a Response, a Chunk) handed from any thread to a connection waiting on its I/O thread.
template <class T>
class Slot final : public OnceTarget<T>, public std::enable_shared_from_this<Slot<T>> {
 public:
  explicit Slot(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}

  void accept(T value) override;  // any thread

  // I/O thread: the value if it arrived; otherwise remembers that `waiter` sleeps on it.
  std::optional<T> take_or_wait(Connection* waiter) {
    std::lock_guard lock(mu_);
    if (value_) {
      std::optional<T> out = std::move(value_);
      value_.reset();
      waiting_ = false;
      waiter_ = nullptr;
      return out;
    }
    waiting_ = true;
    waiter_ = waiter;
    return std::nullopt;
  }

  // I/O thread: the connection stops listening; a value that arrives later is discarded (a
  // response's stream cancelled). Returns a value that had already arrived, for the same fate.
  std::optional<T> abandon() {
    std::lock_guard lock(mu_);
    abandoned_ = true;
    waiting_ = false;
    waiter_ = nullptr;
    std::optional<T> out = std::move(value_);
    value_.reset();
    return out;
  }

 private:
  void wake();  // I/O thread

  std::mutex mu_;
  std::optional<T> value_;
  bool waiting_ = false;
  bool abandoned_ = false;
  Connection* waiter_ = nullptr;  // read and written on the I/O thread only
  std::shared_ptr<Gate> gate_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Core& core, Worker& worker, Socket socket);

  // Registers the connection with its worker (worker thread), before run().
  void begin();
  // The connection's whole life: requests until close, then deregistration.
  static Task<void> run(std::shared_ptr<Connection> self);

  void on_stop();      // worker thread; graceful: idle closes now, busy after its response
  void force_close();  // worker thread; immediate: in-flight work abandoned, streams cancelled
  void shed();  // worker thread; closed to make room at max_connections (idle or slow header)
  void wake() { signal_.cancel(); }

  // For shedding (worker thread): waiting for a request, or still reading a request's header, and
  // since when.
  bool idle() const { return phase_ == Phase::kIdle; }
  bool reading_header() const {
    return phase_ == Phase::kReading && parser_ && !parser_->is_header_done();
  }
  Clock::time_point phase_since() const { return phase_since_; }

 private:
  enum class Phase { kIdle, kReading, kHandling, kWriting };

  // One request as read: its head and body, or an answer given from its head alone.
  struct Incoming {
    Request request;
    std::optional<Response> answer;  // answered from the head (a request without a body)
    bool keep_alive = false;
    bool close = false;  // the connection is done: rejected and drained, or failed
  };

  void end();
  void close_socket();
  void set_deadline(std::chrono::milliseconds timeout);
  void clear_deadline() { deadline_ = Clock::time_point::max(); }
  void arm_watchdog();
  void enter(Phase phase);

  Task<void> serve();
  Task<Incoming> read_request();
  bool parse_buffered(error_code& ec, bool whole_message);
  Task<error_code> read_header();
  Task<error_code> read_body();
  HeadVerdict check_head(const RequestHead& head);
  size_t body_limit() const;
  std::optional<Response> admit_body();
  bool hold_body(size_t total);
  void release_body();
  Response body_error(int status, const std::string& message, const std::string& code) const;
  Response body_too_large(std::optional<uint64_t> declared) const;
  Response body_memory_full(uint64_t wanted) const;
  Task<void> reject_bad_request(error_code ec);
  Task<void> reject(Response response);
  std::optional<Response> call_handler(Request request,
                                       const std::shared_ptr<Slot<Response>>& slot);
  template <class T>
  Task<std::optional<T>> await_slot(Slot<T>& slot);

  // connection_write.cc
  std::array<asio::const_buffer, 2> prepare_plain(Response& response, bool keep_alive,
                                                  bool head_only, int version);
  Task<bool> write_stream(Response& response, bool keep_alive, int version);
  void start_watch();
  Task<void> stop_watch();
  void serialize_head(const Response& response, bool keep_alive, bool chunked, int version,
                      bool no_length);
  template <class Buffers>
  size_t write_now(const Buffers& buffers, error_code& ec);
  template <class Buffers>
  Task<bool> write_rest(const Buffers& buffers, size_t done);
  template <class Buffers>
  Task<bool> write(const Buffers& buffers);

  Core& core_;
  Worker& worker_;
  Socket socket_;
  Timer watchdog_;  // enforces deadline_
  Timer signal_;    // cancelled to wake the coroutine (Slot, watch); every wake is re-checked
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string head_;  // the serialized response head, reused across requests
  std::string remote_;
  Clock::time_point deadline_;
  Phase phase_ = Phase::kIdle;
  Clock::time_point phase_since_ = Clock::now();
  std::shared_ptr<const BodyRules>
      body_rules_;                 // the request being read: its route's (null: the server's)
  size_t body_held_ = 0;           // its bytes in Core::body_bytes_held
  bool body_memory_full_ = false;  // a chunked body outgrew what the budget had left
  std::shared_ptr<CancelSignal> cancel_;  // the request in flight's, until its answer is written
  bool stopping_ = false;
  bool force_closed_ = false;
  bool timed_out_ = false;
  bool finished_ = false;
  bool watch_wanted_ = false;  // while handling or streaming: keep a watch on the socket
  bool watching_ = false;      // a read that notices a client leaving is pending
  bool client_gone_ = false;
};

template <class T>
void Slot<T>::accept(T value) {
  bool orphan = false;
  bool wake_up = false;
  {
    std::lock_guard lock(mu_);
    if (abandoned_) {
      orphan = true;
    } else {
      value_ = std::move(value);
      wake_up = waiting_;  // otherwise the connection finds it without being woken
      waiting_ = false;
    }
  }
  if (orphan) {
    cancel_orphan(value);  // the client is gone: stop a stream nobody will read
  } else if (wake_up) {
    gate_->post([self = this->shared_from_this()] { self->wake(); });
  }
}

template <class T>
void Slot<T>::wake() {
  if (waiter_) waiter_->wake();
}

template <class T>
Task<std::optional<T>> Connection::await_slot(Slot<T>& slot) {
  for (;;) {
    if (std::optional<T> value = slot.take_or_wait(this)) co_return value;
    if (force_closed_ || client_gone_ || timed_out_) {
      if (std::optional<T> late = slot.abandon()) cancel_orphan(*late);
      co_return std::nullopt;
    }
    if (watch_wanted_ && !watching_) start_watch();  // pipelined bytes ended the last watch
    signal_.expires_at(Clock::time_point::max());
    co_await signal_.async_wait(kNoThrow);  // a wake() cancels it; the loop re-checks
  }
}

// Writes what the (non-blocking) socket takes right now; no event-loop round trip. Returns the
// bytes written; `ec` is set only on a real error, not when the socket is merely full.
template <class Buffers>
size_t Connection::write_now(const Buffers& buffers, error_code& ec) {
  size_t total = asio::buffer_size(buffers);
  size_t done = 0;
  beast::buffers_suffix<Buffers> rest(buffers);
  while (done < total) {
    size_t n = socket_.write_some(rest, ec);
    if (ec) {
      if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
      break;
    }
    rest.consume(n);
    done += n;
  }
  return done;
}

// The part of `buffers` after `done`, written asynchronously within the write timeout.
template <class Buffers>
Task<bool> Connection::write_rest(const Buffers& buffers, size_t done) {
  beast::buffers_suffix<Buffers> rest(buffers);
  rest.consume(done);
  set_deadline(core_.options.write_timeout);
  auto [ec, n] = co_await asio::async_write(socket_, rest, kNoThrow);
  clear_deadline();
  co_return !ec;
}

template <class Buffers>
Task<bool> Connection::write(const Buffers& buffers) {
  error_code ec;
  size_t done = write_now(buffers, ec);
  if (ec) co_return false;
  if (done == asio::buffer_size(buffers)) co_return true;
  co_return co_await write_rest(buffers, done);
}

}  // namespace ajet::http::detail
