#include "tasks/task.h"

#include "common/error.h"
#include "common/json.h"

namespace ajet::tasks {

namespace {

std::string_view type_name(const OrderedJson& v) { return json_type_name(v); }

[[noreturn]] void bad_field(const std::string& where, std::string_view field,
                            std::string_view expected, const OrderedJson& got) {
  invalid_argument(where + ": field '" + std::string(field) + "' must be " + std::string(expected) +
                   ", got " + std::string(type_name(got)));
}

const OrderedJson* field(const OrderedJson& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

OrderedJson task_to_json(const Task& task) {
  OrderedJson j = OrderedJson::object();
  j["task_id"] = task.task_id;
  j["main_query"] = task.main_query;
  j["init_messages"] = task.init_messages;
  j["metadata"] = task.metadata;
  j["env_type"] = task.env_type;
  return j;
}

Task task_from_json(const OrderedJson& json, const std::string& where) {
  if (!json.is_object())
    invalid_argument(where + ": a task must be a JSON object, got " + std::string(type_name(json)));
  Task task;
  const OrderedJson* id = field(json, "task_id");
  if (id == nullptr) invalid_argument(where + ": missing required field 'task_id'");
  if (id->is_string()) {
    task.task_id = id->get<std::string>();
  } else if (id->is_number_integer()) {
    task.task_id = id->dump();
  } else {
    bad_field(where, "task_id", "a string or an integer", *id);
  }
  if (task.task_id.empty()) invalid_argument(where + ": field 'task_id' must not be empty");

  if (const OrderedJson* q = field(json, "main_query")) {
    if (!q->is_string()) bad_field(where, "main_query", "a string", *q);
    task.main_query = q->get<std::string>();
  }
  if (const OrderedJson* m = field(json, "init_messages")) {
    if (!m->is_array()) bad_field(where, "init_messages", "an array of messages", *m);
    for (size_t i = 0; i < m->size(); ++i) {
      // Validates role/content/tool_calls; throws naming "init_messages[i].<field>".
      text::parse_chat_message((*m)[i], where + ": field init_messages[" + std::to_string(i) + "]");
    }
    task.init_messages = *m;
  }
  if (const OrderedJson* md = field(json, "metadata")) {
    if (!md->is_object()) bad_field(where, "metadata", "an object", *md);
    task.metadata = *md;
    if (const OrderedJson* tools = field(*md, "tools")) {
      text::parse_tools(*tools, where + ": field metadata.tools");
    }
  }
  if (const OrderedJson* e = field(json, "env_type")) {
    if (!e->is_string()) bad_field(where, "env_type", "a string", *e);
    task.env_type = e->get<std::string>();
  }
  if (task.main_query.empty() && task.init_messages.empty()) {
    invalid_argument(where + ": a task needs 'main_query' or 'init_messages' (both are empty)");
  }
  return task;
}

std::vector<text::ChatMessage> initial_messages(const Task& task, std::string_view system_prompt) {
  std::vector<text::ChatMessage> out;
  if (!task.init_messages.empty()) {
    for (size_t i = 0; i < task.init_messages.size(); ++i) {
      out.push_back(text::parse_chat_message(
          task.init_messages[i],
          "task " + task.task_id + " init_messages[" + std::to_string(i) + "]"));
    }
    return out;
  }
  if (!system_prompt.empty()) {
    out.push_back(
        text::ChatMessage{.role = text::Role::kSystem, .content = std::string(system_prompt)});
  }
  out.push_back(text::ChatMessage{.role = text::Role::kUser, .content = task.main_query});
  return out;
}

std::vector<OrderedJson> task_tools(const Task& task) {
  auto it = task.metadata.find("tools");
  if (it == task.metadata.end() || it->is_null()) return {};
  return text::parse_tools(*it, "task " + task.task_id + " metadata.tools");
}

OrderedJson judgement_to_json(const Judgement& judgement) {
  OrderedJson j = OrderedJson::object();
  j["reward"] = judgement.reward;
  j["is_success"] = judgement.is_success;
  j["reason"] = judgement.reason;
  j["details"] = judgement.details;
  return j;
}

OrderedJson workflow_output_to_json(const WorkflowOutput& output) {
  OrderedJson j = OrderedJson::object();
  j["reward"] = output.reward;
  j["is_success"] = output.is_success;
  j["metadata"] = output.metadata;
  j["log_metrics"] = output.log_metrics;
  return j;
}

}  // namespace ajet::tasks
