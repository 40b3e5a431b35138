// The three LLM APIs an application may speak to the proxy (OpenAI Chat Completions, OpenAI
// Responses, Anthropic Messages), seen from outside: which API a path is, what a request asks
// (stream or not, its task id), the text a judge reads of a request and of an answer (a JSON body
// or the raw bytes of an SSE stream), and errors in each API's own shape. Pure functions over plain
// data: nothing here talks to the network or knows about episodes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "http/message.h"

namespace ajet::proxy {

enum class Api { kChat, kResponses, kMessages };

std::string_view api_name(Api api);  // "chat" | "responses" | "messages"
// "/v1/chat/completions", "/v1/responses", "/v1/messages" (what the front serves per episode).
std::string_view api_path(Api api);

// What the proxy reads of an application's request before forwarding it unchanged.
struct AppRequest {
  Api api = Api::kChat;
  Json body;            // the parsed body, forwarded as sent
  bool stream = false;  // "stream": true
  std::string task_id;  // the application's task id; "" when it sent none
};

// Parses and checks an application's request body: a JSON object with the fields its API requires
// (chat: a non-empty `messages` array; Responses: `input`; Messages: `messages` and `max_tokens`).
// The task id comes from the `X-AJet-Task-Id` header, else the body's `metadata.task_id` (a
// string). Throws Error(kInvalidArgument) naming the field.
AppRequest parse_app_request(Api api, const http::Headers& headers, std::string_view body);

// The conversation of a request as plain text for a judge: "system: ...\n\nuser: ...", tool calls
// and tool results written inline. Never throws on odd content (unknown parts are skipped).
std::string request_text(Api api, const Json& body);

// The text of one answer as the application would read it: the assistant's text, then each tool
// call as `<tool_call>{"name": ..., "arguments": ...}</tool_call>` on its own line. `raw` is the
// upstream body: a JSON object, or an SSE stream (`sse`) of that API's events. Throws
// Error(kInvalidArgument) when it is neither a well-formed answer nor a stream of one.
std::string answer_text(Api api, std::string_view raw, bool sse);

// An error in the API's own shape: OpenAI's {"error": {message, type, code}} for chat and
// Responses, Anthropic's {"type": "error", "error": {type, message}} for Messages. 503 carries
// Retry-After.
http::Response api_error(Api api, int status, std::string_view message, std::string_view code = {});

// An error as the last event of a stream the application already reads (its status 200 sent), in
// the shape each API's SDKs raise from: chat `data: {"error": {...}}`; Responses `event: error`
// with {"type": "error", "code", "message"}; Messages `event: error` with Anthropic's error
// object.
// `error_body` is an error response's body in the API's shape (api_error's, or the front's own);
// anything else is carried as its message.
std::string stream_error_event(Api api, int status, std::string_view error_body);

}  // namespace ajet::proxy
