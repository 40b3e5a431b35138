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

#include "common/error.h"
#include "episodes/model_context.h"
#include "rpc/messages.h"
#include "text/messages.h"

namespace ajet::openai {

// `n`: what the engine accepts (rpc::kMaxSamplesPerRequest), and at most ajet.rollout.max_num_seqs
// (the sequences the engine decodes together; resolve_generation).
inline constexpr int kMaxChoices = rpc::kMaxSamplesPerRequest;
// n × max_tokens × (1 + top_logprobs): the token entries one answer may hold (FrontOptions
// default).
inline constexpr int64_t kDefaultMaxTokenEntries = int64_t(1) << 19;
inline constexpr size_t kMaxStopStrings = 16;
// Bytes of one stop string: each generated piece is checked against the tail of every stop string
// on the token-delivery thread, so their length bounds what one request costs every other.
inline constexpr size_t kMaxStopBytes = 256;

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// Whose wording the context-overflow errors use: OpenAI's APIs get ours (naming the config keys),
// Anthropic's Messages gets Anthropic's exact sentences, which Claude Code parses to compact its
// history or retry with a smaller max_tokens (resolve_generation).
enum class ErrorWording { kOpenAi, kAnthropic };

// The names the client's API gives the chat fields its body was converted to (Messages:
// stop_sequences; Responses: max_output_tokens), so that errors name what the client sent.
struct FieldNames {
  std::string stop = "stop";
  std::string max_tokens = "max_tokens";
  ErrorWording wording = ErrorWording::kOpenAi;
};

// What an adapter (Messages, Responses) changed in a body beyond a plain conversion, one line each
// (e.g. "dropped 1 server tool(s) this server does not run: web_search (web_search)"), for the
// front's log.
using ConversionNotes = std::vector<std::string>;

struct OpenAiParams {
  std::string model;  // "" when absent
  int n = 1;
  std::optional<int64_t> max_tokens;                // max_tokens or max_completion_tokens
  std::string max_tokens_field = "max_tokens";      // the field that set it, as the client named it
  std::string top_logprobs_field = "top_logprobs";  // /v1/completions: "logprobs"
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;  // vLLM extension; -1 / 0: off
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  bool logprobs = false;
  int top_logprobs = 0;
  // vLLM's prompt_logprobs (chat and completions): the raw logprob of every prompt token after the
  // first, plus this many alternatives; -1 (absent or null): none. Not with stream.
  int prompt_logprobs = -1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // chat only
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking (vLLM extension)
  ErrorWording wording = ErrorWording::kOpenAi;  // of the context-overflow errors
};

// Reads the fields above from a chat request body; Error(kInvalidArgument) naming the field (by
// `names` where the body was converted from another API's).
OpenAiParams parse_chat_params(const text::OrderedJson& body, const FieldNames& names = {});
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
// Error(kInvalidArgument) when the prompt leaves no room (context overflow, naming the numbers) or
// n is above ajet.rollout.max_num_seqs. With ErrorWording::kAnthropic the overflow is said as
// Anthropic says it: "prompt is too long: N tokens > M maximum" when the prompt alone does not fit,
// "input length and `max_tokens` exceed context limit: A + B > C, decrease input length or
// `max_tokens` and try again" when the prompt and max_tokens (as resolved: the per-turn cap
// applied) do not. With ErrorWording::kOpenAi it is OpenAI's sentence ("This model's maximum
// context length is M tokens. However, ...") and a ContextLengthExceeded, which the OpenAI-shaped
// answer carries as the code `context_length_exceeded` (what OpenAI's SDK users, Codex and Qwen
// Code match on).
rpc::GenerateRequest resolve_generation(const OpenAiParams& params,
                                        const episodes::SamplingRules& rules, bool train,
                                        size_t prompt_tokens);

// The prompt (and max_tokens) exceed the context: a 400 whose OpenAI error code is
// context_length_exceeded.
class ContextLengthExceeded : public Error {
 public:
  explicit ContextLengthExceeded(const std::string& message)
      : Error(ErrorCode::kInvalidArgument, message) {}
};

// What one answer may hold: n × max_tokens (resolved: the request's or the default) × (1 +
// top_logprobs) token entries, each a token or an alternative with its logprob (the JSON answer and
// the stored call grow with it). Above `limit` (ajet-swarm --max-request-token-entries; 0: none):
// Error(kInvalidArgument) naming the three fields as the client sent them, their product and the
// limit.
void check_token_entries(const OpenAiParams& params, const rpc::GenerateRequest& generate,
                         int64_t limit);

// Tool results must answer a tool call of an earlier assistant message in the same request: a
// `tool` message whose tool_call_id names none → Error(kInvalidArgument) naming
// messages[i].tool_call_id (OpenAI answers 400 too). A tool message without an id is accepted.
void check_tool_results(const text::ChatRequest& request);

}  // namespace ajet::openai
