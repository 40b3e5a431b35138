#include "proxy/api.h"

#include <map>
#include <vector>

#include "common/error.h"
#include "http/response.h"
#include "http/sse.h"

namespace ajet::proxy {

namespace {

constexpr size_t kMaxTaskIdBytes = 256;

// A task id must be usable as a GRPO group name and a log field: printable, bounded.
void check_task_id(const std::string& id, std::string_view where) {
  if (id.empty() || id.size() > kMaxTaskIdBytes) {
    invalid_argument(std::string(where) + " must be 1 to " + std::to_string(kMaxTaskIdBytes) +
                     " bytes, got " + std::to_string(id.size()));
  }
  for (unsigned char c : id) {
    if (c < 0x20 || c == 0x7f) invalid_argument(std::string(where) + " has a control character");
  }
}

// Text of a content value: a string, or a list of parts whose `text` is taken (other parts
// skipped).
std::string content_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const Json& part : content) {
    if (part.is_string()) {
      out += part.get<std::string>();
    } else if (part.is_object() && part.contains("text") && part["text"].is_string()) {
      if (!out.empty()) out += "\n";
      out += part["text"].get<std::string>();
    }
  }
  return out;
}

// `<tool_call>{"name": ..., "arguments": ...}</tool_call>`; arguments given as a JSON text are
// written as the value they encode.
std::string tool_call_text(const std::string& name, const Json& arguments) {
  Json args = arguments;
  if (arguments.is_string()) {
    if (std::optional<Json> parsed = try_parse_json(arguments.get<std::string>())) args = *parsed;
  }
  Json call = {{"name", name}, {"arguments", args}};
  return "<tool_call>" + call.dump(-1, ' ', false, Json::error_handler_t::replace) + "</tool_call>";
}

std::string str(const Json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return "";
  return obj[key].get<std::string>();
}

void append_turn(std::string& out, std::string_view role, std::string_view text) {
  if (!out.empty()) out += "\n\n";
  out += role;
  out += ": ";
  out += text;
}

// The answer's text followed by its tool calls, one per line.
std::string join_answer(const std::string& text, const std::vector<std::string>& calls) {
  std::string out = text;
  for (const std::string& call : calls) {
    if (!out.empty()) out += "\n";
    out += call;
  }
  return out;
}

Json parse_object(std::string_view raw, std::string_view what) {
  Json body = parse_json(raw, what);
  if (!body.is_object()) invalid_argument(std::string(what) + " is not a JSON object");
  return body;
}

[[noreturn]] void upstream_error(std::string_view what, const Json& error) {
  std::string message = error.is_object() ? str(error, "message") : "";
  if (message.empty()) message = error.dump(-1, ' ', false, Json::error_handler_t::replace);
  invalid_argument(std::string(what) + " carries an error: " + message);
}

// ---- Chat Completions ----

std::string chat_answer(const Json& body) {
  if (body.contains("error")) upstream_error("chat completion", body["error"]);
  if (!body.contains("choices") || !body["choices"].is_array() || body["choices"].empty()) {
    invalid_argument("chat completion has no choices");
  }
  const Json& choice = body["choices"][0];
  if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object()) {
    invalid_argument("chat completion: choices[0] has no message");
  }
  const Json& message = choice["message"];
  std::vector<std::string> calls;
  if (message.contains("tool_calls") && message["tool_calls"].is_array()) {
    for (const Json& call : message["tool_calls"]) {
      const Json& fn = call.value("function", Json::object());
      calls.push_back(tool_call_text(str(fn, "name"), fn.value("arguments", Json(""))));
    }
  }
  return join_answer(content_text(message.value("content", Json(""))), calls);
}

std::string chat_stream_answer(std::string_view raw) {
  std::string text;
  std::map<int64_t, std::pair<std::string, std::string>> calls;  // index -> (name, arguments)
  bool finished = false;
  http::SseParser parser;
  parser.feed(raw, [&](const http::SseEvent& event) {
    if (event.data == "[DONE]") return true;
    Json chunk = parse_object(event.data, "chat stream chunk");
    if (chunk.contains("error")) upstream_error("chat stream", chunk["error"]);
    if (!chunk.contains("choices") || !chunk["choices"].is_array()) return true;
    for (const Json& choice : chunk["choices"]) {
      if (choice.value("index", int64_t{0}) != 0) continue;
      const Json& delta = choice.value("delta", Json::object());
      if (delta.contains("content") && delta["content"].is_string()) {
        text += delta["content"].get<std::string>();
      }
      if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
        for (const Json& call : delta["tool_calls"]) {
          auto& [name, args] = calls[call.value("index", int64_t{0})];
          const Json& fn = call.value("function", Json::object());
          name += str(fn, "name");
          args += str(fn, "arguments");
        }
      }
      if (choice.contains("finish_reason") && !choice["finish_reason"].is_null()) finished = true;
    }
    return true;
  });
  if (!finished) invalid_argument("chat stream ended before a finish_reason");
  std::vector<std::string> out;
  for (const auto& [index, call] : calls) {
    out.push_back(tool_call_text(call.first, Json(call.second)));
  }
  return join_answer(text, out);
}

// ---- Responses ----

std::string responses_answer(const Json& response) {
  if (response.contains("error") && !response["error"].is_null()) {
    upstream_error("response", response["error"]);
  }
  if (!response.contains("output") || !response["output"].is_array()) {
    invalid_argument("response has no output");
  }
  std::string text;
  std::vector<std::string> calls;
  for (const Json& item : response["output"]) {
    const std::string type = str(item, "type");
    if (type == "message") {
      std::string part = content_text(item.value("content", Json::array()));
      if (!text.empty() && !part.empty()) text += "\n";
      text += part;
    } else if (type == "function_call") {
      calls.push_back(tool_call_text(str(item, "name"), item.value("arguments", Json(""))));
    }
  }
  return join_answer(text, calls);
}

std::string responses_stream_answer(std::string_view raw) {
  std::optional<Json> final_response;
  http::SseParser parser;
  parser.feed(raw, [&](const http::SseEvent& event) {
    Json data = parse_object(event.data, "Responses stream event");
    const std::string type = str(data, "type");
    if (type == "error" || type == "response.failed") upstream_error("Responses stream", data);
    if ((type == "response.completed" || type == "response.incomplete") &&
        data.contains("response")) {
      final_response = data["response"];
    }
    return true;
  });
  if (!final_response) invalid_argument("Responses stream ended before response.completed");
  return responses_answer(*final_response);
}

// ---- Anthropic Messages ----

std::string messages_answer(const Json& message) {
  if (str(message, "type") == "error") upstream_error("message", message.value("error", Json()));
  if (!message.contains("content") || !message["content"].is_array()) {
    invalid_argument("message has no content");
  }
  std::string text;
  std::vector<std::string> calls;
  for (const Json& block : message["content"]) {
    const std::string type = str(block, "type");
    if (type == "text") {
      text += str(block, "text");
    } else if (type == "tool_use") {
      calls.push_back(tool_call_text(str(block, "name"), block.value("input", Json::object())));
    }
  }
  return join_answer(text, calls);
}

std::string messages_stream_answer(std::string_view raw) {
  struct Block {
    std::string type, text, name, input;
  };
  std::map<int64_t, Block> blocks;
  bool stopped = false;
  http::SseParser parser;
  parser.feed(raw, [&](const http::SseEvent& event) {
    Json data = parse_object(event.data, "Messages stream event");
    const std::string type = str(data, "type");
    if (type == "error") upstream_error("Messages stream", data.value("error", Json()));
    const int64_t index = data.value("index", int64_t{0});
    if (type == "content_block_start") {
      const Json& block = data.value("content_block", Json::object());
      blocks[index] = Block{str(block, "type"), str(block, "text"), str(block, "name"), ""};
    } else if (type == "content_block_delta") {
      const Json& delta = data.value("delta", Json::object());
      blocks[index].text += str(delta, "text");
      blocks[index].input += str(delta, "partial_json");
    } else if (type == "message_stop") {
      stopped = true;
    }
    return true;
  });
  if (!stopped) invalid_argument("Messages stream ended before message_stop");
  std::string text;
  std::vector<std::string> calls;
  for (const auto& [index, block] : blocks) {
    if (block.type == "text") text += block.text;
    if (block.type == "tool_use") {
      calls.push_back(tool_call_text(block.name, Json(block.input.empty() ? "{}" : block.input)));
    }
  }
  return join_answer(text, calls);
}

// Anthropic's envelope, which its SDKs read (the front's /v1/messages answers the same).
http::Response anthropic_error(int status, std::string_view message) {
  std::string_view type = status >= 500 ? "api_error" : "invalid_request_error";
  switch (status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: break;
  }
  return http::json_response({{"type", "error"}, {"error", {{"type", type}, {"message", message}}}},
                             status);
}

// ---- request text ----

void chat_request_text(const Json& body, std::string& out) {
  for (const Json& m : body.value("messages", Json::array())) {
    if (!m.is_object()) continue;
    std::vector<std::string> calls;
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (const Json& call : m["tool_calls"]) {
        const Json& fn = call.value("function", Json::object());
        calls.push_back(tool_call_text(str(fn, "name"), fn.value("arguments", Json(""))));
      }
    }
    append_turn(out, str(m, "role"),
                join_answer(content_text(m.value("content", Json(""))), calls));
  }
}

void responses_request_text(const Json& body, std::string& out) {
  if (!str(body, "instructions").empty()) append_turn(out, "system", str(body, "instructions"));
  const Json input = body.value("input", Json());
  if (input.is_string()) {
    append_turn(out, "user", input.get<std::string>());
    return;
  }
  if (!input.is_array()) return;
  for (const Json& item : input) {
    if (!item.is_object()) continue;
    const std::string type = str(item, "type");
    if (type == "function_call") {
      append_turn(out, "assistant",
                  tool_call_text(str(item, "name"), item.value("arguments", Json(""))));
    } else if (type == "function_call_output") {
      append_turn(out, "tool", content_text(item.value("output", Json(""))));
    } else if (type.empty() || type == "message") {
      append_turn(out, str(item, "role"), content_text(item.value("content", Json(""))));
    }
  }
}

std::string anthropic_blocks_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const Json& block : content) {
    const std::string type = str(block, "type");
    std::string piece;
    if (type == "text") piece = str(block, "text");
    if (type == "tool_use") {
      piece = tool_call_text(str(block, "name"), block.value("input", Json::object()));
    }
    if (type == "tool_result") {
      piece = "<tool_response>" + anthropic_blocks_text(block.value("content", Json(""))) +
              "</tool_response>";
    }
    if (piece.empty()) continue;
    if (!out.empty()) out += "\n";
    out += piece;
  }
  return out;
}

void messages_request_text(const Json& body, std::string& out) {
  if (body.contains("system")) {
    std::string system = anthropic_blocks_text(body["system"]);
    if (!system.empty()) append_turn(out, "system", system);
  }
  for (const Json& m : body.value("messages", Json::array())) {
    if (!m.is_object()) continue;
    append_turn(out, str(m, "role"), anthropic_blocks_text(m.value("content", Json(""))));
  }
}

}  // namespace

std::string_view api_name(Api api) {
  switch (api) {
    case Api::kChat: return "chat";
    case Api::kResponses: return "responses";
    case Api::kMessages: return "messages";
  }
  return "chat";
}

std::string_view api_path(Api api) {
  switch (api) {
    case Api::kChat: return "/v1/chat/completions";
    case Api::kResponses: return "/v1/responses";
    case Api::kMessages: return "/v1/messages";
  }
  return "/v1/chat/completions";
}

AppRequest parse_app_request(Api api, const http::Headers& headers, std::string_view body) {
  AppRequest request;
  request.api = api;
  request.body = parse_json(body, "request body");
  const Json& b = request.body;
  if (!b.is_object()) invalid_argument("request body must be a JSON object");
  switch (api) {
    case Api::kChat:
      if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty()) {
        invalid_argument("request body: field 'messages' must be a non-empty array");
      }
      break;
    case Api::kResponses:
      if (!b.contains("input") || !(b["input"].is_string() || b["input"].is_array())) {
        invalid_argument("request body: field 'input' must be a string or an array");
      }
      break;
    case Api::kMessages:
      if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty()) {
        invalid_argument("request body: field 'messages' must be a non-empty array");
      }
      if (!b.contains("max_tokens") || !b["max_tokens"].is_number_integer()) {
        invalid_argument("request body: field 'max_tokens' must be an integer");
      }
      break;
  }
  if (b.contains("stream") && !b["stream"].is_null()) {
    if (!b["stream"].is_boolean())
      invalid_argument("request body: field 'stream' must be a boolean");
    request.stream = b["stream"].get<bool>();
  }
  if (std::optional<std::string_view> id = headers.get("X-AJet-Task-Id")) {
    request.task_id = std::string(*id);
    check_task_id(request.task_id, "header X-AJet-Task-Id");
  } else if (b.contains("metadata") && b["metadata"].is_object() &&
             b["metadata"].contains("task_id")) {
    if (!b["metadata"]["task_id"].is_string()) {
      invalid_argument("request body: field 'metadata.task_id' must be a string");
    }
    request.task_id = b["metadata"]["task_id"].get<std::string>();
    check_task_id(request.task_id, "request body: field 'metadata.task_id'");
  }
  return request;
}

std::string request_text(Api api, const Json& body) {
  std::string out;
  if (!body.is_object()) return out;
  try {
    switch (api) {
      case Api::kChat: chat_request_text(body, out); break;
      case Api::kResponses: responses_request_text(body, out); break;
      case Api::kMessages: messages_request_text(body, out); break;
    }
  } catch (const Json::exception&) {
    // A field of an unexpected type: the judge reads what was gathered before it.
  }
  return out;
}

std::string answer_text(Api api, std::string_view raw, bool sse) {
  try {
    switch (api) {
      case Api::kChat:
        return sse ? chat_stream_answer(raw) : chat_answer(parse_object(raw, "chat completion"));
      case Api::kResponses:
        return sse ? responses_stream_answer(raw) : responses_answer(parse_object(raw, "response"));
      case Api::kMessages:
        return sse ? messages_stream_answer(raw) : messages_answer(parse_object(raw, "message"));
    }
  } catch (const Json::exception& e) {  // a field of an unexpected type (value() checks types)
    invalid_argument(std::string(api_name(api)) + " answer: " + e.what());
  }
  return "";
}

http::Response api_error(Api api, int status, std::string_view message, std::string_view code) {
  http::Response r = api == Api::kMessages ? anthropic_error(status, message)
                                           : http::error_response(status, message, {}, code);
  if (status == 503) http::set_retry_after(r, std::chrono::seconds(2));
  return r;
}

std::string stream_error_event(Api api, int status, std::string_view error_body) {
  Json error;
  try {
    error = parse_json(error_body, "error body");
  } catch (const Error&) {
  }
  // The error object wherever the body keeps it (OpenAI's and Anthropic's shapes both say "error").
  const bool shaped = error.is_object() && error.contains("error") && error["error"].is_object();
  std::string message = shaped ? str(error["error"], "message") : "";
  if (message.empty()) {
    message = "HTTP " + std::to_string(status) +
              " from the front: " + std::string(error_body.substr(0, 300));
  }
  if (api == Api::kResponses) {
    const std::string code = shaped ? str(error["error"], "code") : "";
    const Json event = {{"type", "error"},
                        {"code", code.empty() ? std::to_string(status) : code},
                        {"message", message},
                        {"param", nullptr}};
    return "event: error\ndata: " + event.dump() + "\n\n";
  }
  // Chat and Messages: a body already in the API's own shape passes as it is (Anthropic's has a
  // top-level "type": "error", OpenAI's none); any other is rewritten by api_error.
  const bool own_shape =
      shaped && (api == Api::kChat ? !error.contains("type") : str(error, "type") == "error");
  const Json body = own_shape ? error : parse_json(api_error(api, status, message).body, "error");
  return (api == Api::kChat ? "data: " : "event: error\ndata: ") + body.dump() + "\n\n";
}

}  // namespace ajet::proxy
