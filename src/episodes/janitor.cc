#include "episodes/janitor.h"

#include "common/log.h"

namespace ajet::episodes {

Janitor::Janitor(Registry& registry, std::chrono::milliseconds period,
                 std::function<void(const SweepResult&)> on_sweep)
    : registry_(registry),
      period_(period),
      on_sweep_(std::move(on_sweep)),
      thread_([this] { run(); }) {}

Janitor::~Janitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Janitor::run() {
  std::unique_lock<std::mutex> lock(mu_);
  auto next_wait = [&] {
    std::optional<std::chrono::milliseconds> due =
        registry_.next_sweep_due();  // a drain's grace ending
    return due ? std::min(period_, *due) : period_;
  };
  while (!cv_.wait_for(lock, next_wait(), [&] { return stopping_; })) {
    lock.unlock();
    try {
      SweepResult result = registry_.sweep();
      if (on_sweep_) on_sweep_(result);
    } catch (const std::exception& e) {
      log().error("janitor: sweep failed: {}", e.what());
    }
    lock.lock();
  }
}

}  // namespace ajet::episodes
