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
  // A LoRA adapter of the model's multi-adapter projections (model/multi_lora.h): its slot (-1: the
  // base alone) and its identity (InferenceEngine::set_adapter; a request for a slot that now holds
  // another adapter is refused). The engine sets adapter_key at admission: the key the request's
  // cached prefixes are filed under (the adapter and its weights generation: another adapter, or
  // the same after a weight change, never reuses them); 0 is the base's.
  int32_t adapter_slot = -1;
  uint64_t adapter_uid = 0;
  uint64_t adapter_key = 0;
};

enum class FinishReason { kStop, kLength, kAbort };
std::string_view finish_reason_name(FinishReason reason);  // "stop" | "length" | "abort"

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
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
};

}  // namespace ajet::batching
