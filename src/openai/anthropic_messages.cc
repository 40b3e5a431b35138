#include "openai/anthropic_messages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_set>

#include "common/error.h"
#include "openai/body_fields.h"

namespace ajet::openai {

namespace {

using text::OrderedJson;

using body::bad;
using body::field;
using body::string_at;

// Text of `system` or of a tool_result's content: a string, or text blocks (joined by newlines).
// In a tool result (`tool_result`), what a text model cannot read but an agent's tool returns in
// passing becomes a line saying what was there: an image or a document (Claude Code's Read of a
// picture or a PDF) and a tool_reference (the tool its ToolSearch loaded), so the episode goes on.
std::string text_of(const OrderedJson& v, const std::string& path, bool tool_result = false) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad(path, "must be a string or a list of text blocks");
  std::string out;
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string at = fmt::format("{}[{}]", path, j);
    if (!v[j].is_object()) bad(at, "must be a content block (an object)");
    const std::string type = string_at(v[j], "type", at);
    std::string line;
    if (type == "text") {
      line = string_at(v[j], "text", at);
    } else if (tool_result && (type == "image" || type == "document")) {
      line = "[" + type + " omitted: the served model reads text only]";
    } else if (tool_result && type == "tool_reference") {
      line = "[tool loaded: " + string_at(v[j], "tool_name", at) + "]";
    } else {
      bad(at + ".type", "'" + type + "' is not supported here (" +
                            (tool_result ? "text, image, document, tool_reference" : "text only") +
                            ")");
    }
    if (!out.empty()) out += "\n";
    out += line;
  }
  return out;
}

[[noreturn]] void unsupported_block(const std::string& at, const std::string& type) {
  if (type == "image" || type == "document") {
    bad(at + ".type", "'" + type + "' blocks are not supported (the served model reads text only)");
  }
  bad(at + ".type",
      "'" + type +
          "' is not a content block this server reads (text, tool_use, tool_result, thinking)");
}

// One Anthropic message → its OpenAI messages, appended to `out`. `tool_uses`: the ids of the
// tool_use blocks of the messages before (this one's are added).
void convert_message(const OrderedJson& m, const std::string& at, OrderedJson& out,
                     std::unordered_set<std::string>& tool_uses) {
  if (!m.is_object()) bad(at, "must be an object");
  const std::string role = string_at(m, "role", at);
  if (role != "user" && role != "assistant" && role != "system") {
    bad(at + ".role", "must be 'user', 'assistant' or 'system', got '" + role + "'");
  }
  const OrderedJson* content = field(m, "content");
  if (content == nullptr) bad(at + ".content", "is required");
  if (role == "system") {
    // Claude Code's mid-conversation system messages (text blocks): a system turn where they stand.
    // Every template family served here renders a system message after the first as a system turn,
    // and keeping it in place keeps each call's prompt a prefix of the next (one merged sample).
    out.push_back(OrderedJson{{"role", "system"}, {"content", text_of(*content, at + ".content")}});
    return;
  }
  if (content->is_string()) {
    out.push_back(OrderedJson{{"role", role}, {"content", content->get<std::string>()}});
    return;
  }
  if (!content->is_array()) bad(at + ".content", "must be a string or a list of content blocks");
  std::string text, thinking;
  OrderedJson tool_calls = OrderedJson::array();
  for (size_t j = 0; j < content->size(); ++j) {
    const OrderedJson& b = (*content)[j];
    const std::string bat = fmt::format("{}.content[{}]", at, j);
    if (!b.is_object()) bad(bat, "must be a content block (an object)");
    const std::string type = string_at(b, "type", bat);
    if (type == "text") {
      text += string_at(b, "text", bat);
    } else if (type == "tool_use" && role == "assistant") {
      const OrderedJson* input = field(b, "input");
      if (input != nullptr && !input->is_object()) bad(bat + ".input", "must be an object");
      const std::string id = string_at(b, "id", bat);
      tool_uses.insert(id);
      tool_calls.push_back(OrderedJson{
          {"id", id},
          {"type", "function"},
          {"function",
           {{"name", string_at(b, "name", bat)},
            {"arguments", (input != nullptr ? *input : OrderedJson::object())
                              .dump(-1, ' ', false, OrderedJson::error_handler_t::replace)}}}});
    } else if (type == "tool_result" && role == "user") {
      const OrderedJson* result = field(b, "content");
      std::string body =
          result == nullptr ? "" : text_of(*result, bat + ".content", /*tool_result=*/true);
      const OrderedJson* is_error = field(b, "is_error");
      if (is_error != nullptr && is_error->is_boolean() && is_error->get<bool>())
        body = "Error: " + body;
      const std::string id = string_at(b, "tool_use_id", bat);
      if (!tool_uses.contains(id)) {
        bad(bat + ".tool_use_id",
            "'" + id +
                "' answers no tool_use: no earlier assistant message has a tool_use "
                "block with that id");
      }
      out.push_back(OrderedJson{{"role", "tool"}, {"tool_call_id", id}, {"content", body}});
    } else if (type == "thinking" && role == "assistant") {
      thinking += string_at(b, "thinking", bat);
    } else if (type == "redacted_thinking") {
      // Opaque to any model but Anthropic's: nothing to render.
    } else if (type == "tool_use" || type == "tool_result" || type == "thinking") {
      bad(bat + ".type", "'" + type + "' blocks belong to " +
                             (type == "tool_result" ? "user" : "assistant") + " messages");
    } else {
      unsupported_block(bat, type);
    }
  }
  if (role == "user") {
    if (!text.empty() || out.empty() || out.back().value("role", "") != "tool") {
      out.push_back(OrderedJson{{"role", "user"}, {"content", text}});
    }
    return;
  }
  OrderedJson message{{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) message["reasoning_content"] = thinking;
  if (!tool_calls.empty()) message["tool_calls"] = std::move(tool_calls);
  out.push_back(std::move(message));
}

// Client tools (no type, or "custom") → function tools; server tools (web_search_…,
// code_execution_…, any other type) are run by Anthropic's servers, not by the client: dropped, and
// named in `notes`.
OrderedJson anthropic_tools_to_chat(const OrderedJson& tools, ConversionNotes* notes) {
  if (!tools.is_array()) bad("tools", "must be a list");
  OrderedJson out = OrderedJson::array();
  std::vector<std::string> dropped;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const OrderedJson& t = tools[i];
    if (!t.is_object()) bad(at, "must be an object");
    if (const OrderedJson* type = field(t, "type"); type != nullptr && *type != "custom") {
      if (!type->is_string()) bad(at + ".type", "must be a string");
      const OrderedJson* name = field(t, "name");
      dropped.push_back(fmt::format(
          "{} ({})", name != nullptr && name->is_string() ? name->get<std::string>() : at,
          type->get<std::string>()));
      continue;
    }
    const OrderedJson* schema = field(t, "input_schema");
    if (schema == nullptr) bad(at + ".input_schema", "is required");
    if (!schema->is_object()) bad(at + ".input_schema", "must be a JSON schema (an object)");
    OrderedJson function{{"name", string_at(t, "name", at)}};
    if (const OrderedJson* d = field(t, "description")) {
      if (!d->is_string()) bad(at + ".description", "must be a string");
      function["description"] = *d;
    }
    function["parameters"] = *schema;
    out.push_back(OrderedJson{{"type", "function"}, {"function", std::move(function)}});
  }
  if (!dropped.empty() && notes != nullptr) {
    notes->push_back(fmt::format("dropped {} server tool(s) this server does not run: {}",
                                 dropped.size(), fmt::join(dropped, ", ")));
  }
  return out;
}

OrderedJson convert_tool_choice(const OrderedJson& choice) {
  if (!choice.is_object()) bad("tool_choice", "must be an object such as {\"type\": \"auto\"}");
  const std::string type = string_at(choice, "type", "tool_choice");
  if (type == "auto") return "auto";
  if (type == "any") return "required";
  if (type == "none") return "none";
  if (type == "tool") {
    return OrderedJson{{"type", "function"},
                       {"function", {{"name", string_at(choice, "name", "tool_choice")}}}};
  }
  bad("tool_choice.type", "must be auto, any, tool or none, got '" + type + "'");
}

}  // namespace

OrderedJson anthropic_to_chat_body(const OrderedJson& body, ConversionNotes* notes,
                                   bool count_only) {
  OrderedJson chat = OrderedJson::object();
  if (!body.is_object()) bad("(root)", "must be a JSON object");
  if (const OrderedJson* model = field(body, "model")) chat["model"] = *model;
  const OrderedJson* max_tokens = field(body, "max_tokens");
  if (max_tokens == nullptr && !count_only)
    bad("max_tokens", "is required (the Messages API has no default)");
  if (max_tokens != nullptr) chat["max_tokens"] = *max_tokens;

  OrderedJson messages = OrderedJson::array();
  if (const OrderedJson* system = field(body, "system")) {
    messages.push_back(OrderedJson{{"role", "system"}, {"content", text_of(*system, "system")}});
  }
  const OrderedJson* input = field(body, "messages");
  if (input == nullptr) bad("messages", "is required");
  if (!input->is_array() || input->empty()) bad("messages", "must be a non-empty list");
  std::unordered_set<std::string> tool_uses;
  for (size_t i = 0; i < input->size(); ++i) {
    convert_message((*input)[i], fmt::format("messages[{}]", i), messages, tool_uses);
  }
  chat["messages"] = std::move(messages);

  if (const OrderedJson* tools = field(body, "tools"))
    chat["tools"] = anthropic_tools_to_chat(*tools, notes);
  if (const OrderedJson* choice = field(body, "tool_choice"))
    chat["tool_choice"] = convert_tool_choice(*choice);
  if (const OrderedJson* stop = field(body, "stop_sequences")) chat["stop"] = *stop;
  for (const char* key : {"temperature", "top_p", "top_k", "stream"}) {
    if (const OrderedJson* v = field(body, key)) chat[key] = *v;
  }
  if (const OrderedJson* thinking = field(body, "thinking")) {
    if (!thinking->is_object())
      bad("thinking", "must be an object such as {\"type\": \"enabled\"}");
    const std::string type = string_at(*thinking, "type", "thinking");
    if (type != "enabled" && type != "disabled" && type != "adaptive") {
      bad("thinking.type", "must be enabled, adaptive or disabled, got '" + type + "'");
    }
    // adaptive (Claude Code's default: the model decides how much to think) is the template's
    // thinking switch on; a Qwen3 model then decides itself whether its think block is empty.
    chat["chat_template_kwargs"] = OrderedJson{{"enable_thinking", type != "disabled"}};
  }
  return chat;
}

FieldNames anthropic_field_names() {
  return FieldNames{
      .stop = "stop_sequences", .max_tokens = "max_tokens", .wording = ErrorWording::kAnthropic};
}

std::string anthropic_stop_reason(std::string_view openai_finish_reason, bool stopped_by_string) {
  if (stopped_by_string) return "stop_sequence";
  if (openai_finish_reason == "tool_calls") return "tool_use";
  if (openai_finish_reason == "length") return "max_tokens";
  return "end_turn";
}

Json anthropic_content_json(const text::ParsedOutput& output) {
  Json blocks = Json::array();
  if (output.reasoning_content) {
    blocks.push_back(
        {{"type", "thinking"}, {"thinking", *output.reasoning_content}, {"signature", ""}});
  }
  if (!output.content.empty() || output.tool_calls.empty())
    blocks.push_back({{"type", "text"}, {"text", output.content}});
  for (const text::ToolCall& call : output.tool_calls) {
    std::optional<Json> input = try_parse_json(call.arguments);
    blocks.push_back({{"type", "tool_use"},
                      {"id", call.id},
                      {"name", call.name},
                      {"input", input && input->is_object() ? std::move(*input) : Json::object()}});
  }
  return blocks;
}

Json anthropic_message_json(const ResponseMeta& meta, const text::ParsedOutput& output,
                            std::string_view stop_reason, std::string_view stop_sequence,
                            int64_t input_tokens, int64_t output_tokens) {
  return Json{{"id", meta.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", meta.model},
              {"content", anthropic_content_json(output)},
              {"stop_reason", stop_reason},
              {"stop_sequence", stop_sequence.empty() ? Json(nullptr) : Json(stop_sequence)},
              {"usage", {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}}}};
}

std::string sse_event(std::string_view name, Json data) {
  data["type"] = name;
  std::string out = "event: ";
  out += name;
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

std::string anthropic_stream_open(const ResponseMeta& meta, int64_t input_tokens) {
  Json message{{"id", meta.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", meta.model},
               {"content", Json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
  return sse_event("message_start", Json{{"message", std::move(message)}}) +
         sse_event("content_block_start",
                   Json{{"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}}) +
         sse_event("ping", Json::object());
}

std::string anthropic_text_delta(std::string_view text) {
  return sse_event("content_block_delta",
                   Json{{"index", 0}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string anthropic_stream_close(const text::ParsedOutput& output, std::string_view stop_reason,
                                   std::string_view stop_sequence, int64_t output_tokens) {
  std::string out = sse_event("content_block_stop", Json{{"index", 0}});
  int index = 1;
  for (const text::ToolCall& call : output.tool_calls) {
    std::optional<Json> input = try_parse_json(call.arguments);
    const std::string arguments = input && input->is_object() ? call.arguments : "{}";
    out += sse_event("content_block_start", Json{{"index", index},
                                                 {"content_block",
                                                  {{"type", "tool_use"},
                                                   {"id", call.id},
                                                   {"name", call.name},
                                                   {"input", Json::object()}}}});
    out += sse_event("content_block_delta",
                     Json{{"index", index},
                          {"delta", {{"type", "input_json_delta"}, {"partial_json", arguments}}}});
    out += sse_event("content_block_stop", Json{{"index", index}});
    ++index;
  }
  out += sse_event(
      "message_delta",
      Json{{"delta",
            {{"stop_reason", stop_reason},
             {"stop_sequence", stop_sequence.empty() ? Json(nullptr) : Json(stop_sequence)}}},
           {"usage", {{"output_tokens", output_tokens}}}});
  out += sse_event("message_stop", Json::object());
  return out;
}

std::string anthropic_stream_error(std::string_view type, std::string_view message) {
  return sse_event("error", Json{{"error", {{"type", type}, {"message", message}}}});
}

}  // namespace ajet::openai
