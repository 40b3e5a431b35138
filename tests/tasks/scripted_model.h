// A ChatModel test double for the built-in agents: replies with scripted generated text (parsed
// into tool calls exactly as the swarm server parses model output), or throws a scripted error.
// The real model path (HTTP client, swarm server, engine) is tested end to end elsewhere.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "tasks/agent.h"

namespace ajet::tasks::testing {

struct ScriptedTurn {
  std::string text;  // generated text (may hold <tool_call> blocks)
  std::string finish_reason = "stop";
  std::optional<ErrorCode> error{};  // throw Error(code) instead of replying
};

class ScriptedChatModel : public ChatModel {
 public:
  explicit ScriptedChatModel(std::vector<ScriptedTurn> turns) : turns_(std::move(turns)) {}
  // Replies computed from the conversation so far (e.g. an oracle agent).
  explicit ScriptedChatModel(
      std::function<std::string(const std::vector<text::ChatMessage>&)> policy)
      : policy_(std::move(policy)) {}

  ModelReply complete(const std::vector<text::ChatMessage>& messages,
                      const std::vector<OrderedJson>& tools) override {
    seen_messages.push_back(messages);
    seen_tools.push_back(tools);
    if (policy_) return reply_from_text(policy_(messages), "stop", next_id_++);
    if (calls_ >= turns_.size()) throw Error(ErrorCode::kInternal, "script exhausted");
    const ScriptedTurn& t = turns_[calls_++];
    if (t.error) throw Error(*t.error, "scripted failure");
    return reply_from_text(t.text, t.finish_reason, next_id_++ * 10);
  }

  size_t calls() const { return seen_messages.size(); }
  std::vector<std::vector<text::ChatMessage>> seen_messages;
  std::vector<std::vector<OrderedJson>> seen_tools;

 private:
  std::vector<ScriptedTurn> turns_;
  std::function<std::string(const std::vector<text::ChatMessage>&)> policy_;
  size_t calls_ = 0;
  int64_t next_id_ = 0;
};

inline std::string calc_call(const std::string& expression) {
  return "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" + expression +
         "\"}}\n</tool_call>";
}

}  // namespace ajet::tasks::testing
