// ChannelStream: a BodyStream fed by a producer on any thread (an engine emitting tokens), drained
// by the server as the socket accepts data. Thread-safe; never blocks an I/O thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "http/message.h"

namespace ajet::http {

class ChannelStream final : public BodyStream {
 public:
  // capacity 0: unbounded (push never blocks; memory grows if the client reads slower than the
  // producer pushes). capacity N: push blocks while N chunks wait, so never push a bounded
  // stream from an I/O thread (a handler); an unbounded one is fine anywhere.
  explicit ChannelStream(size_t capacity = 0) : capacity_(capacity) {}

  // Queues a chunk (an SSE event, a token). False, and the chunk is dropped, once the stream was
  // cancelled (the client went away) or closed: the producer should stop then.
  bool push(std::string chunk);
  // Ends the stream after the queued chunks. Idempotent.
  void close();
  bool cancelled() const;
  // Called once when the stream is cancelled (at once, on this thread, if it already was). Runs on
  // the canceller's thread (an I/O thread), so it must not block: signal the producer and return.
  // Released, uncalled, once the whole body has been handed to the server.
  void on_cancel(std::function<void()> fn);
  size_t queued() const;

  // BodyStream: hands over everything queued (joined, up to 64 KiB) or waits for the next push.
  void next(Deliver deliver) override;
  void cancel() override;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable space_;
  std::deque<std::string> queue_;
  Deliver pending_;  // the server's request, when it asked and nothing was queued
  bool closed_ = false;
  bool cancelled_ = false;
  std::function<void()> on_cancel_;
};

}  // namespace ajet::http
