// Running totals of the LLM calls the OpenAI-compatible API served, for GET /metrics: calls
// answered and failed, prompt and completion tokens, and how long answered calls took. One per
// front (ServerContext::call_metrics), fed by every LlmCall. Thread-safe and quick: a short lock
// per call.
#pragma once

#include <cstdint>
#include <mutex>

#include "common/prometheus_text.h"

namespace ajet::openai {

class CallMetrics {
 public:
  struct Snapshot {
    uint64_t answered = 0;       // calls whose whole answer went out
    uint64_t failed = 0;         // calls the engine could not serve (not connected, or its error)
    uint64_t prompt_tokens = 0;  // per answered call, once (its n choices share the prompt)
    uint64_t completion_tokens = 0;  // every choice's generated tokens
    prometheus::Histogram latency{
        prometheus::latency_buckets_seconds()};  // answered calls, seconds
  };

  // An answered call: its prompt, the completion tokens of all its choices, its duration (seconds,
  // from the request's arrival to the answer's end).
  void answered(int64_t prompt_tokens, int64_t completion_tokens, double seconds);
  void failed();
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  Snapshot totals_;
};

}  // namespace ajet::openai
