#include "http/stream.h"

#include <stdexcept>

namespace ajet::http {

namespace {
// next() joins queued chunks up to this many bytes: fewer, larger writes when the producer is
// ahead.
constexpr size_t kMaxJoinedBytes = 64 * 1024;
}  // namespace

bool ChannelStream::push(std::string chunk) {
  Deliver deliver;
  {
    std::unique_lock lock(mu_);
    if (capacity_ > 0) {
      space_.wait(lock, [&] { return queue_.size() < capacity_ || cancelled_ || closed_; });
    }
    if (cancelled_ || closed_) return false;
    if (pending_) {
      deliver = std::move(pending_);
      pending_ = Deliver();
    } else if (max_queued_bytes_ > 0 && !queue_.empty() &&
               queued_bytes_ + chunk.size() > max_queued_bytes_) {
      overflowed_ = true;  // the reader stopped reading: stop the producer rather than buffer more
    } else {
      queued_bytes_ += chunk.size();
      queue_.push_back(std::move(chunk));
      return true;
    }
  }
  if (!deliver) {
    cancel();
    return false;
  }
  deliver(std::move(chunk));  // outside the lock: it may post to an I/O thread
  return true;
}

void ChannelStream::close() {
  Deliver deliver;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (!pending_) {
      space_.notify_all();
      return;
    }
    deliver = std::move(pending_);
    pending_ = Deliver();
  }
  space_.notify_all();
  deliver(std::nullopt);
}

bool ChannelStream::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

size_t ChannelStream::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t ChannelStream::queued_bytes() const {
  std::lock_guard lock(mu_);
  return queued_bytes_;
}

bool ChannelStream::overflowed() const {
  std::lock_guard lock(mu_);
  return overflowed_;
}

void ChannelStream::on_cancel(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!cancelled_) {
      on_cancel_ = std::move(fn);
      return;
    }
  }
  fn();
}

void ChannelStream::next(Deliver deliver) {
  Chunk chunk;
  std::function<void()> finished_cancel;  // destroyed outside the lock
  {
    std::lock_guard lock(mu_);
    if (overflowed_) {  // cut the body short: a clean end would pass a truncated answer for a whole
                        // one
      throw std::runtime_error("the client read too slowly: more than " +
                               std::to_string(max_queued_bytes_) +
                               " bytes of the stream waited, so it was cancelled");
    }
    if (cancelled_) return;  // `deliver` dies unused: the server ends the body
    if (queue_.empty()) {
      if (!closed_) {
        pending_ = std::move(deliver);
        return;
      }
      chunk = std::nullopt;
      // The whole body is out; a cancel can no longer matter. Dropping the callback now breaks
      // the usual cycle (callback → producer state → this stream).
      finished_cancel = std::move(on_cancel_);
      on_cancel_ = nullptr;
    } else {
      chunk = std::move(queue_.front());
      queue_.pop_front();
      while (!queue_.empty() && chunk->size() + queue_.front().size() <= kMaxJoinedBytes) {
        chunk->append(queue_.front());
        queue_.pop_front();
      }
      queued_bytes_ -= chunk->size();
    }
  }
  space_.notify_all();
  deliver(std::move(chunk));
}

void ChannelStream::cancel() {
  std::function<void()> fn;
  Deliver dropped;
  {
    std::lock_guard lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    queue_.clear();
    queued_bytes_ = 0;
    dropped = std::move(pending_);
    pending_ = Deliver();
    fn = std::move(on_cancel_);
  }
  space_.notify_all();
  if (fn) fn();
}

}  // namespace ajet::http
