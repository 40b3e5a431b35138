#include "batching/madness.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "common/error.h"

namespace ajet::batching {

void validate_madness_limits(const MadnessLimits& l) {
  auto non_negative = [](int64_t v, const char* name) {
    if (v < 0)
      invalid_argument(std::string(name) + " must be >= 0 (0 = off), got " + std::to_string(v));
  };
  non_negative(l.repeat_tokens, "madness repeat_tokens");
  non_negative(l.entropy_window, "madness entropy_window");
  non_negative(l.garbage_run, "madness garbage_run");
  non_negative(l.switch_run, "madness switch_run");
  if (l.repeat_tokens > 0 && (l.max_period < 1 || l.max_period > 4096)) {
    invalid_argument("madness max_period must be in [1, 4096], got " +
                     std::to_string(l.max_period));
  }
  if (l.repeat_tokens > 0 && l.repeat_tokens <= l.max_period) {
    invalid_argument("madness repeat_tokens (" + std::to_string(l.repeat_tokens) +
                     ") must exceed max_period (" + std::to_string(l.max_period) +
                     "): a loop is only seen once it has repeated");
  }
  if (l.entropy_window == 1 || l.entropy_window > 65536)
    invalid_argument("madness entropy_window must be 0 or in [2, 65536], got " +
                     std::to_string(l.entropy_window));
  if (!std::isfinite(l.min_entropy_bits) || l.min_entropy_bits < 0)
    invalid_argument("madness min_entropy_bits must be a finite number >= 0");
}

MadnessDetector::MadnessDetector(const MadnessLimits& limits, const std::vector<int32_t>& prompt)
    : limits_(&limits) {
  if (!limits.any()) return;
  const int64_t keep =
      std::max(limits.repeat_tokens > 0 ? limits.max_period : 0, limits.entropy_window) + 1;
  recent_.assign(size_t(keep), -1);
  if (limits.repeat_tokens > 0) period_run_.assign(size_t(limits.max_period) + 1, 0);
  if (limits.switch_run > 0 && limits.token_classes) {
    std::array<int64_t, 6> counts{};
    for (int32_t id : prompt) ++counts[size_t(class_of(id))];
    int64_t best = 0;
    for (TokenClass c :
         {TokenClass::kLatin, TokenClass::kCjk, TokenClass::kCyrillic, TokenClass::kOtherScript}) {
      if (counts[size_t(c)] > best) {
        best = counts[size_t(c)];
        expected_ = c;
      }
    }
  }
}

TokenClass MadnessDetector::class_of(int32_t id) const {
  const auto& classes = limits_->token_classes;
  if (!classes || id < 0 || size_t(id) >= classes->size()) return TokenClass::kNeutral;
  return (*classes)[size_t(id)];
}

std::optional<FinishReason> MadnessDetector::push(int32_t id) {
  if (fired_ || limits_ == nullptr || !limits_->any()) return fired_;
  const MadnessLimits& l = *limits_;
  const size_t ring = recent_.size();
  auto at_back = [&](int64_t back) {  // the id `back` tokens before this one (back >= 1)
    return recent_[size_t((seen_ - back) % int64_t(ring))];
  };

  if (l.repeat_tokens > 0) {
    for (int64_t p = 1; p <= l.max_period; ++p) {
      int64_t& run = period_run_[size_t(p)];
      run = (seen_ >= p && at_back(p) == id) ? run + 1 : 0;
      // run counts tokens equal to the one p back: the loop spans run + p tokens.
      if (run + p >= l.repeat_tokens && run >= p) fired_ = FinishReason::kRepetition;
    }
  }
  if (l.entropy_window > 0) {
    if (seen_ >= l.entropy_window) {
      const int32_t old = at_back(l.entropy_window);
      if (--window_counts_[old] == 0) window_counts_.erase(old);
    }
    ++window_counts_[id];
    if (!fired_ && seen_ + 1 >= l.entropy_window) {
      const double n = double(l.entropy_window);
      double bits = 0;
      for (const auto& [token, count] : window_counts_) {
        const double q = count / n;
        bits -= q * std::log2(q);
      }
      if (bits < l.min_entropy_bits) fired_ = FinishReason::kLowEntropy;
    }
  }
  if (ring > 0) recent_[size_t(seen_ % int64_t(ring))] = id;
  ++seen_;

  if ((l.garbage_run > 0 || l.switch_run > 0) && l.token_classes && !fired_) {
    const TokenClass c = class_of(id);
    if (c == TokenClass::kGarbage) {
      if (++garbage_ >= l.garbage_run && l.garbage_run > 0) fired_ = FinishReason::kGarbage;
    } else if (c != TokenClass::kNeutral) {
      garbage_ = 0;
      if (expected_ == TokenClass::kNeutral) expected_ = c;  // the reply's first script
      foreign_ = c == expected_ ? 0 : foreign_ + 1;
      if (l.switch_run > 0 && foreign_ >= l.switch_run) fired_ = FinishReason::kLanguageSwitch;
    }
  }
  return fired_;
}

}  // namespace ajet::batching
