// The task and episode-result schemas shared by readers, generators, judges, built-in agents and
// the launcher. Field names follow upstream AgentJet (ajet/schema/task.py): a Task is what one
// episode works on; a WorkflowOutput is what an episode reports (the `workflow_output` of
// end_episode). JSON is kept in insertion order (OrderedJson) because messages and tool definitions
// are rendered by chat templates in the order they were written.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/messages.h"

namespace ajet::tasks {

using text::OrderedJson;

struct Task {
  std::string task_id{};
  std::string main_query{};
  OrderedJson init_messages = OrderedJson::array();  // OpenAI chat messages (may be empty)
  OrderedJson metadata = OrderedJson::object();      // free-form; built-in tasks keep answers here
  std::string env_type{};                            // built-in task name ("calc", ...) or ""
};

// {"task_id", "main_query", "init_messages", "metadata", "env_type"}.
OrderedJson task_to_json(const Task& task);
// Reads a task object. `where` prefixes errors (e.g. "tasks.jsonl:12"); every error names the
// field: "tasks.jsonl:12: field 'init_messages' must be an array of messages, got string". task_id
// is required (a non-empty string, or an integer which is turned into its decimal text); the other
// fields default to empty. init_messages are validated as OpenAI chat messages.
Task task_from_json(const OrderedJson& json, const std::string& where);

// The initial conversation of a task as chat messages: init_messages when present, otherwise one
// user message with main_query (after `system_prompt` when that is non-empty).
std::vector<text::ChatMessage> initial_messages(const Task& task,
                                                std::string_view system_prompt = "");
// Tool definitions carried in metadata.tools (OpenAI form); empty when there are none.
std::vector<OrderedJson> task_tools(const Task& task);

// What a judge says about an episode or an answer.
struct Judgement {
  double reward = 0.0;
  bool is_success = false;
  std::string reason{};  // short machine-readable word: "correct", "wrong_answer", ...
  OrderedJson details =
      OrderedJson::object();  // task-specific facts (the parsed answer, expected value)
};

OrderedJson judgement_to_json(const Judgement& judgement);

// What one episode reports: the `workflow_output` object of the swarm protocol's end_episode.
struct WorkflowOutput {
  double reward = 0.0;
  bool is_success = false;
  OrderedJson metadata = OrderedJson::object();     // task_id, turns, tool_calls, termination, ...
  OrderedJson log_metrics = OrderedJson::object();  // name -> number, averaged by the launcher
};

OrderedJson workflow_output_to_json(const WorkflowOutput& output);

}  // namespace ajet::tasks
