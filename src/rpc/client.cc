#include "rpc/client.h"

#include <condition_variable>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/log.h"
#include "rpc/connection.h"

namespace ajet::rpc {

// One connection with its reader thread and the requests in flight on it. A reconnect makes a
// new session, so a late failure of the old connection can never touch the new one's requests.
struct Client::Session {
  asio::io_context io;
  std::shared_ptr<Connection> connection;
  std::thread thread;
  std::string address;

  mutable std::mutex mu;
  bool open = true;
  std::string close_reason;  // set on the reader thread when the engine sent a close frame
  std::optional<ErrorCode> close_code;  // the code of that close frame
  std::unordered_map<uint64_t, std::shared_ptr<ReplyCallback>> pending;
  enum class Hello { kNone, kWaiting, kAccepted } hello = Hello::kNone;
  std::condition_variable hello_cv;

  ~Session() { shutdown(); }

  bool on_reader_thread() const { return thread.get_id() == std::this_thread::get_id(); }

  void shutdown() {
    if (!thread.joinable()) return;
    connection->close("client closed the connection");
    thread.join();
  }

  void on_frame(Frame&& frame) {
    switch (frame.kind) {
      case FrameKind::kReply:
      case FrameKind::kDone:
      case FrameKind::kError: break;
      case FrameKind::kClose: {
        Error e = frame_error(frame);
        std::lock_guard lk(mu);
        close_reason =
            "the engine closed the connection: " + std::string(error_code_name(e.code())) + ": " +
            e.what();
        close_code = e.code();
        connection->close(close_reason);
        return;
      }
      case FrameKind::kHello: {
        std::lock_guard lk(mu);
        if (hello == Hello::kWaiting) {
          hello = Hello::kAccepted;
          hello_cv.notify_all();
          return;
        }
        break;  // an acknowledgement nobody asked for: refused below
      }
      default: break;
    }
    if (frame.kind == FrameKind::kHello || frame.kind == FrameKind::kRequest ||
        frame.kind == FrameKind::kAbort) {
      connection->close_with_error(
          ErrorCode::kInvalidArgument,
          "unexpected '" + std::string(frame_kind_name(frame.kind)) +
              "' frame from the engine (it sends reply, done, error, close and, answering a "
              "hello, hello frames)");
      return;
    }
    std::shared_ptr<ReplyCallback> callback;
    {
      std::lock_guard lk(mu);
      auto it = pending.find(frame.id);
      if (it == pending.end()) return;  // forgotten after a call() timeout
      callback = frame.kind == FrameKind::kReply ? it->second : std::move(it->second);
      if (frame.kind != FrameKind::kReply) pending.erase(it);
    }
    (*callback)(std::move(frame));
  }

  void on_close(const std::string& reason) {
    std::unordered_map<uint64_t, std::shared_ptr<ReplyCallback>> failed;
    std::string message;
    // A lost connection is `unavailable` (worth a retry), except when the engine refused us for a
    // missing or wrong token: retrying with the same token cannot help.
    ErrorCode code = ErrorCode::kUnavailable;
    {
      std::lock_guard lk(mu);
      open = false;
      hello_cv.notify_all();
      failed.swap(pending);
      message = "engine connection lost (" + address +
                "): " + (close_reason.empty() ? reason : close_reason);
      if (close_code == ErrorCode::kUnauthenticated) code = *close_code;
    }
    if (!failed.empty())
      log().warn("rpc client: {}; failing {} in-flight requests", message, failed.size());
    for (auto& [id, callback] : failed) {
      try {
        (*callback)(make_error_frame(id, code, message));
      } catch (const std::exception& e) {
        log().error("rpc client: reply callback threw: {}", e.what());
      }
    }
  }

  // Sends the hello frame and waits for the engine's acknowledgement. Throws the engine's error
  // when it refuses (its close frame's code, e.g. kUnauthenticated), kUnavailable when the
  // connection is lost or no answer comes within `options.handshake_timeout`.
  void handshake(const ClientOptions& options) {
    std::unique_lock lk(mu);
    hello = Hello::kWaiting;
    lk.unlock();
    connection->send(encode_frame(make_hello_frame(options.token), options.limits));
    lk.lock();
    const bool answered = hello_cv.wait_for(lk, options.handshake_timeout,
                                            [&] { return hello == Hello::kAccepted || !open; });
    if (hello == Hello::kAccepted) return;
    const std::string where = "engine at " + address + " refused the connection: ";
    if (close_code) throw Error(*close_code, where + close_reason);
    throw Error(ErrorCode::kUnavailable,
                where + (answered ? "it closed the connection during the handshake"
                                  : "no answer to the hello frame within " +
                                        std::to_string(options.handshake_timeout.count()) + " ms"));
  }
};

Client::Client(std::string_view address, ClientOptions options)
    : address_(parse_address(address)), options_(std::move(options)) {}

Client::~Client() {
  try {
    close();
  } catch (const std::exception& e) {
    log().error("rpc client: {}", e.what());
  }
}

std::shared_ptr<Client::Session> Client::session() const {
  std::lock_guard lk(mu_);
  return session_;
}

void Client::connect() {
  close();
  auto s = std::make_shared<Session>();
  s->address = to_string(address_);
  Socket socket = connect_socket(s->io, address_);
  s->connection = std::make_shared<Connection>(
      std::move(socket),
      ConnectionOptions{options_.limits, options_.max_queued_bytes, options_.close_grace, {}},
      "engine " + s->address);
  Session* raw = s.get();
  s->connection->start([raw](Frame&& frame) { raw->on_frame(std::move(frame)); },
                       [raw](const std::string& reason) { raw->on_close(reason); });
  s->thread = std::thread([raw] { raw->io.run(); });
  if (!options_.token.empty()) s->handshake(options_);  // on failure ~Session closes and joins
  std::lock_guard lk(mu_);
  session_ = std::move(s);
}

void Client::connect_with_retry(const RetryPolicy& policy) {
  auto deadline = std::chrono::steady_clock::now() + policy.timeout;
  auto backoff = policy.initial_backoff;
  for (int attempt = 1;; ++attempt) {
    try {
      connect();
      if (attempt > 1)
        log().info("rpc client: connected to {} after {} attempts", to_string(address_), attempt);
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnavailable) throw;
      bool cancelled = policy.cancelled && policy.cancelled();
      if (cancelled || std::chrono::steady_clock::now() + backoff > deadline) {
        throw Error(ErrorCode::kUnavailable,
                    "the engine at " + to_string(address_) + " did not accept a connection " +
                        (cancelled ? "before the wait was cancelled"
                                   : "within " + std::to_string(policy.timeout.count()) + " ms") +
                        " (" + std::to_string(attempt) + " attempts); last error: " + e.what());
      }
    }
    std::this_thread::sleep_for(backoff);  // backoff between attempts, not synchronisation
    backoff = std::min(backoff * 2, policy.max_backoff);
  }
}

bool Client::connected() const {
  auto s = session();
  if (!s) return false;
  std::lock_guard lk(s->mu);
  return s->open;
}

void Client::close() {
  std::shared_ptr<Session> s;
  {
    std::lock_guard lk(mu_);
    if (session_ && session_->on_reader_thread()) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "rpc client: close() called from a reply callback");
    }
    s.swap(session_);
  }
  if (s) s->shutdown();
}

uint64_t Client::start(Frame request, ReplyCallback on_reply) {
  auto s = session();
  if (!s)
    throw Error(ErrorCode::kUnavailable, "not connected to the engine at " + to_string(address_));
  request.kind = FrameKind::kRequest;
  request.id = next_id_.fetch_add(1);
  uint64_t id = request.id;
  std::string method = request.method;
  EncodedFrame encoded;
  try {
    encoded = encode_frame(std::move(request), options_.limits);
  } catch (const Error& e) {
    throw Error(e.code(), "engine request '" + method + "': " + e.what());
  }
  {
    std::lock_guard lk(s->mu);
    if (!s->open) {
      throw Error(ErrorCode::kUnavailable,
                  "engine connection lost (" + s->address +
                      "): " + (s->close_reason.empty() ? "closed" : s->close_reason));
    }
    s->pending.emplace(id, std::make_shared<ReplyCallback>(std::move(on_reply)));
  }
  // If the connection is closing, send() drops the frame and on_close fails the request.
  s->connection->send(std::move(encoded));
  return id;
}

bool Client::abort(uint64_t request_id) {
  auto s = session();
  if (!s) return false;
  {
    std::lock_guard lk(s->mu);
    if (s->pending.count(request_id) == 0) return false;
  }
  return s->connection->send(encode_frame(make_abort_frame(request_id), options_.limits));
}

Client::CallResult Client::call(Frame request, std::chrono::milliseconds timeout) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    CallResult result;
  };
  if (auto s = session(); s && s->on_reader_thread()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "rpc client: call() from a reply callback would deadlock");
  }
  auto state = std::make_shared<State>();
  std::string method = request.method;
  uint64_t id = start(std::move(request), [state](Frame&& frame) {
    std::lock_guard lk(state->mu);
    if (frame.kind == FrameKind::kReply) {
      state->result.replies.push_back(std::move(frame));
    } else {
      state->result.done = std::move(frame);
      state->finished = true;
      state->cv.notify_all();
    }
  });
  std::unique_lock lk(state->mu);
  if (!state->cv.wait_for(lk, timeout, [&] { return state->finished; })) {
    lk.unlock();
    abort(id);
    if (auto s = session()) {
      std::lock_guard slk(s->mu);
      s->pending.erase(id);
    }
    throw Error(ErrorCode::kUnavailable, "engine call '" + method + "' (request " +
                                             std::to_string(id) + ") got no final reply within " +
                                             std::to_string(timeout.count()) + " ms; aborted");
  }
  if (state->result.done.kind == FrameKind::kError) {
    Error e = frame_error(state->result.done);
    throw Error(e.code(), "engine call '" + method + "': " + e.what());
  }
  return std::move(state->result);
}

size_t Client::in_flight() const {
  auto s = session();
  if (!s) return 0;
  std::lock_guard lk(s->mu);
  return s->pending.size();
}

}  // namespace ajet::rpc
