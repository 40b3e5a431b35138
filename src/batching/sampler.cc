#include "batching/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "common/mix.h"

// 8-float vectors for the exponentials and sums (common/vec8.h): always inlined, so GCC's note on
// how such vectors are passed does not apply (silenced before the include).
#pragma GCC diagnostic ignored "-Wpsabi"

#include "common/multiversion.h"
#include "common/vec8.h"

namespace ajet::batching {
namespace {

uint64_t splitmix64(uint64_t& state) { return splitmix64_finalize(state += kGoldenGamma); }

// Orders ids by logit, best first; equal logits keep the lower id first so results never depend on
// the sort implementation.
struct ByLogitDesc {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

// Reused per thread: the engine samples rows in parallel, one row per call.
struct Scratch {
  std::vector<int32_t> ids;
  std::vector<float> raw;     // (vocab) exp(logit - max)
  std::vector<float> scaled;  // (vocab) exp((logit - max) / temperature)
};
thread_local Scratch t_scratch;

using namespace ajet::vec8;
typedef double v8d __attribute__((vector_size(64)));

AJET_INLINE double hsum8d(v8d v) {
  double s = 0;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// out[i] = exp((x[i] - shift) * scale) for (x - shift) * scale <= 0, 8 at a time (exactly 0 below
// e^-87, as std::exp underflows); returns their sum in double.
AJET_INLINE double exp_shifted(const float* x, int64_t n, float shift, float scale, float* out) {
  v8d sum8 = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f a = (load8(x + i) - splat8(shift)) * splat8(scale);
    const v8f e = a < splat8(-87.0f) ? splat8(0.0f) : exp8_nonpositive(a);
    store8(out + i, e);
    sum8 += __builtin_convertvector(e, v8d);
  }
  double sum = hsum8d(sum8);
  for (; i < n; ++i) {
    const float a = (x[i] - shift) * scale;
    out[i] = a < -87.0f ? 0.0f : exp_nonpositive(a);
    sum += out[i];
  }
  return sum;
}

// Moves the best k ids (by ByLogitDesc) to the front of ids, sorted.
void top_ids(std::vector<int32_t>& ids, int64_t k, const float* logits) {
  k = std::min<int64_t>(k, static_cast<int64_t>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), ByLogitDesc{logits});
}

}  // namespace

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kRepetition: return "repetition";
    case FinishReason::kLowEntropy: return "low_entropy";
    case FinishReason::kGarbage: return "garbage";
    case FinishReason::kLanguageSwitch: return "language_switch";
  }
  return "unknown";
}

bool is_madness(FinishReason reason) {
  return reason != FinishReason::kStop && reason != FinishReason::kLength &&
         reason != FinishReason::kAbort;
}

void validate_sampling_params(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    invalid_argument("temperature must be a finite number >= 0, got " +
                     std::to_string(params.temperature));
  }
  if (!std::isfinite(params.top_p) || params.top_p <= 0 || params.top_p > 1) {
    invalid_argument("top_p must be in (0, 1], got " + std::to_string(params.top_p));
  }
  if (params.top_k < 0)
    invalid_argument("top_k must be >= 0 (0 = off), got " + std::to_string(params.top_k));
  if (params.top_logprobs < 0 || params.top_logprobs > 1000) {
    invalid_argument("top_logprobs must be in [0, 1000], got " +
                     std::to_string(params.top_logprobs));
  }
}

SampleRng::SampleRng(uint64_t seed, uint64_t stream) {
  uint64_t s = stream ^ 0x5851F42D4C957F2DULL;
  state_ = seed ^ splitmix64(s);
  splitmix64(state_);
}

double SampleRng::uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }

// The exponentials and sums run 8 lanes at a time (their rounding differs from a scalar loop's in
// the last bits; a seed still gives the same tokens on every run of a build): per row they were
// ~10k cycles of dependent scalar adds and expf calls, 7-10 % of a `tiny` decode step at 64
// sequences.
AJET_MULTIVERSION
GeneratedToken sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                            SampleRng& rng) {
  GeneratedToken out;
  Scratch& scratch = t_scratch;
  std::vector<int32_t>& ids = scratch.ids;
  auto all_ids = [&] {
    ids.resize(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
  };

  // Raw distribution: log-softmax at temperature 1; exponentials in float, sums in double.
  const float max_logit = max_of(logits, vocab);
  std::vector<float>& raw = scratch.raw;  // (vocab) exp(logit - max)
  raw.resize(static_cast<size_t>(vocab));
  const double raw_sum = exp_shifted(logits, vocab, max_logit, 1.0f, raw.data());
  const double raw_lse = max_logit + std::log(raw_sum);

  if (params.temperature == 0) {
    // Greedy: a point mass on the first maximum, so the sampled-from logprob is log 1 = 0.
    out.id = static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
    out.logprob = 0;
  } else {
    // Unnormalised weights after temperature; the same order as the logits.
    const float inv_t = static_cast<float>(1.0 / params.temperature);
    const std::vector<float>* weights = &raw;
    if (params.temperature != 1) {
      scratch.scaled.resize(static_cast<size_t>(vocab));
      exp_shifted(logits, vocab, max_logit, inv_t, scratch.scaled.data());
      weights = &scratch.scaled;
    }
    const float* w = weights->data();
    // Candidate set: the first `kept` entries of ids (best first once truncated).
    int64_t kept = vocab;
    bool truncated = false;
    all_ids();
    if (params.top_k > 0 && params.top_k < vocab) {
      kept = params.top_k;
      top_ids(ids, kept, logits);
      truncated = true;
    }
    double total = 0;
    if (truncated) {
      for (int64_t j = 0; j < kept; ++j) total += w[ids[j]];
    } else {  // ids are 0..vocab-1 in order
      v8d t8 = {};
      int64_t j = 0;
      for (; j + 8 <= kept; j += 8) t8 += __builtin_convertvector(load8(w + j), v8d);
      total = hsum8d(t8);
      for (; j < kept; ++j) total += w[j];
    }
    if (params.top_p < 1) {
      // Smallest best-first prefix whose probability (after temperature and top-k) reaches top_p.
      // Without top-k, sort a growing prefix instead of the whole vocabulary.
      const double target = params.top_p * total;
      int64_t sorted = truncated ? kept : 0;
      int64_t cut = kept;  // rounding can leave the sum a hair under target: then keep everything
      double acc = 0;
      for (int64_t j = 0; j < kept; ++j) {
        if (j >= sorted) {
          sorted = std::min<int64_t>(kept, std::max<int64_t>(64, sorted * 8));
          std::partial_sort(ids.begin() + j, ids.begin() + sorted, ids.begin() + kept,
                            ByLogitDesc{logits});
        }
        acc += w[ids[j]];
        if (acc >= target) {
          cut = j + 1;
          break;
        }
      }
      if (cut < kept) {
        kept = cut;
        total = 0;
        for (int64_t j = 0; j < kept; ++j) total += w[ids[j]];
      }
    }
    // Sample from the kept ids, renormalised.
    const double target = rng.uniform() * total;
    double acc = 0;
    int64_t pick = kept - 1;
    int64_t j = 0;
    if (!truncated && params.top_p >= 1) {
      // ids are still 0..vocab-1 in order (top-p sorts them): skip whole blocks of 8 while they
      // stay below the target.
      for (; j + 8 <= kept; j += 8) {
        const double block = hsum8d(__builtin_convertvector(load8(w + j), v8d));
        if (acc + block > target) break;
        acc += block;
      }
    }
    for (; j < kept; ++j) {
      acc += w[ids[j]];
      if (acc > target) {
        pick = j;
        break;
      }
    }
    while (pick > 0 && w[ids[pick]] == 0) --pick;  // never return a zero-probability token
    out.id = ids[pick];
    out.logprob = static_cast<float>((static_cast<double>(logits[out.id]) - max_logit) * inv_t -
                                     std::log(total));
  }
  out.raw_logprob = static_cast<float>(logits[out.id] - raw_lse);

  if (params.top_logprobs > 0) {
    all_ids();
    const int64_t k = std::min<int64_t>(params.top_logprobs, vocab);
    top_ids(ids, k, logits);
    out.top_logprobs.reserve(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      out.top_logprobs.push_back({ids[j], static_cast<float>(logits[ids[j]] - raw_lse)});
    }
  }
  return out;
}

AJET_MULTIVERSION
PromptLogprob score_token(const float* logits, int64_t vocab, int32_t target, int64_t top) {
  Scratch& scratch = t_scratch;
  const float max_logit = max_of(logits, vocab);
  std::vector<float>& raw = scratch.raw;
  raw.resize(static_cast<size_t>(vocab));
  const double lse = max_logit + std::log(exp_shifted(logits, vocab, max_logit, 1.0f, raw.data()));
  PromptLogprob out;
  out.id = target;
  out.logprob = static_cast<float>(logits[target] - lse);
  int32_t above = 0;
  for (int64_t i = 0; i < vocab; ++i) above += logits[i] > logits[target] ? 1 : 0;
  out.rank = above + 1;
  if (top > 0) {
    std::vector<int32_t>& ids = scratch.ids;
    ids.resize(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    const int64_t k = std::min<int64_t>(top, vocab);
    top_ids(ids, k, logits);
    out.top_logprobs.reserve(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j)
      out.top_logprobs.push_back({ids[j], static_cast<float>(logits[ids[j]] - lse)});
  }
  return out;
}

}  // namespace ajet::batching
