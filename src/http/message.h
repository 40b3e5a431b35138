// The adapter boundary of the HTTP layer: the plain request/response structs every handler sees.
// No Boost type may ever appear here or in any other src/http/*.h that handlers include; the server
// (server.cc) and client (client.cc) are the only places that know about Beast and Asio.
#pragma once

#include <atomic>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ajet::http {

// ASCII case-insensitive comparison, as HTTP field names need.
bool iequals(std::string_view a, std::string_view b);

// Header fields in arrival order; lookups ignore ASCII case (RFC 9110 §5.1). Duplicates are kept.
class Headers {
 public:
  using Field = std::pair<std::string, std::string>;

  Headers() = default;
  Headers(std::initializer_list<Field> fields) : fields_(fields) {}

  void add(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  void set(std::string name, std::string value);  // replaces every field of that name
  void erase(std::string_view name);
  std::optional<std::string_view> get(std::string_view name) const;  // the first field of that name
  std::string get_or(std::string_view name, std::string_view fallback) const;
  bool has(std::string_view name) const { return get(name).has_value(); }

  std::vector<Field>::const_iterator begin() const { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const { return fields_.end(); }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }

 private:
  std::vector<Field> fields_;
};

namespace detail {

// What a OnceCallback hands its value to. claim() lets exactly one caller through; `handles`
// counts live OnceCallback copies so a target whose every handle died unused still gets a value.
template <class T>
class OnceTarget {
 public:
  virtual ~OnceTarget() = default;
  virtual void accept(T value) = 0;
  bool claim() { return !used_.exchange(true, std::memory_order_acq_rel); }
  std::atomic<int> handles{0};

 private:
  std::atomic<bool> used_{false};
};

// The value a target receives when every handle was dropped without being called: T{} (for a
// Chunk: the end of the stream), specialised below for Response (a 500 error).
template <class T>
T dropped_value() {
  return T{};
}

template <class T>
class FunctionTarget final : public OnceTarget<T> {
 public:
  explicit FunctionTarget(std::function<void(T)> fn) : fn_(std::move(fn)) {}
  void accept(T value) override { fn_(std::move(value)); }

 private:
  std::function<void(T)> fn_;
};

}  // namespace detail

// A copyable callable that delivers one value, exactly once, from any thread. Later calls return
// false and drop their value. When the last copy is destroyed without having been called, the
// target receives dropped_value<T>() (for a response: a 500 error), so no request can hang because
// a handler forgot to answer. Copying is cheap (a shared pointer plus an atomic increment).
template <class T>
class OnceCallback {
 public:
  OnceCallback() = default;
  explicit OnceCallback(std::shared_ptr<detail::OnceTarget<T>> target)
      : target_(std::move(target)) {
    if (target_) target_->handles.fetch_add(1, std::memory_order_relaxed);
  }
  OnceCallback(const OnceCallback& other) : target_(other.target_) {
    if (target_) target_->handles.fetch_add(1, std::memory_order_relaxed);
  }
  OnceCallback(OnceCallback&& other) noexcept : target_(std::move(other.target_)) {}
  OnceCallback& operator=(const OnceCallback& other) {
    if (this != &other) {
      release();
      target_ = other.target_;
      if (target_) target_->handles.fetch_add(1, std::memory_order_relaxed);
    }
    return *this;
  }
  OnceCallback& operator=(OnceCallback&& other) noexcept {
    if (this != &other) {
      release();
      target_ = std::move(other.target_);
    }
    return *this;
  }
  ~OnceCallback() { release(); }

  // Hands `value` over; false (value dropped) when this callback was already used or is empty.
  bool operator()(T value) const {
    if (!target_ || !target_->claim()) return false;
    target_->accept(std::move(value));
    return true;
  }
  explicit operator bool() const { return target_ != nullptr; }

  // A callback that calls `fn` (with dropped_value<T>() if dropped unused): for unit tests of
  // handlers and streams without a server, and for adapters.
  static OnceCallback from(std::function<void(T)> fn) {
    return OnceCallback(std::make_shared<detail::FunctionTarget<T>>(std::move(fn)));
  }

 private:
  void release() {
    if (target_ && target_->handles.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
        target_->claim()) {
      target_->accept(detail::dropped_value<T>());
    }
    target_.reset();
  }

  std::shared_ptr<detail::OnceTarget<T>> target_;
};

// One piece of a streamed body; std::nullopt marks the end of the stream.
using Chunk = std::optional<std::string>;
using Deliver = OnceCallback<Chunk>;

// A body produced over time: an async generator. The server calls next() on an I/O thread, once,
// then again only after the previous chunk was written to the socket (natural backpressure). The
// stream answers by calling deliver(chunk) exactly once, now or later, from any thread;
// deliver(std::nullopt) ends the body. next() must not block. cancel() is called (from an I/O
// thread, or from the thread that responded if the connection was already gone) when the client
// went away or the server is closing; after it, deliver calls are ignored. An empty chunk is
// skipped.
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  virtual void next(Deliver deliver) = 0;
  virtual void cancel() {}
};

struct Response {
  int status = 200;
  Headers headers;  // Content-Length, Transfer-Encoding and Connection are the server's own
  std::string body;
  // When set, the body is sent with `Transfer-Encoding: chunked` as the stream produces it; a
  // non-empty `body` goes out first. `Connection: close` in `headers` closes after this response.
  std::shared_ptr<BodyStream> stream;
};

using Respond = OnceCallback<Response>;

// What a request says before its body: all a head check (below) may look at.
struct RequestHead {
  std::string method;                        // as sent: "GET", "POST", …
  std::string target;                        // the raw request-target: "/a/b?x=1"
  std::string path;                          // target up to '?', not percent-decoded
  std::map<std::string, std::string> query;  // decoded query parameters (last one wins)
  Headers headers;
  std::string remote_address;  // "127.0.0.1:53422"
  int version = 11;            // 10 or 11 (HTTP/1.0, HTTP/1.1)
};

// Fired once when the client of a request in flight hangs up (or the server closes its connection
// before the answer was written): a handler that works long for it (an engine call) stops then.
// Thread-safe. cancel() runs the callbacks on its own thread (the server's: an I/O thread), so a
// callback must not block: signal the worker and return.
class CancelSignal {
 public:
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Runs `fn` once the signal fires: later, or at once on this thread when it already has.
  void on_cancel(std::function<void()> fn);
  void cancel();  // idempotent

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> callbacks_;
};

struct Request : RequestHead {
  std::map<std::string, std::string> path_params;  // filled by Router from `{name}` segments
  std::string body;
  // Set by the server for every request it hands to a handler (null elsewhere, e.g. in unit tests).
  std::shared_ptr<CancelSignal> cancel;
};

// Handlers run on an I/O thread and must not block: answer now or later (from any thread) by
// calling respond exactly once. A handler that throws before responding gets an error response
// (ajet::Error → its status, anything else → 500); the server keeps serving.
using Handler = std::function<void(Request request, Respond respond)>;

// The error body a route gives for the errors the server makes on its behalf while reading its
// request (413 body too large, 503 too many body bytes held): its API's own error shape.
using ErrorShape =
    std::function<Response(int status, const std::string& message, const std::string& code)>;

// How the server reads one route's request bodies; shared, built once per route.
struct BodyRules {
  std::optional<size_t> max_body_bytes;  // nullopt: the server's max_body_bytes
  std::string limit_name;  // named in the 413 with the limit: how to change it ("--max-json-mb")
  ErrorShape error_shape;  // null: error_response's OpenAI shape
};

// The verdict on a request's head, given before its body is read (and before `Expect:
// 100-continue` is answered): either an answer now (the body, if any, is never read and the
// connection closes after the answer) or the rules to read the body by (null: the server's own
// max_body_bytes and error shape).
struct HeadVerdict {
  std::optional<Response> answer;
  std::shared_ptr<const BodyRules> body;
};
// Runs on an I/O thread for every request, so it must be quick and must not block. It may throw:
// ajet::Error → its status, anything else → 500, both answered at once.
using HeadCheck = std::function<HeadVerdict(const RequestHead& head)>;

namespace detail {
template <>
Response dropped_value<Response>();
}  // namespace detail

// Splits a request-target into path and decoded query parameters; '+' in a query means a space.
void split_target(std::string_view target, std::string& path,
                  std::map<std::string, std::string>& query);
// Percent-decoding; malformed escapes are kept as they are.
std::string percent_decode(std::string_view text, bool plus_is_space);

}  // namespace ajet::http
