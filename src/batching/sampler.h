// Picks the next token from one row of logits: temperature (0 = greedy), top-k, top-p, with a
// per-sample random stream so a seeded request samples the same tokens whatever else is in the
// batch. Reports both logprobs RL needs. Works on plain float rows (no libtorch); never keeps
// global state.
#pragma once

#include <cstdint>

#include "batching/request.h"

namespace ajet::batching {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = 0;         // 0 = off
  int64_t top_logprobs = 0;  // raw top-k logprobs to report; 0 = none
};

// Throws ajet::Error(kInvalidArgument) naming the bad field.
void validate_sampling_params(const SamplingParams& params);

// A counter-based stream (splitmix64): (seed, stream) fully determine the sequence of draws, on
// every platform. Each sample of a request uses stream = its sample index.
class SampleRng {
 public:
  SampleRng(uint64_t seed, uint64_t stream);
  double uniform();  // [0, 1), 53 random bits

 private:
  uint64_t state_;
};

// Samples from logits (vocab floats). The result's `logprob` is under the distribution actually
// sampled from (temperature, then top-k, then top-p, renormalised; 0 for greedy), `raw_logprob`
// under softmax(logits); `top_logprobs` holds the params.top_logprobs best raw logprobs (ties:
// lower id first). policy_version is left 0 for the caller to fill. Draws exactly one uniform
// unless greedy.
GeneratedToken sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                            SampleRng& rng);

// The raw logprob (softmax at temperature 1) of `target` under logits, its rank, and the `top`
// best alternatives (ties: lower id first): a prompt position's entry (prompt_logprobs).
PromptLogprob score_token(const float* logits, int64_t vocab, int32_t target, int64_t top);

}  // namespace ajet::batching
