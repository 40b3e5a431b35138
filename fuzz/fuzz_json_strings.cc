// fuzz-sources: src/http/response.cc src/http/message.cc src/openai/anthropic_messages.cc src/openai/openai_responses.cc src/openai/openai_format.cc src/tracking/chat_format.cc src/tracking/call_record.cc src/store/blob.cc
// libFuzzer target: arbitrary bytes as the strings that hold JSON inside a valid body or a stored
// row, each read the way the front reads it (issue 38: a tool call's arguments string nested 70,000
// levels deep passed the body's depth limit and overflowed the stack in the tracker's signature):
//   - a tool call's `arguments` as such (rendered by every chat family, the tracker's turn
//   signature
//     with its canonical arguments), and inside a chat body (an assistant message's tool_calls) and
//     a Responses body (a function_call input item), read as the front reads them, then used the
//     same way;
//   - the same text as the arguments of generated tool calls, rendered as Anthropic content blocks,
//     an Anthropic stream's close and Responses output items;
//   - the text as a stored value: a JSON column (metadata, batch stats) and a stored call's request
//     and response (call_from_row).
// Only ajet::Error may come out, with a message; whatever is read must dump without a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "openai/anthropic_messages.h"
#include "openai/openai_responses.h"
#include "store/blob.h"
#include "text/chat_template.h"
#include "text/messages.h"
#include "text/utf8.h"
#include "tracking/call_record.h"
#include "tracking/chat_format.h"

namespace {

using ajet::Json;
using ajet::text::OrderedJson;

template <class Fn>
void refused_or_read(Fn fn) {
  try {
    fn();
  } catch (const ajet::Error& e) {
    if (std::string_view(e.what()).empty()) std::abort();  // every refusal says why
  }
}

// A request as the front uses it: every family renders it and the tracker signs its turns.
void use_request(const ajet::text::ChatRequest& request) {
  using ajet::text::ChatFamily;
  for (ChatFamily family : {ChatFamily::kQwen3, ChatFamily::kQwen3Thinking, ChatFamily::kQwen2_5,
                            ChatFamily::kChatml}) {
    refused_or_read([&] { ajet::text::render_chat(family, request); });
  }
  for (const ajet::text::ChatMessage& m : request.messages) {
    if (m.role == ajet::text::Role::kAssistant) ajet::tracking::message_signature(m);
    ajet::text::to_openai_json(m).dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

void read_chat(const OrderedJson& body) { use_request(ajet::text::parse_chat_request(body)); }

// The text as a tool call's arguments, whatever a parser in front of it let through.
void use_arguments(const std::string& arguments) {
  ajet::text::ChatRequest request;
  request.messages.resize(2);
  request.messages[0].role = ajet::text::Role::kUser;
  request.messages[0].content = "hi";
  request.messages[1].role = ajet::text::Role::kAssistant;
  request.messages[1].tool_calls.push_back({"c1", "f", arguments});
  // The tracker reads arguments with the limit everything else has: text the bounded parser refuses
  // compares as text (issue 38: parsed without a limit, 70,000 levels overflowed the stack in
  // dump()).
  const std::string key = ajet::tracking::message_signature(request.messages[1]).key;
  if (!ajet::try_parse_json(arguments) && key.find("\x01" + arguments) == std::string::npos)
    std::abort();
  use_request(request);
}

OrderedJson chat_body(const std::string& arguments) {
  return OrderedJson{{"messages",
                      {{{"role", "user"}, {"content", "hi"}},
                       {{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls",
                         {{{"id", "c1"},
                           {"type", "function"},
                           {"function", {{"name", "f"}, {"arguments", arguments}}}}}}},
                       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}}}};
}

OrderedJson responses_body(const std::string& arguments) {
  return OrderedJson{
      {"input",
       {{{"role", "user"}, {"content", "hi"}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", arguments}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "ok"}}}}};
}

// Generated tool calls whose arguments are the text, as each API's answer shows them.
void answer_with_calls(const std::string& arguments) {
  ajet::text::ParsedOutput output;
  output.content = "x";
  output.tool_calls.push_back({"call_0", "f", arguments});
  ajet::openai::anthropic_content_json(output).dump(-1, ' ', false, Json::error_handler_t::replace);
  ajet::openai::anthropic_stream_close(output, "tool_use", "", 1);
  const ajet::openai::ResponseItems items = ajet::openai::response_items("msg_0", output);
  ajet::openai::ResponseMeta meta;
  const Json response = ajet::openai::responses_json(meta, &output, items, false, 1, 1);
  response.dump(-1, ' ', false, Json::error_handler_t::replace);
  ajet::openai::ResponsesEvents("msg_0").close(meta, output, false, 1, 1);
}

void stored(const std::string& text) {
  refused_or_read([&] { ajet::store::parse_stored_json(text, "fuzz column").dump(); });
  ajet::store::CallRow row;
  row.episode_uuid = "e";
  row.request_json = text;
  row.response_json = text;
  row.finish_reason = "stop";
  const ajet::tracking::CallRecord call = ajet::tracking::call_from_row(row, nullptr);
  for (const ajet::text::ChatMessage& m : call.request.messages) {
    if (m.role == ajet::text::Role::kAssistant) ajet::tracking::message_signature(m);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  // A string inside a parsed body is valid UTF-8 (the parser refuses anything else), and so are the
  // arguments the tool-call parser gives; a stored value may be any bytes.
  const std::string text = ajet::text::utf8::repair(raw);
  refused_or_read([&] { use_arguments(text); });
  refused_or_read([&] { read_chat(chat_body(text)); });
  refused_or_read([&] { read_chat(ajet::openai::responses_to_chat_body(responses_body(text))); });
  if (auto input = ajet::try_parse_ordered_json(text); input && input->is_object()) {
    const OrderedJson anthropic{
        {"max_tokens", 8},
        {"messages",
         {{{"role", "user"}, {"content", "hi"}},
          {{"role", "assistant"},
           {"content", {{{"type", "tool_use"}, {"id", "t1"}, {"name", "f"}, {"input", *input}}}}},
          {{"role", "user"},
           {"content", {{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", "ok"}}}}}}}};
    refused_or_read([&] { read_chat(ajet::openai::anthropic_to_chat_body(anthropic)); });
  }
  refused_or_read([&] { answer_with_calls(text); });
  refused_or_read([&] { stored(raw); });
  return 0;
}
