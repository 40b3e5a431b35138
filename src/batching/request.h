// What a caller asks the inference engine for and what it gets back, per token. Plain structs with
// no libtorch, so the RPC layer and clients can share them. Never holds engine state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace ajet::batching {

struct GenerateRequest {
  std::string id;                // unique among requests in flight; names the request in events
  std::vector<int32_t> prompt;   // token ids, at least one
  int64_t max_tokens = 16;       // generated tokens per sample, >= 1
  double temperature = 1.0;      // 0 = greedy; otherwise > 0
  double top_p = 1.0;            // (0, 1]; 1 = off
  int64_t top_k = 0;             // 0 = off
  std::optional<uint64_t> seed;  // reproducible sampling; unset = a fresh random seed
  std::vector<int32_t> stop_token_ids;  // generating one of these ends the sample (it is kept)
  int64_t n = 1;                        // samples sharing one prefill, each with its own RNG stream
  int64_t top_logprobs = 0;             // raw-model top-k logprobs per token; 0 = none
  // Raw-model logprobs of the prompt's own tokens (positions 1..): -1 = none, 0 = each token's
  // own, k > 0 = also the k best alternatives at each position. Such a request reuses no cached
  // prefix (every position's logits must be computed); the first event carries them.
  int64_t prompt_logprobs = -1;
  // A LoRA adapter of the model's multi-adapter projections (model/multi_lora.h): its slot (-1: the
  // base alone) and its identity (InferenceEngine::set_adapter; a request for a slot that now holds
  // another adapter is refused). The engine sets adapter_key at admission: the key the request's
  // cached prefixes are filed under (the adapter and its weights generation: another adapter, or
  // the same after a weight change, never reuses them); 0 is the base's.
  int32_t adapter_slot = -1;
  uint64_t adapter_uid = 0;
  uint64_t adapter_key = 0;
};

// kStop: a stop token; kLength: max_tokens or the context; kAbort: cancelled. The rest are the
// madness detectors (batching/madness.h) stopping a degenerate generation early.
enum class FinishReason {
  kStop,
  kLength,
  kAbort,
  kRepetition,
  kLowEntropy,
  kGarbage,
  kLanguageSwitch
};
// "stop" | "length" | "abort" | "repetition" | "low_entropy" | "garbage" | "language_switch"
std::string_view finish_reason_name(FinishReason reason);
bool is_madness(FinishReason reason);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// One prompt position's raw logprob (the token at that position given the ones before it).
struct PromptLogprob {
  int32_t id = 0;
  float logprob = 0;
  int32_t rank = 1;                        // 1 + the number of ids with a larger logit
  std::vector<TokenLogprob> top_logprobs;  // the request's prompt_logprobs best, best first
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;      // under the distribution sampled from (temperature, top-k, top-p applied)
  float raw_logprob = 0;  // under the raw model: temperature 1, no truncation
  int64_t policy_version = 0;              // weights that produced the logits
  std::vector<TokenLogprob> top_logprobs;  // raw logprobs, best first; empty unless asked for
};

// One event per sample per engine step in which something happened to it. Emitted on the engine
// thread; `request_finished` is set on the last event of a request (all samples done, or error).
struct GenerateEvent {
  std::string request_id;
  int64_t sample_index = 0;
  std::vector<GeneratedToken> tokens;  // new tokens of this sample, in order
  std::optional<FinishReason> finish;  // set when this sample is done
  bool request_finished = false;
  std::optional<Error> error;  // the request was rejected (no tokens; request_finished)
  // Prompt positions 1.. (prompt length - 1 entries), once per request, on its first event with
  // tokens, when the request asked for them (prompt_logprobs >= 0).
  std::vector<PromptLogprob> prompt_logprobs;
};

}  // namespace ajet::batching
