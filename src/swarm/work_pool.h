// A few threads for work that may block (store reads, unpacking an archive, starting or stopping
// the engine), so HTTP I/O threads never wait on disk or on a process. FIFO; tasks must not throw
// (exceptions are caught and logged). Never used for per-token work.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ajet::swarm {

class WorkPool {
 public:
  WorkPool(size_t threads, std::string name);
  ~WorkPool();  // runs what is queued, then joins
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  void post(std::function<void()> task);
  size_t queued() const;  // tasks waiting for a thread (GET /metrics)

 private:
  void run();

  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ajet::swarm
