#include "multi_model/duo.h"

#include "classic/http_chat_model.h"
#include "tasks/builtin.h"
#include "tasks/calc.h"

namespace ajet::multi_model {

tasks::ModelReply TurnRouter::complete(const std::vector<text::ChatMessage>& messages,
                                       const std::vector<tasks::OrderedJson>& tools) {
  bool first_turn = true;
  for (const auto& m : messages) first_turn = first_turn && m.role != text::Role::kAssistant;
  if (first_turn) {
    ++first_turns_;
    return first_.complete(messages, tools);
  }
  ++rest_turns_;
  return rest_.complete(messages, tools);
}

bool caller_computed(const std::vector<text::ChatMessage>& messages, int64_t expected) {
  for (const auto& m : messages) {
    if (m.role != text::Role::kAssistant) continue;
    if (m.tool_calls.empty()) return false;  // the first turn answered (or failed) without the tool
    return tasks::execute_calculator_call(m.tool_calls.front()) == std::to_string(expected);
  }
  return false;
}

namespace {

client::WorkflowOutput duo_output(const tasks::WorkflowOutput& pair, double reward,
                                  const char* role) {
  client::WorkflowOutput out;
  out.reward = reward;
  out.is_success = reward > 0.5;
  out.metadata = classic::plain_json(pair.metadata);
  out.metadata["role"] = role;
  out.metadata["pair_reward"] = pair.reward;
  out.log_metrics = classic::plain_json(pair.log_metrics);
  return out;
}

}  // namespace

DuoOutcome run_calc_duo(const tasks::Task& task, tasks::ChatModel& caller,
                        tasks::ChatModel& answerer) {
  TurnRouter router(caller, answerer);
  DuoOutcome out;
  out.episode = tasks::calc_task().run_episode(task, router);
  auto answer = task.metadata.find("answer");
  const bool known = answer != task.metadata.end() && answer->is_number_integer();
  out.caller_right = known && caller_computed(out.episode.messages, answer->get<int64_t>());
  out.pair_success = out.episode.output.is_success;
  out.caller = duo_output(out.episode.output, out.caller_right ? 1.0 : 0.0, "caller");
  out.answerer = duo_output(out.episode.output, out.episode.output.reward, "answerer");
  return out;
}

}  // namespace ajet::multi_model
