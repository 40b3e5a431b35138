// Madness detection: catches a degenerate generation while it is generated, so the engine stops it
// early (with a finish reason that names the detector) instead of running it to max_tokens, and
// the trainer can penalise or drop it (ajet.rollout.madness, docs/training.md "Madness"). Each
// detector looks only at the generated token ids (the engine never sees text); the two that need
// to know what a token is read a class per vocabulary id, computed once from the tokenizer
// (token_classes). Plain C++, no libtorch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "batching/request.h"

namespace ajet::batching {

// What one vocabulary id is, for the garbage and language-switch detectors.
enum class TokenClass : uint8_t {
  kNeutral = 0,      // spaces, digits, punctuation, byte fragments: no script
  kLatin = 1,        // letters of the Latin script
  kCjk = 2,          // Han, Hiragana, Katakana, Hangul
  kCyrillic = 3,     // Cyrillic letters
  kOtherScript = 4,  // letters of any other script (Arabic, Greek, Devanagari, ...)
  kGarbage = 5,      // control characters, U+FFFD, special tokens in the middle of a reply
};

// The thresholds (0 turns a detector off). Defaults are off: MadnessLimits{} detects nothing.
struct MadnessLimits {
  // repetition: the last `repeat_tokens` generated tokens repeat with some period p <=
  // max_period (token t equals token t - p throughout), e.g. "the the the" or a looping sentence.
  int64_t repeat_tokens = 0;
  int64_t max_period = 32;
  // low_entropy: the Shannon entropy (bits) of the token histogram of the last `entropy_window`
  // generated tokens is below min_entropy_bits: a loop over a few tokens in no fixed order.
  int64_t entropy_window = 0;
  double min_entropy_bits = 1.5;
  // garbage: `garbage_run` generated tokens in a row of class kGarbage (neutral ones do not break
  // the run).
  int64_t garbage_run = 0;
  // language_switch: `switch_run` generated script tokens in a row (neutral ones skipped) of a
  // script other than the reply's language: the prompt's majority script, else the reply's first.
  int64_t switch_run = 0;
  // By vocabulary id; ids beyond it are neutral. Needed by garbage and language_switch (without
  // it they detect nothing).
  std::shared_ptr<const std::vector<TokenClass>> token_classes;

  bool any() const {
    return repeat_tokens > 0 || entropy_window > 0 || garbage_run > 0 || switch_run > 0;
  }
};

// Throws ajet::Error(kInvalidArgument) naming the bad field (negative sizes, max_period < 1 with
// repetition on, a window below 2).
void validate_madness_limits(const MadnessLimits& limits);

// One sample's detector state. Feed every generated token in order; the first detector that fires
// is returned (and keeps returning it).
class MadnessDetector {
 public:
  MadnessDetector() = default;
  // `prompt` decides the expected script of the language-switch detector.
  MadnessDetector(const MadnessLimits& limits, const std::vector<int32_t>& prompt);
  std::optional<FinishReason> push(int32_t id);

 private:
  TokenClass class_of(int32_t id) const;

  const MadnessLimits* limits_ = nullptr;  // the engine's, outliving every sequence
  std::vector<int32_t> recent_;            // ring of the last max(max_period, window) ids
  int64_t seen_ = 0;                       // generated tokens pushed
  std::vector<int64_t> period_run_;        // (max_period + 1): consecutive matches at period p
  std::unordered_map<int32_t, int32_t> window_counts_;
  int64_t garbage_ = 0;
  TokenClass expected_ = TokenClass::kNeutral;  // neutral: not known yet
  int64_t foreign_ = 0;
  std::optional<FinishReason> fired_;
};

}  // namespace ajet::batching
