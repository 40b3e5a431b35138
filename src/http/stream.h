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
  // capacity 0: push never blocks. capacity N: push blocks while N chunks wait, so never push a
  // bounded stream from an I/O thread (a handler); a non-blocking one is fine anywhere.
  // max_queued_bytes 0: the queue may grow without bound while the client reads slower than the
  // producer pushes. N: a push that would queue more than N bytes (the queue holding something
  // already) cancels the stream instead: the producer stops, on_cancel runs, and the body is cut
  // short (the client sees it incomplete). A reader that stops reading costs at most N bytes.
  explicit ChannelStream(size_t capacity = 0, size_t max_queued_bytes = 0)
      : capacity_(capacity), max_queued_bytes_(max_queued_bytes) {}

  // Queues a chunk (an SSE event, a token). False, and the chunk is dropped, once the stream was
  // cancelled (the client went away, or its backlog passed max_queued_bytes) or closed: the
  // producer should stop then.
  bool push(std::string chunk);
  // Ends the stream after the queued chunks. Idempotent.
  void close();
  bool cancelled() const;
  // Called once when the stream is cancelled (at once, on this thread, if it already was). Runs on
  // the canceller's thread (an I/O thread), so it must not block: signal the producer and return.
  // Released, uncalled, once the whole body has been handed to the server.
  void on_cancel(std::function<void()> fn);
  size_t queued() const;
  size_t queued_bytes() const;
  // True once a push found the backlog over max_queued_bytes (and cancelled the stream).
  bool overflowed() const;

  // BodyStream: hands over everything queued (joined, up to 64 KiB) or waits for the next push.
  void next(Deliver deliver) override;
  void cancel() override;

 private:
  const size_t capacity_;
  const size_t max_queued_bytes_;
  mutable std::mutex mu_;
  std::condition_variable space_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool overflowed_ = false;
  Deliver pending_;  // the server's request, when it asked and nothing was queued
  bool closed_ = false;
  bool cancelled_ = false;
  std::function<void()> on_cancel_;
};

}  // namespace ajet::http
