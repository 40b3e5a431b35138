// The janitor: a thread that calls Registry::sweep() every `period` (upstream: 10 s), so idle
// episodes are reclaimed, inactive clients expire and a ROLLING_POST drain ends (sooner than the
// period when the last episode it waits for passes its idle grace: Registry::next_sweep_due).
// It only calls sweep(); all logic (and the tests of it) live in the registry.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "episodes/registry.h"

namespace ajet::episodes {

class Janitor {
 public:
  // `on_sweep` (optional) sees each result, e.g. to drop tracker state of reclaimed episodes.
  Janitor(Registry& registry, std::chrono::milliseconds period,
          std::function<void(const SweepResult&)> on_sweep = nullptr);
  ~Janitor();  // stops and joins
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

 private:
  void run();

  Registry& registry_;
  std::chrono::milliseconds period_;
  std::function<void(const SweepResult&)> on_sweep_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ajet::episodes
