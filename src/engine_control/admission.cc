#include "engine_control/admission.h"

#include <algorithm>
#include <cmath>

#include "common/log.h"
#include "rpc/client.h"
#include "rpc/messages.h"

namespace ajet::engine_control {

std::optional<KvReading> kv_reading(const Json& status) {
  if (!status.is_object() || !status.contains("engine") || !status["engine"].is_object())
    return std::nullopt;
  const Json& e = status["engine"];
  auto number = [&](const char* key) -> std::optional<double> {
    if (!e.contains(key) || !e[key].is_number()) return std::nullopt;
    return e[key].get<double>();
  };
  const std::optional<double> free_blocks = number("free_blocks"),
                              total_blocks = number("total_blocks");
  if (!free_blocks || !total_blocks || *total_blocks <= 0) return std::nullopt;
  KvReading r;
  r.usage = std::clamp((*total_blocks - *free_blocks) / *total_blocks, 0.0, 1.0);
  r.preemptions = int64_t(number("preemptions").value_or(0));
  r.waiting = int64_t(number("waiting").value_or(0));
  return r;
}

const char* admission_decision_name(AdmissionDecision d) {
  switch (d) {
    case AdmissionDecision::kGrow: return "grow";
    case AdmissionDecision::kTrim: return "trim";
    case AdmissionDecision::kHold: return "hold";
  }
  return "hold";
}

AdmissionController::AdmissionController(AdmissionOptions options) : options_(options) {}

AdmissionDecision AdmissionController::observe(
    const std::vector<std::optional<KvReading>>& replicas, int64_t ceiling) {
  AdmissionFigures& f = figures_;
  f.ceiling = std::max<int64_t>(ceiling, 1);
  if (!started_) {
    f.cap = f.ceiling;  // as without the controller until the engines feel pressure
    started_ = true;
  }
  f.cap = std::clamp<int64_t>(f.cap, std::min(options_.floor, f.ceiling), f.ceiling);
  last_preemptions_.resize(replicas.size(), -1);  // -1: not read yet (its count is the baseline)
  double usage = 0;
  int64_t preempted = 0;
  bool any = false;
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i]) continue;
    any = true;
    usage = std::max(usage, replicas[i]->usage);
    // A counter below the last one is a restarted engine: it counts from zero again.
    const int64_t now = replicas[i]->preemptions, last = last_preemptions_[i];
    const int64_t before = last < 0 ? now : now >= last ? last : 0;
    preempted += now - before;
    last_preemptions_[i] = now;
  }
  AdmissionDecision d = AdmissionDecision::kHold;
  if (any) {
    f.usage = usage;
    if (preempted > 0 || usage > options_.high_usage) {
      const int64_t trimmed = int64_t(std::floor(double(f.cap) * options_.decrease));
      const int64_t next = std::max(std::min(options_.floor, f.ceiling), trimmed);
      if (next < f.cap) d = AdmissionDecision::kTrim;
      f.cap = next;
    } else if (usage < options_.low_usage && f.cap < f.ceiling) {
      const int64_t step = std::max<int64_t>(1, (f.ceiling + 15) / 16);
      f.cap = std::min(f.ceiling, f.cap + step);
      d = AdmissionDecision::kGrow;
    }
  }
  (d == AdmissionDecision::kGrow   ? f.grows
   : d == AdmissionDecision::kTrim ? f.trims
                                   : f.holds) += 1;
  return d;
}

AdmissionLoop::AdmissionLoop(Hooks hooks, AdmissionOptions options,
                             std::chrono::milliseconds interval)
    : hooks_(std::move(hooks)), interval_(interval), controller_(options) {
  thread_ = std::thread([this] { run(); });
}

AdmissionLoop::~AdmissionLoop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

AdmissionFigures AdmissionLoop::figures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return controller_.figures();
}

void AdmissionLoop::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    cv_.wait_for(lock, interval_, [&] { return quit_; });
    if (quit_) break;
    lock.unlock();
    try {
      tick();
    } catch (const std::exception& e) {
      log().debug("admission: {}", e.what());
    }
    lock.lock();
  }
}

// Outside the lock: status calls may take up to their timeout.
void AdmissionLoop::tick() {
  if (!hooks_.rolling()) return;
  std::vector<std::optional<KvReading>> readings;
  for (const std::shared_ptr<rpc::Client>& replica : hooks_.replicas()) {
    std::optional<KvReading> r;
    if (replica && replica->connected()) {
      try {
        rpc::Client::CallResult reply =
            replica->call(rpc::make_status_request(), std::chrono::milliseconds(1000));
        r = kv_reading(reply.done.body);
      } catch (const std::exception&) {  // a busy or restarting replica: no reading this time
      }
    }
    readings.push_back(r);
  }
  const int64_t ceiling = hooks_.ceiling();
  int64_t cap = 0;
  double usage = 0;
  AdmissionDecision d;
  {
    std::lock_guard<std::mutex> lock(mu_);
    d = controller_.observe(readings, ceiling);
    cap = controller_.cap();
    usage = controller_.figures().usage;
  }
  if (d != AdmissionDecision::kHold) {
    log().debug("admission: {} the cap on claimed episodes to {} of {} (fullest KV cache {:.0f} %)",
                d == AdmissionDecision::kGrow ? "grew" : "trimmed", cap, ceiling, 100 * usage);
  }
  hooks_.apply(cap);
}

}  // namespace ajet::engine_control
