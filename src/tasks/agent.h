// The seam between built-in agents and the model: a ChatModel takes the conversation and tool
// definitions and returns one assistant message (tool calls already parsed), the way an OpenAI chat
// completions endpoint does. The launcher plugs in an HTTP client bound to an episode's base_url
// and api_key; tests plug in scripted replies. Agents must survive anything a model returns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/task.h"
#include "text/messages.h"

namespace ajet::tasks {

struct ModelReply {
  text::ChatMessage message{.role = text::Role::kAssistant};  // tool_calls parsed (Hermes format)
  std::string finish_reason = "stop";                         // "stop", "tool_calls" or "length"
};

class ChatModel {
 public:
  virtual ~ChatModel() = default;
  // One assistant turn for the conversation so far. Throws ajet::Error when there is no reply:
  // ErrorCode::kResourceExhausted when the conversation no longer fits the context window (the
  // agent ends the episode with termination "context_limit"); any other error ends it with
  // "model_error". One object serves one episode at a time.
  virtual ModelReply complete(const std::vector<text::ChatMessage>& messages,
                              const std::vector<OrderedJson>& tools) = 0;
};

// The reply a server makes of generated text: content, <think> block and <tool_call> blocks parsed
// as the swarm server does (text/tool_calls.h); a malformed <tool_call> stays in the content.
// Tool-call ids are "call_<n>" from `next_call_id` upwards when given, else random.
ModelReply reply_from_text(std::string_view generated, std::string_view finish_reason = "stop",
                           std::optional<int64_t> next_call_id = std::nullopt);

// Per-episode knobs the launcher may set; unset ones come from the task's metadata.
struct AgentOptions {
  std::optional<int64_t> max_tool_calls{};  // calc (metadata.max_tool_calls, default 3)
  std::optional<int64_t> max_steps{};       // frozenlake (metadata.max_steps)
  std::optional<uint64_t> env_seed{};       // frozenlake slip randomness (metadata.env_seed)
};

struct EpisodeResult {
  WorkflowOutput output{};
  std::vector<text::ChatMessage> messages{};  // the whole conversation, model turns included
  std::vector<OrderedJson> tools{};
};

// Termination reasons every built-in agent uses in output.metadata.termination:
//   answered         the final answer was judged (reward says whether it was right)
//   no_answer        a reply without tool calls and without an answer in the expected format
//   malformed_tool_call  a reply whose <tool_call> block could not be parsed
//   truncated        the reply hit max tokens before an answer
//   format_error     frozenlake: a reply without exactly one valid action
//   tool_call_limit  calc: more tool calls than allowed
//   goal / hole / max_steps  frozenlake outcomes
//   context_limit    the model refused: the conversation no longer fits
//   model_error      the model call failed for another reason
//   agent_error      a bug or a broken task; the message is in metadata.error
// Calls the model, turning a thrown error into a termination reason (returned in `termination`).
std::optional<ModelReply> call_model(ChatModel& model,
                                     const std::vector<text::ChatMessage>& messages,
                                     const std::vector<OrderedJson>& tools,
                                     std::string& termination, std::string& error_message);

}  // namespace ajet::tasks
