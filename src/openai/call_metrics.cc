#include "openai/call_metrics.h"

#include <algorithm>

namespace ajet::openai {

void CallMetrics::answered(int64_t prompt_tokens, int64_t completion_tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.answered += 1;
  totals_.prompt_tokens += uint64_t(std::max<int64_t>(prompt_tokens, 0));
  totals_.completion_tokens += uint64_t(std::max<int64_t>(completion_tokens, 0));
  totals_.latency.observe(seconds);
}

void CallMetrics::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.failed += 1;
}

CallMetrics::Snapshot CallMetrics::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

}  // namespace ajet::openai
