#include "text/messages.h"

#include <array>
#include <cstdio>

#include "common/error.h"
#include "common/json.h"

namespace ajet::text {

namespace {

std::string_view type_name(const OrderedJson& v) { return json_type_name(v); }

[[noreturn]] void wrong_type(const std::string& path, std::string_view expected,
                             const OrderedJson& got) {
  invalid_argument(path + " must be " + std::string(expected) + ", got " +
                   std::string(type_name(got)));
}

// The field when present and not null.
const OrderedJson* field(const OrderedJson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> optional_string(const OrderedJson& obj, const char* key,
                                           const std::string& where) {
  const OrderedJson* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(where + "." + key, "a string", *v);
  return v->get<std::string>();
}

std::string required_string(const OrderedJson& obj, const char* key, const std::string& where) {
  auto v = optional_string(obj, key, where);
  if (!v) invalid_argument(where + "." + key + " is required");
  return *v;
}

// Content: a string, null, or a list of {"type": "text", "text": ...} parts joined with "\n".
std::optional<std::string> parse_content(const OrderedJson& message, const std::string& where) {
  const OrderedJson* v = field(message, "content");
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_array()) wrong_type(where + ".content", "a string, null or a list of text parts", *v);
  std::string joined;
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string path = where + ".content[" + std::to_string(i) + "]";
    const OrderedJson& part = (*v)[i];
    if (!part.is_object()) wrong_type(path, "an object", part);
    std::string type = required_string(part, "type", path);
    if (type != "text") {
      invalid_argument(path + ".type '" + type +
                       "' is not supported (only text parts can be rendered)");
    }
    if (i > 0) joined += '\n';
    joined += required_string(part, "text", path);
  }
  return joined;
}

ToolCall parse_tool_call(const OrderedJson& call, const std::string& where) {
  if (!call.is_object()) wrong_type(where, "an object", call);
  auto type = optional_string(call, "type", where);
  if (type && *type != "function") {
    invalid_argument(where + ".type must be \"function\", got \"" + *type + "\"");
  }
  const OrderedJson* fn = field(call, "function");
  if (fn == nullptr) invalid_argument(where + ".function is required");
  if (!fn->is_object()) wrong_type(where + ".function", "an object", *fn);
  ToolCall out;
  out.id = optional_string(call, "id", where).value_or("");
  out.name = required_string(*fn, "name", where + ".function");
  if (out.name.empty()) invalid_argument(where + ".function.name must not be empty");
  const OrderedJson* args = field(*fn, "arguments");
  if (args == nullptr) invalid_argument(where + ".function.arguments is required");
  if (!args->is_string()) wrong_type(where + ".function.arguments", "a string (JSON text)", *args);
  out.arguments = args->get<std::string>();
  // Arguments may be any text, but JSON in them is read again (rendering, the tracker's signature):
  // refused here when deeper than every other JSON may be, naming the field (issue 38).
  require_json_depth(out.arguments, where + ".function.arguments");
  return out;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20) {
          std::array<char, 8> buf{};
          std::snprintf(buf.data(), buf.size(), "\\u%04x", u);
          out += buf.data();
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append_template_json(std::string& out, const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        append_json_string(out, it.key());
        out += ": ";
        append_template_json(out, it.value());
      }
      out += '}';
      break;
    }
    case OrderedJson::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        append_template_json(out, v[i]);
      }
      out += ']';
      break;
    }
    case OrderedJson::value_t::string:
      append_json_string(out, v.get_ref<const std::string&>());
      break;
    default:
      // null, booleans and numbers: nlohmann prints floats as shortest round-trip with ".0" for
      // integral values and "1e+16"-style exponents, like Python's repr.
      out += v.dump();
  }
}

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kDeveloper: return "developer";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
  }
  return "unknown";
}

std::optional<Role> role_from_name(std::string_view name) {
  for (Role r : {Role::kSystem, Role::kDeveloper, Role::kUser, Role::kAssistant, Role::kTool}) {
    if (role_name(r) == name) return r;
  }
  return std::nullopt;
}

ChatMessage parse_chat_message(const OrderedJson& message, const std::string& where) {
  if (!message.is_object()) wrong_type(where, "an object", message);
  ChatMessage out;
  std::string role = required_string(message, "role", where);
  auto r = role_from_name(role);
  if (!r) {
    invalid_argument(where + ".role '" + role +
                     "' is not one of system, developer, user, assistant, tool");
  }
  out.role = *r;

  auto content = parse_content(message, where);
  if (!content && out.role != Role::kAssistant) {
    invalid_argument(where + ".content is required for a " + role + " message");
  }
  out.content_was_null = !content.has_value();
  out.content = content.value_or("");

  out.reasoning_content = optional_string(message, "reasoning_content", where);
  out.name = optional_string(message, "name", where);
  out.tool_call_id = optional_string(message, "tool_call_id", where);

  if (const OrderedJson* calls = field(message, "tool_calls")) {
    if (!calls->is_array()) wrong_type(where + ".tool_calls", "an array", *calls);
    if (out.role != Role::kAssistant && !calls->empty()) {
      invalid_argument(where + ".tool_calls is only allowed on assistant messages, not " + role);
    }
    for (size_t i = 0; i < calls->size(); ++i) {
      out.tool_calls.push_back(
          parse_tool_call((*calls)[i], where + ".tool_calls[" + std::to_string(i) + "]"));
    }
  }
  return out;
}

std::vector<OrderedJson> parse_tools(const OrderedJson& tools, const std::string& where) {
  std::vector<OrderedJson> out;
  if (tools.is_null()) return out;
  if (!tools.is_array()) wrong_type(where, "an array", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string path = where + "[" + std::to_string(i) + "]";
    const OrderedJson& tool = tools[i];
    if (!tool.is_object()) wrong_type(path, "an object", tool);
    std::string type = required_string(tool, "type", path);
    if (type != "function")
      invalid_argument(path + ".type must be \"function\", got \"" + type + "\"");
    const OrderedJson* fn = field(tool, "function");
    if (fn == nullptr) invalid_argument(path + ".function is required");
    if (!fn->is_object()) wrong_type(path + ".function", "an object", *fn);
    std::string name = required_string(*fn, "name", path + ".function");
    if (name.empty()) invalid_argument(path + ".function.name must not be empty");
    optional_string(*fn, "description", path + ".function");
    if (const OrderedJson* params = field(*fn, "parameters"); params && !params->is_object()) {
      wrong_type(path + ".function.parameters", "an object (JSON Schema)", *params);
    }
    out.push_back(tool);
  }
  return out;
}

ChatRequest parse_chat_request(const OrderedJson& body) {
  if (!body.is_object()) wrong_type("request", "a JSON object", body);
  ChatRequest out;
  const OrderedJson* messages = field(body, "messages");
  if (messages == nullptr) invalid_argument("messages is required");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) invalid_argument("messages must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    out.messages.push_back(
        parse_chat_message((*messages)[i], "messages[" + std::to_string(i) + "]"));
  }
  if (const OrderedJson* tools = field(body, "tools")) out.tools = parse_tools(*tools, "tools");
  return out;
}

ChatRequest parse_chat_request(std::string_view json_text, std::string_view source) {
  const OrderedJson body = parse_ordered_json(json_text, source);
  try {
    return parse_chat_request(body);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(source) + ": " + e.what());
  }
}

OrderedJson to_openai_json(const ChatMessage& message) {
  OrderedJson out = OrderedJson::object();
  out["role"] = role_name(message.role);
  if (message.content_was_null && message.content.empty()) {
    out["content"] = nullptr;
  } else {
    out["content"] = message.content;
  }
  if (message.reasoning_content) out["reasoning_content"] = *message.reasoning_content;
  if (!message.tool_calls.empty()) {
    OrderedJson calls = OrderedJson::array();
    for (const ToolCall& c : message.tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    out["tool_calls"] = std::move(calls);
  }
  if (message.tool_call_id) out["tool_call_id"] = *message.tool_call_id;
  if (message.name) out["name"] = *message.name;
  return out;
}

std::string template_json(const OrderedJson& value) {
  std::string out;
  append_template_json(out, value);
  return out;
}

}  // namespace ajet::text
