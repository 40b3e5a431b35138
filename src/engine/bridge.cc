#include "engine/bridge.h"

#include <limits>
#include <numeric>

namespace ajet::engine {

namespace {

// Appends exactly k alternatives (best first), padding with id -1 and logprob -inf: the fixed row
// width of the wire format.
void append_padded(const std::vector<batching::TokenLogprob>& alternatives, int32_t k,
                   std::vector<int32_t>& ids, std::vector<float>& logprobs) {
  for (int32_t j = 0; j < k; ++j) {
    const bool have = static_cast<size_t>(j) < alternatives.size();
    ids.push_back(have ? alternatives[size_t(j)].id : -1);
    logprobs.push_back(have ? alternatives[size_t(j)].logprob
                            : -std::numeric_limits<float>::infinity());
  }
}

}  // namespace

batching::GenerateRequest to_infer_request(const rpc::GenerateRequest& r, std::string id) {
  batching::GenerateRequest out;
  out.id = std::move(id);
  out.prompt = r.prompt;
  out.max_tokens = r.max_tokens;
  out.temperature = r.temperature;
  out.top_p = r.top_p;
  out.top_k = r.top_k;
  if (r.seed) out.seed = static_cast<uint64_t>(*r.seed);
  out.stop_token_ids = r.stop_token_ids;
  out.n = r.n;
  out.top_logprobs = r.top_logprobs;
  out.prompt_logprobs = r.prompt_logprobs;
  return out;
}

rpc::FinishReason to_rpc_finish(batching::FinishReason reason) {
  switch (reason) {
    case batching::FinishReason::kStop: return rpc::FinishReason::kStop;
    case batching::FinishReason::kLength: return rpc::FinishReason::kLength;
    case batching::FinishReason::kAbort: return rpc::FinishReason::kAbort;
    case batching::FinishReason::kRepetition: return rpc::FinishReason::kRepetition;
    case batching::FinishReason::kLowEntropy: return rpc::FinishReason::kLowEntropy;
    case batching::FinishReason::kGarbage: return rpc::FinishReason::kGarbage;
    case batching::FinishReason::kLanguageSwitch: return rpc::FinishReason::kLanguageSwitch;
  }
  return rpc::FinishReason::kAbort;
}

TokensEventBuilder::TokensEventBuilder(int64_t prompt_tokens, int64_t samples, int32_t top_logprobs,
                                       int32_t prompt_logprobs)
    : prompt_tokens_(prompt_tokens),
      top_logprobs_(top_logprobs),
      prompt_logprobs_(prompt_logprobs),
      completion_(static_cast<size_t>(samples), 0) {}

rpc::TokensEvent TokensEventBuilder::next(const batching::GenerateEvent& event) {
  rpc::TokensEvent e;
  e.sample = static_cast<int32_t>(event.sample_index);
  const size_t t = event.tokens.size();
  e.token_ids.reserve(t);
  e.logprobs.reserve(t);
  e.raw_logprobs.reserve(t);
  e.policy_versions.reserve(t);
  e.top_k = top_logprobs_;
  for (const batching::GeneratedToken& token : event.tokens) {
    e.token_ids.push_back(token.id);
    e.logprobs.push_back(token.logprob);
    e.raw_logprobs.push_back(token.raw_logprob);
    e.policy_versions.push_back(token.policy_version);
    append_padded(token.top_logprobs, top_logprobs_, e.top_ids, e.top_logprobs);
  }
  if (prompt_logprobs_ >= 0 && !prompt_sent_ && t > 0) {
    prompt_sent_ = true;
    e.prompt_top_k = prompt_logprobs_;
    for (const batching::PromptLogprob& p : event.prompt_logprobs) {
      e.prompt_ids.push_back(p.id);
      e.prompt_logprobs.push_back(p.logprob);
      e.prompt_ranks.push_back(p.rank);
      append_padded(p.top_logprobs, prompt_logprobs_, e.prompt_top_ids, e.prompt_top_logprobs);
    }
  }
  if (static_cast<size_t>(event.sample_index) >= completion_.size())
    completion_.resize(event.sample_index + 1, 0);
  int64_t& done = completion_[static_cast<size_t>(event.sample_index)];
  done += static_cast<int64_t>(t);
  if (event.finish) {
    e.finish_reason = to_rpc_finish(*event.finish);
    e.prompt_tokens = prompt_tokens_;
    e.completion_tokens = done;
  }
  return e;
}

rpc::GenerateDone TokensEventBuilder::done() const {
  return rpc::GenerateDone{prompt_tokens_,
                           std::accumulate(completion_.begin(), completion_.end(), int64_t{0})};
}

}  // namespace ajet::engine
