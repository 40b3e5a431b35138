#include "tasks/agent.h"

#include <memory>

#include "common/error.h"
#include "text/tool_calls.h"

namespace ajet::tasks {

ModelReply reply_from_text(std::string_view generated, std::string_view finish_reason,
                           std::optional<int64_t> next_call_id) {
  text::ParseOptions options;
  if (next_call_id) {
    auto counter = std::make_shared<int64_t>(*next_call_id);
    options.id_source = [counter] { return "call_" + std::to_string((*counter)++); };
  }
  text::ParsedOutput parsed = text::parse_model_output(generated, options);
  ModelReply reply;
  reply.message = parsed.to_message();
  reply.finish_reason = std::string(finish_reason);
  if (reply.finish_reason == "stop" && !reply.message.tool_calls.empty())
    reply.finish_reason = "tool_calls";
  return reply;
}

std::optional<ModelReply> call_model(ChatModel& model,
                                     const std::vector<text::ChatMessage>& messages,
                                     const std::vector<OrderedJson>& tools,
                                     std::string& termination, std::string& error_message) {
  try {
    ModelReply reply = model.complete(messages, tools);
    reply.message.role = text::Role::kAssistant;
    return reply;
  } catch (const Error& e) {
    termination = e.code() == ErrorCode::kResourceExhausted ? "context_limit" : "model_error";
    error_message = e.what();
  } catch (const std::exception& e) {
    termination = "model_error";
    error_message = e.what();
  }
  return std::nullopt;
}

}  // namespace ajet::tasks
