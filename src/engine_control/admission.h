// Admission by KV-cache pressure: how many episodes the front lets clients hold at once. A hand-set
// pool size (ajet.rollout.max_env_worker) is either too small for a large cache or too large for a
// small one; past what the engines' KV caches hold, more episodes only queue and get preempted
// (their blocks freed and their prompts recomputed). The controller reads every replica's KV usage
// and preemptions about once a second and adjusts a cap on claimed episodes the way TCP adjusts its
// window (additive increase, multiplicative decrease): it trims the cap when the fullest replica's
// usage is high or any replica preempted a sequence, and grows it back while usage is low. The cap
// starts at, and never exceeds, max_env_worker, so a front whose engines never feel pressure admits
// exactly as without it. Claims beyond the cap are answered as an empty pool, which every client
// waits out. No libtorch; the controller itself does no I/O (AdmissionLoop polls).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "common/json.h"

namespace ajet::rpc {
class Client;
}

namespace ajet::engine_control {

struct AdmissionOptions {
  double low_usage = 0.70;   // grow while the fullest replica's KV usage is below this
  double high_usage = 0.90;  // trim when it is above this (or on any preemption)
  double decrease = 0.75;    // a trim multiplies the cap by this
  int64_t floor = 1;         // the cap never goes below
};

// One replica's figures from its `status` reply.
struct KvReading {
  double usage = 0;         // KV cache blocks in use / all blocks, 0 to 1
  int64_t preemptions = 0;  // cumulative since the engine started
  int64_t waiting = 0;      // sequences queued for cache blocks or a slot
};
// From a status reply's `engine` object; nullopt when the fields are missing.
std::optional<KvReading> kv_reading(const Json& status);

enum class AdmissionDecision { kGrow, kTrim, kHold };
const char* admission_decision_name(AdmissionDecision d);

struct AdmissionFigures {
  int64_t cap = 0;
  int64_t ceiling = 0;
  double usage = 0;  // the fullest replica's at the last reading
  int64_t grows = 0, trims = 0, holds = 0;
};

class AdmissionController {
 public:
  explicit AdmissionController(AdmissionOptions options = {});

  // One reading of every replica (rank order; nullopt: it did not answer). `ceiling` is the pool
  // size now (max_env_worker); the cap is clamped to it. Grows by ceil(ceiling / 16) at a time.
  AdmissionDecision observe(const std::vector<std::optional<KvReading>>& replicas, int64_t ceiling);
  int64_t cap() const { return figures_.cap; }
  const AdmissionFigures& figures() const { return figures_; }

 private:
  AdmissionOptions options_;
  AdmissionFigures figures_;
  std::vector<int64_t> last_preemptions_;  // per replica, to see new ones
  bool started_ = false;
};

// The front's loop: every `interval` while `rolling()` says the engines serve, it asks each
// replica for its status, feeds the controller, and hands the cap to `apply` (the registry). Stops
// and joins on destruction.
class AdmissionLoop {
 public:
  struct Hooks {
    std::function<std::vector<std::shared_ptr<rpc::Client>>()> replicas;
    std::function<bool()> rolling;
    std::function<int64_t()> ceiling;    // max_env_worker of the synced config
    std::function<void(int64_t)> apply;  // the cap (or 0: no cap)
  };
  AdmissionLoop(Hooks hooks, AdmissionOptions options, std::chrono::milliseconds interval);
  ~AdmissionLoop();
  AdmissionLoop(const AdmissionLoop&) = delete;
  AdmissionLoop& operator=(const AdmissionLoop&) = delete;

  AdmissionFigures figures() const;

 private:
  void run();
  void tick();

  Hooks hooks_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  AdmissionController controller_;  // mu_ guards it
  std::thread thread_;
};

}  // namespace ajet::engine_control
