// Engine RPC client: the front's connection to `ajet-engine`. Thread-safe; many requests are
// multiplexed on one connection and their reply frames are delivered to per-request callbacks
// from one reader thread. No libtorch, no Asio in this header. It never retries a request on its
// own: a lost connection fails every in-flight request with `unavailable` and the owner decides.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rpc/address.h"
#include "rpc/frame.h"

namespace ajet::rpc {

struct ClientOptions {
  FrameLimits limits;                    // applied to replies read and to requests before sending
  size_t max_queued_bytes = 1ull << 30;  // requests waiting to be written
  std::chrono::milliseconds close_grace{2000};
  // The engine's shared secret (rpc/token.h; resolve_token() reads --token-file or
  // AJET_ENGINE_TOKEN). Not empty: connect() opens every connection with a hello frame carrying
  // it and returns once the engine acknowledged it. Empty: no handshake (an engine with a token
  // then answers the first request with `unauthenticated`).
  std::string token;
  std::chrono::milliseconds handshake_timeout{10'000};  // for the hello's acknowledgement
};

// Backoff for connecting while the engine boots.
struct RetryPolicy {
  std::chrono::milliseconds timeout{60'000};  // give up after this long in total
  std::chrono::milliseconds initial_backoff{20};
  std::chrono::milliseconds max_backoff{1'000};  // doubling up to this
  std::function<bool()> cancelled;  // optional: stop early (e.g. the engine process died)
};

class Client {
 public:
  // Receives every frame of one request: zero or more kReply frames, then exactly one final
  // kDone or kError frame (a lost connection arrives as kError with code `unavailable`). Runs on
  // the client's reader thread: it must be cheap and must not block, and must not call close(),
  // connect() or call() (those wait for that thread). start() and abort() are fine.
  using ReplyCallback = std::function<void(Frame&& frame)>;

  // Parses the address (throws kInvalidArgument); does not connect.
  explicit Client(std::string_view address, ClientOptions options = {});
  ~Client();  // close()
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One attempt; throws Error(kUnavailable) naming the address. Replaces a previous connection
  // (whose in-flight requests get their `unavailable` error first). With a token, the handshake
  // is part of it: a refused token throws the engine's error (kUnauthenticated: wrong token).
  void connect();
  // Attempts until connected, with exponential backoff; throws Error(kUnavailable) naming the
  // address, the number of attempts and the last OS error when `policy.timeout` passes. Errors
  // other than kUnavailable (a refused token) are thrown at once.
  void connect_with_retry(const RetryPolicy& policy = {});
  bool connected() const;
  // Closes the connection; every in-flight request gets `unavailable: engine connection closed`.
  void close();
  const Address& address() const { return address_; }

  // Sends `request` (its method and body and arrays; kind and id are set here) and returns the
  // request id. `on_reply` may run before start() returns. Throws kUnavailable when not connected,
  // kResourceExhausted when the frame exceeds the limits (nothing is sent then).
  uint64_t start(Frame request, ReplyCallback on_reply);
  // Asks the engine to abort an in-flight request; its final frame still arrives through its
  // callback. Returns false when the request is not in flight (already finished or unknown).
  bool abort(uint64_t request_id);

  // Blocking one-shot call for methods like `status` and `train_step`. Returns the streamed
  // replies (usually none) and the final kDone frame; a kError reply is thrown as ajet::Error with
  // its code. On timeout the request is aborted and forgotten, and kUnavailable is thrown.
  // Must not be called from a ReplyCallback.
  struct CallResult {
    std::vector<Frame> replies;
    Frame done;
  };
  CallResult call(Frame request, std::chrono::milliseconds timeout);

  // Requests sent on the current connection that have no final frame yet.
  size_t in_flight() const;

 private:
  struct Session;
  std::shared_ptr<Session> session() const;

  Address address_;
  ClientOptions options_;
  mutable std::mutex mu_;  // guards session_
  std::shared_ptr<Session> session_;
  std::atomic<uint64_t> next_id_{1};  // never reused, across reconnects too
};

}  // namespace ajet::rpc
