// The generation parameters of an OpenAI request (/v1/chat/completions, /v1/completions), validated
// with the field named in every error, and the one rule that turns them into an engine request:
// `train` episodes sample with the server's ajet.rollout settings (the request may only shorten the
// answer), `eval` episodes honour the request (unset fields fall back to ajet.rollout.val_kwargs).
// No HTTP, no engine here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "episodes/model_context.h"
#include "rpc/messages.h"
#include "text/messages.h"

namespace ajet::swarm {

inline constexpr int kMaxChoices = 128;       // `n` (OpenAI's limit)
inline constexpr size_t kMaxStopStrings = 16;
// Bytes of one stop string: each generated piece is checked against the tail of every stop string
// on the token-delivery thread, so their length bounds what one request costs every other.
inline constexpr size_t kMaxStopBytes = 256;

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct OpenAiParams {
  std::string model;  // "" when absent
  int n = 1;
  std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;  // vLLM extension; -1 / 0: off
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // chat only
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking (vLLM extension)
};

// Reads the fields above from a chat request body; Error(kInvalidArgument) naming the field.
OpenAiParams parse_chat_params(const text::OrderedJson& body);
// /v1/completions: `logprobs` is an integer there (0..5 alternatives), `echo`/`suffix`/`best_of`
// are refused.
OpenAiParams parse_completion_params(const text::OrderedJson& body);
// The `prompt` of /v1/completions: one string, or one list of token ids (also wrapped in a list).
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};
CompletionPrompt parse_completion_prompt(const text::OrderedJson& body);

// The engine request (without prompt ids and stop ids) for `prompt_tokens` prompt tokens. Throws
// Error(kInvalidArgument) when the prompt leaves no room (context overflow, naming the numbers).
rpc::GenerateRequest resolve_generation(const OpenAiParams& params, const SamplingRules& rules, bool train,
                                        size_t prompt_tokens);

}  // namespace ajet::swarm
