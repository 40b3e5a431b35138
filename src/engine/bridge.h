// Translation between the engine RPC's typed messages (src/rpc/messages.h) and the inference
// engine's requests and events (src/batching/request.h), so the RPC service and the in-process
// `generate` command put the same frames together. Pure data; no libtorch, no sockets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "batching/request.h"
#include "rpc/messages.h"

namespace ajet::engine {

// The engine request for an RPC generate request; `id` names it in the engine (unique in flight).
batching::GenerateRequest to_infer_request(const rpc::GenerateRequest& request, std::string id);

rpc::FinishReason to_rpc_finish(batching::FinishReason reason);

// Gathers one request's engine events into RPC `tokens` events and the final `done` body: keeps
// the prompt length and each sample's running completion count, which the events carry.
class TokensEventBuilder {
 public:
  // prompt_logprobs: the request's (-1 none); the first event with tokens then carries the prompt
  // positions' logprobs, padded like the generated tokens' alternatives.
  TokensEventBuilder(int64_t prompt_tokens, int64_t samples, int32_t top_logprobs,
                     int32_t prompt_logprobs = -1);

  // A non-error engine event of this request. Top alternatives are cut or padded (id -1, logprob
  // -inf) to exactly `top_logprobs` per token, the fixed row width of the wire format.
  rpc::TokensEvent next(const batching::GenerateEvent& event);
  rpc::GenerateDone done() const;

 private:
  int64_t prompt_tokens_;
  int32_t top_logprobs_;
  int32_t prompt_logprobs_;
  bool prompt_sent_ = false;
  std::vector<int64_t> completion_;  // (n) tokens so far per sample
};

}  // namespace ajet::engine
