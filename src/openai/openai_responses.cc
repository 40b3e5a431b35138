#include "openai/openai_responses.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_set>

#include "common/error.h"
#include "common/json.h"
#include "openai/body_fields.h"

namespace ajet::openai {

namespace {

using text::OrderedJson;

using body::bad;
using body::field;
using body::string_at;

// A message item's content: a string, or input_text / output_text parts (joined).
std::string content_text(const OrderedJson& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(path, "must be a string or a list of content parts");
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string at = fmt::format("{}[{}]", path, j);
    if (!content[j].is_object()) bad(at, "must be a content part (an object)");
    const std::string type = string_at(content[j], "type", at);
    if (type == "input_text" || type == "output_text") {
      out += string_at(content[j], "text", at);
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      bad(at + ".type",
          "'" + type + "' parts are not supported (the served model reads text only)");
    } else {
      bad(at + ".type",
          "'" + type + "' is not a content part this server reads (input_text, output_text)");
    }
  }
  return out;
}

// The assistant message that function calls attach to: the last one if it is an assistant message
// (an answer's text and its calls are separate items), else a new one.
OrderedJson& assistant_for_calls(OrderedJson& messages) {
  if (messages.empty() || messages.back().value("role", "") != "assistant") {
    messages.push_back(OrderedJson{{"role", "assistant"}, {"content", ""}});
  }
  return messages.back();
}

// `calls`: the call_ids of the function_call items before this one.
void convert_item(const OrderedJson& item, const std::string& at, OrderedJson& messages,
                  std::unordered_set<std::string>& calls) {
  if (!item.is_object()) bad(at, "must be an object");
  std::string type = "message";
  if (const OrderedJson* t = field(item, "type")) {
    if (!t->is_string()) bad(at + ".type", "must be a string");
    type = t->get<std::string>();
  }
  if (type == "message") {
    std::string role = string_at(item, "role", at);
    if (role == "developer") role = "system";
    if (role != "user" && role != "assistant" && role != "system") {
      bad(at + ".role", "must be user, assistant, system or developer, got '" + role + "'");
    }
    const OrderedJson* content = field(item, "content");
    if (content == nullptr) bad(at + ".content", "is required");
    messages.push_back(
        OrderedJson{{"role", role}, {"content", content_text(*content, at + ".content")}});
  } else if (type == "function_call") {
    std::string call_id = string_at(item, "call_id", at);
    std::string name = string_at(item, "name", at);
    std::string arguments = string_at(item, "arguments", at);
    require_json_depth(arguments,
                       "request body: field '" + at + ".arguments'");  // named as sent (issue 38)
    OrderedJson& assistant = assistant_for_calls(messages);
    if (!assistant.contains("tool_calls")) assistant["tool_calls"] = OrderedJson::array();
    calls.insert(call_id);
    assistant["tool_calls"].push_back(OrderedJson{
        {"id", std::move(call_id)},
        {"type", "function"},
        {"function", {{"name", std::move(name)}, {"arguments", std::move(arguments)}}}});
  } else if (type == "function_call_output") {
    const OrderedJson* output = field(item, "output");
    if (output == nullptr) bad(at + ".output", "is required");
    const std::string id = string_at(item, "call_id", at);
    if (!calls.contains(id)) {
      bad(at + ".call_id",
          "'" + id + "' answers no function call: no earlier function_call item has that call_id");
    }
    messages.push_back(OrderedJson{{"role", "tool"},
                                   {"tool_call_id", id},
                                   {"content", content_text(*output, at + ".output")}});
  } else if (type == "reasoning") {
    // The model's earlier reasoning: not rendered again (chat templates drop it from history too).
  } else {
    bad(at + ".type", "'" + type +
                          "' is not an input item this server reads (message, function_call, "
                          "function_call_output, reasoning)");
  }
}

// A `function` tool at `at` → a chat function tool.
OrderedJson function_tool(const OrderedJson& t, const std::string& at) {
  OrderedJson function{{"name", string_at(t, "name", at)}};
  if (const OrderedJson* d = field(t, "description")) {
    if (!d->is_string()) bad(at + ".description", "must be a string");
    function["description"] = *d;
  }
  if (const OrderedJson* p = field(t, "parameters")) {
    if (!p->is_object()) bad(at + ".parameters", "must be a JSON schema (an object)");
    function["parameters"] = *p;
  }
  return OrderedJson{{"type", "function"}, {"function", std::move(function)}};
}

// Function tools as they are; a namespace's function tools flattened under their own names (a name
// already taken is left out), each remembered with its namespace so that a call names it back;
// built-in tools (web_search, file_search, …), which OpenAI's servers run, dropped. What was
// flattened or dropped goes to `notes`.
OrderedJson responses_tools_to_chat(const OrderedJson& tools, ResponsesTools& names,
                                    ConversionNotes* notes) {
  if (!tools.is_array()) bad("tools", "must be a list");
  OrderedJson out = OrderedJson::array();
  std::unordered_set<std::string> taken;
  std::vector<std::string> dropped, flattened;
  auto add = [&](OrderedJson tool, const std::string& space) {
    std::string name = tool["function"]["name"].get<std::string>();
    if (!taken.insert(name).second) return false;
    if (!space.empty()) names.namespace_of[name] = space;
    out.push_back(std::move(tool));
    return true;
  };
  // Top-level functions first: a namespaced tool never hides one of the same name.
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    if (!tools[i].is_object()) bad(at, "must be an object");
    if (string_at(tools[i], "type", at) == "function") add(function_tool(tools[i], at), "");
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const OrderedJson& t = tools[i];
    const std::string type = string_at(t, "type", at);
    if (type == "function") continue;
    if (type != "namespace") {
      dropped.push_back(type);
      continue;
    }
    const std::string space = string_at(t, "name", at);
    const OrderedJson* inner = field(t, "tools");
    if (inner == nullptr || !inner->is_array())
      bad(at + ".tools", "must be a list of function tools");
    size_t kept = 0;
    for (size_t j = 0; j < inner->size(); ++j) {
      const std::string jat = fmt::format("{}.tools[{}]", at, j);
      if (!(*inner)[j].is_object()) bad(jat, "must be an object");
      if (string_at((*inner)[j], "type", jat) != "function") {
        dropped.push_back(space + "." + (*inner)[j]["type"].get<std::string>());
        continue;
      }
      if (add(function_tool((*inner)[j], jat), space)) ++kept;
    }
    flattened.push_back(fmt::format("{} ({} function tools)", space, kept));
  }
  if (notes != nullptr && !flattened.empty()) {
    notes->push_back(fmt::format("flattened namespace tool(s) into function tools: {}",
                                 fmt::join(flattened, ", ")));
  }
  if (notes != nullptr && !dropped.empty()) {
    notes->push_back(fmt::format("dropped {} built-in tool(s) this server does not run: {}",
                                 dropped.size(), fmt::join(dropped, ", ")));
  }
  return out;
}

Json usage(int64_t input_tokens, int64_t output_tokens) {
  return Json{{"input_tokens", input_tokens},
              {"input_tokens_details", {{"cached_tokens", 0}}},
              {"output_tokens", output_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", input_tokens + output_tokens}};
}

Json message_item(const std::string& id, const std::string& text, const char* status) {
  return Json{
      {"id", id},
      {"type", "message"},
      {"status", status},
      {"role", "assistant"},
      {"content",
       Json::array({{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}}})}};
}

Json call_item(const std::string& id, const text::ToolCall& call, const char* status,
               bool with_arguments, const ResponsesTools& tools) {
  Json item{{"id", id},          {"type", "function_call"},
            {"status", status},  {"call_id", call.id},
            {"name", call.name}, {"arguments", with_arguments ? call.arguments : ""}};
  if (auto it = tools.namespace_of.find(call.name); it != tools.namespace_of.end())
    item["namespace"] = it->second;
  return item;
}

}  // namespace

OrderedJson responses_to_chat_body(const OrderedJson& body, ResponsesTools* tools_out,
                                   ConversionNotes* notes) {
  if (field(body, "previous_response_id") != nullptr) {
    bad("previous_response_id",
        "is not supported: this server keeps no responses; send the whole conversation "
        "in 'input'");
  }
  OrderedJson chat = OrderedJson::object();
  if (const OrderedJson* model = field(body, "model")) chat["model"] = *model;
  OrderedJson messages = OrderedJson::array();
  if (const OrderedJson* instructions = field(body, "instructions")) {
    if (!instructions->is_string()) bad("instructions", "must be a string");
    messages.push_back(OrderedJson{{"role", "system"}, {"content", *instructions}});
  }
  const OrderedJson* input = field(body, "input");
  if (input == nullptr) bad("input", "is required");
  if (input->is_string()) {
    messages.push_back(OrderedJson{{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    std::unordered_set<std::string> calls;
    for (size_t i = 0; i < input->size(); ++i)
      convert_item((*input)[i], fmt::format("input[{}]", i), messages, calls);
  } else {
    bad("input", "must be a string or a list of input items");
  }
  if (messages.empty()) bad("input", "holds no message");
  chat["messages"] = std::move(messages);
  ResponsesTools names;
  if (const OrderedJson* tools = field(body, "tools"))
    chat["tools"] = responses_tools_to_chat(*tools, names, notes);
  if (tools_out != nullptr) *tools_out = std::move(names);
  if (const OrderedJson* choice = field(body, "tool_choice")) {
    if (choice->is_object()) {
      const std::string type = string_at(*choice, "type", "tool_choice");
      if (type != "function") bad("tool_choice.type", "must be function, got '" + type + "'");
      chat["tool_choice"] =
          OrderedJson{{"type", "function"},
                      {"function", {{"name", string_at(*choice, "name", "tool_choice")}}}};
    } else if (choice->is_string() &&
               (*choice == "auto" || *choice == "none" || *choice == "required")) {
      chat["tool_choice"] = *choice;
    } else {
      bad("tool_choice",
          "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    }
  }
  if (const OrderedJson* max = field(body, "max_output_tokens")) chat["max_tokens"] = *max;
  for (const char* key : {"temperature", "top_p", "stream"}) {
    if (const OrderedJson* v = field(body, key)) chat[key] = *v;
  }
  return chat;
}

FieldNames responses_field_names() {
  return FieldNames{.stop = "stop", .max_tokens = "max_output_tokens"};
}

ResponseItems response_items(std::string message_id, const text::ParsedOutput& output) {
  ResponseItems items{std::move(message_id), {}};
  for (size_t i = 0; i < output.tool_calls.size(); ++i)
    items.call_ids.push_back(new_response_id("fc_"));
  return items;
}

Json responses_json(const ResponseMeta& meta, const text::ParsedOutput* output,
                    const ResponseItems& items, bool length, int64_t input_tokens,
                    int64_t output_tokens, const ResponsesTools& tools) {
  Json out = Json::array();
  if (output != nullptr) {
    if (output->reasoning_content) {
      out.push_back({{"id", "rs_" + items.message_id.substr(4)},
                     {"type", "reasoning"},
                     {"summary", Json::array({{{"type", "summary_text"},
                                               {"text", *output->reasoning_content}}})}});
    }
    if (!output->content.empty() || output->tool_calls.empty()) {
      out.push_back(message_item(items.message_id, output->content, "completed"));
    }
    for (size_t i = 0; i < output->tool_calls.size(); ++i) {
      out.push_back(call_item(items.call_ids[i], output->tool_calls[i], "completed", true, tools));
    }
  }
  const char* status = output == nullptr ? "in_progress" : length ? "incomplete" : "completed";
  return Json{
      {"id", meta.id},
      {"object", "response"},
      {"created_at", meta.created},
      {"status", status},
      {"model", meta.model},
      {"output", std::move(out)},
      {"parallel_tool_calls", true},
      {"tool_choice", "auto"},
      {"tools", Json::array()},
      {"error", nullptr},
      {"incomplete_details", length ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)},
      {"usage", output == nullptr ? Json(nullptr) : usage(input_tokens, output_tokens)}};
}

std::string ResponsesEvents::event(std::string_view type, Json data) {
  data["type"] = type;
  data["sequence_number"] = sequence_++;
  std::string out = "event: ";
  out += type;
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

std::string ResponsesEvents::open(const ResponseMeta& meta, int64_t input_tokens) {
  const Json response =
      responses_json(meta, nullptr, ResponseItems{message_id_, {}}, false, input_tokens, 0, tools_);
  std::string out = event("response.created", Json{{"response", response}});
  out += event("response.in_progress", Json{{"response", response}});
  return out;
}

std::string ResponsesEvents::open_message() {
  message_open_ = true;
  Json item = message_item(message_id_, "", "in_progress");
  item["content"] = Json::array();
  std::string out =
      event("response.output_item.added", Json{{"output_index", 0}, {"item", std::move(item)}});
  out += event(
      "response.content_part.added",
      Json{{"item_id", message_id_},
           {"output_index", 0},
           {"content_index", 0},
           {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  return out;
}

std::string ResponsesEvents::text_delta(std::string_view text) {
  if (text.empty()) return "";
  std::string out = message_open_ ? std::string() : open_message();
  text_ += text;
  out += event("response.output_text.delta", Json{{"item_id", message_id_},
                                                  {"output_index", 0},
                                                  {"content_index", 0},
                                                  {"delta", text},
                                                  {"logprobs", Json::array()}});
  return out;
}

const ResponseItems& ResponsesEvents::items(const text::ParsedOutput& output) const {
  if (!items_) items_ = response_items(message_id_, output);
  return *items_;
}

std::string ResponsesEvents::close(const ResponseMeta& meta, const text::ParsedOutput& output,
                                   bool length, int64_t input_tokens, int64_t output_tokens) {
  const ResponseItems& items = this->items(output);
  std::string out;
  // The message item shows when text was streamed, or when there is nothing else to show; a turn of
  // function calls alone opens none (Codex shows an empty message before the calls otherwise).
  if (!message_open_ && output.tool_calls.empty()) out += open_message();
  if (message_open_) {
    out += event("response.output_text.done", Json{{"item_id", message_id_},
                                                   {"output_index", 0},
                                                   {"content_index", 0},
                                                   {"text", text_},
                                                   {"logprobs", Json::array()}});
    out += event(
        "response.content_part.done",
        Json{{"item_id", message_id_},
             {"output_index", 0},
             {"content_index", 0},
             {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}}}});
    out +=
        event("response.output_item.done",
              Json{{"output_index", 0}, {"item", message_item(message_id_, text_, "completed")}});
  }
  const int first_call = message_open_ ? 1 : 0;
  for (size_t i = 0; i < output.tool_calls.size(); ++i) {
    const text::ToolCall& call = output.tool_calls[i];
    const int index = int(i) + first_call;
    out += event("response.output_item.added",
                 Json{{"output_index", index},
                      {"item", call_item(items.call_ids[i], call, "in_progress", false, tools_)}});
    out += event(
        "response.function_call_arguments.delta",
        Json{{"item_id", items.call_ids[i]}, {"output_index", index}, {"delta", call.arguments}});
    out += event("response.function_call_arguments.done", Json{{"item_id", items.call_ids[i]},
                                                               {"output_index", index},
                                                               {"name", call.name},
                                                               {"arguments", call.arguments}});
    out += event("response.output_item.done",
                 Json{{"output_index", index},
                      {"item", call_item(items.call_ids[i], call, "completed", true, tools_)}});
  }
  // The final object lists what the stream showed: the message (when shown), then the calls.
  Json response = responses_json(meta, &output, items, length, input_tokens, output_tokens, tools_);
  Json shown = Json::array();
  if (message_open_) shown.push_back(message_item(message_id_, text_, "completed"));
  for (const Json& item : response["output"]) {
    if (item["type"] == "function_call") shown.push_back(item);
  }
  response["output"] = std::move(shown);
  out += event(length ? "response.incomplete" : "response.completed",
               Json{{"response", std::move(response)}});
  return out;
}

std::string ResponsesEvents::error(std::string_view code, std::string_view message) {
  return event("error", Json{{"code", code}, {"message", message}, {"param", nullptr}});
}

}  // namespace ajet::openai
