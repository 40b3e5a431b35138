// The OpenAI chat request model (messages and tool definitions) that chat templates render and the
// tool-call parser produces. Parsing never crashes on bad input: it throws ajet::Error naming the
// field path ("messages[3].tool_calls[0].function.arguments must be a string, got object").
//
// Key order matters: templates serialise tool definitions and tool-call arguments in the order the
// client sent them, so everything here is parsed as OrderedJson (insertion order), never ajet::Json
// (which sorts keys). Parse request bodies with parse_chat_request(text) or parse_ordered_json
// (common/json.h).
//
// Normalisation (what an OpenAI-compatible server such as vLLM does before applying a template, and
// what tests/js/render_chat_template.mjs mirrors): role "developer" is rendered as "system"; null
// or absent content becomes ""; a list of text parts becomes their texts joined with "\n"; any
// other part type is an error. Tool-call `arguments` stay the JSON text the client sent; the
// renderer parses them (see chat_template.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::text {

using OrderedJson = nlohmann::ordered_json;

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool };

// "system", "developer", "user", "assistant", "tool".
std::string_view role_name(Role role);
std::optional<Role> role_from_name(std::string_view name);

struct ToolCall {
  std::string id{};         // "call_..."; may be empty when the client sent none
  std::string name{};       // function name
  std::string arguments{};  // JSON text, normally an object: what OpenAI puts in function.arguments
};

struct ChatMessage {
  Role role = Role::kUser;
  std::string content{};          // normalised: text parts joined with "\n", null -> ""
  bool content_was_null = false;  // the client sent null / no content (assistant with tool calls)
  std::optional<std::string>
      reasoning_content{};                    // assistant; null and absent both read as nullopt
  std::vector<ToolCall> tool_calls{};         // assistant only
  std::optional<std::string> tool_call_id{};  // tool only
  std::optional<std::string> name{};
};

struct ChatRequest {
  std::vector<ChatMessage> messages{};
  // Each {"type": "function", "function": {"name", "description"?, "parameters"?}} kept exactly as
  // sent (including extra keys), because templates serialise the whole object.
  std::vector<OrderedJson> tools{};
};

// Reads "messages" (required, non-empty) and "tools" (optional) of a request body; other fields are
// ignored. Throws Error(kInvalidArgument) naming the field path.
ChatRequest parse_chat_request(const OrderedJson& body);
// Same from JSON text; `source` names the input in errors (e.g. "stdin", "request body").
ChatRequest parse_chat_request(std::string_view json_text, std::string_view source);

// One message; `where` is its path, e.g. "messages[3]".
ChatMessage parse_chat_message(const OrderedJson& message, const std::string& where);
// A `tools` array; `where` is its path, e.g. "tools".
std::vector<OrderedJson> parse_tools(const OrderedJson& tools, const std::string& where);

// OpenAI wire form of a message (content null when it was null and there is nothing to say).
OrderedJson to_openai_json(const ChatMessage& message);

// JSON text exactly as the Jinja `tojson` filter of HF transformers / @huggingface/jinja writes it:
// separators ", " and ": ", key order kept, non-ASCII kept as UTF-8 (ensure_ascii=False), only '"',
// '\\' and control characters escaped (\b \f \n \r \t, others as lowercase \u00xx). Floats follow
// Python's repr (1.0 stays "1.0"; JavaScript would print "1").
std::string template_json(const OrderedJson& value);

}  // namespace ajet::text
