// The Messages and Responses adapters (anthropic_messages.h, openai_responses.h) on their own: tool
// results that answer no tool call are refused by name, as both upstream APIs do, and /v1/messages
// errors come in Anthropic's envelope.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/json.h"
#include "openai/anthropic_messages.h"
#include "openai/openai_errors.h"
#include "openai/openai_responses.h"

namespace ajet::openai {
namespace {

using ::testing::HasSubstr;
using text::OrderedJson;

template <class F>
std::string error_of(F convert, const std::string& body) {
  try {
    convert(OrderedJson::parse(body));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

// Before: a tool_result whose tool_use_id matched no tool_use was accepted and rendered.
TEST(AnthropicMessages, AToolResultMustAnswerAnEarlierToolUse) {
  auto convert = [](const OrderedJson& b) { return anthropic_to_chat_body(b); };
  const std::string head = R"({"max_tokens": 8, "messages": [
      {"role": "user", "content": "compute"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": )";
  EXPECT_EQ(error_of(convert, head + R"("toolu_1", "content": "42"}]}]})"), "");
  EXPECT_THAT(error_of(convert, head + R"("toolu_2", "content": "42"}]}]})"),
              HasSubstr("'messages[2].content[0].tool_use_id' 'toolu_2' answers no tool_use"));
  EXPECT_THAT(error_of(convert, R"({"max_tokens": 8, "messages": [{"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"}]}]})"),
              HasSubstr("'messages[0].content[0].tool_use_id'"));
  EXPECT_EQ(anthropic_field_names().stop, "stop_sequences");
}

// Before: a tool_result holding an image (Claude Code's Read of a picture) or a tool_reference (its
// ToolSearch) was a 400 that ended the episode; a text model gets a line saying what was there.
TEST(AnthropicMessages, ToolResultsKeepGoingPastImagesAndToolReferences) {
  const OrderedJson chat =
      anthropic_to_chat_body(OrderedJson::parse(R"({"max_tokens": 8, "messages": [
      {"role": "user", "content": "look"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
        {"type": "text", "text": "a picture:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
        {"type": "tool_reference", "tool_name": "mcp__fs__read"}]}]}]})"));
  const OrderedJson& tool = chat["messages"][2];
  EXPECT_EQ(tool["role"], "tool");
  EXPECT_EQ(tool["content"],
            "a picture:\n[image omitted: the served model reads text only]\n[tool loaded: "
            "mcp__fs__read]");
  // Outside a tool result an image is still refused by name: the user sent it to a text model.
  auto convert = [](const OrderedJson& b) { return anthropic_to_chat_body(b); };
  EXPECT_THAT(error_of(convert, R"({"max_tokens": 8, "messages": [{"role": "user", "content": [
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]})"),
              HasSubstr("'image' blocks are not supported"));
  EXPECT_THAT(
      error_of(convert,
               R"({"max_tokens": 8, "system": [{"type": "tool_reference", "tool_name": "x"}],
      "messages": [{"role": "user", "content": "hi"}]})"),
      HasSubstr("text only"));
}

// Before: a function_call_output whose call_id matched no function_call was accepted.
TEST(OpenAiResponses, AFunctionCallOutputMustAnswerAnEarlierFunctionCall) {
  auto convert = [](const OrderedJson& b) { return responses_to_chat_body(b); };
  const std::string head = R"({"input": [
      {"role": "user", "content": "compute"},
      {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{}"},
      {"type": "function_call_output", "call_id": )";
  EXPECT_EQ(error_of(convert, head + R"("c1", "output": "42"}]})"), "");
  EXPECT_THAT(error_of(convert, head + R"("c2", "output": "42"}]})"),
              HasSubstr("'input[2].call_id' 'c2' answers no function call"));
  // Fields the chat parser used to check name the Responses paths.
  EXPECT_THAT(
      error_of(convert,
               R"({"input": "x", "tools": [{"type": "function", "name": "f", "description": 3}]})"),
      HasSubstr("'tools[0].description' must be a string"));
  EXPECT_THAT(error_of(convert, R"({"input": "x", "tool_choice": "sometimes"})"),
              HasSubstr("'tool_choice'"));
  EXPECT_EQ(responses_field_names().max_tokens, "max_output_tokens");
}

// Before (issue 39): Claude Code's adaptive thinking, its system messages inside `messages` and a
// server tool were each a 400.
TEST(AnthropicMessages, ClaudeCodesBodiesConvert) {
  ConversionNotes notes;
  const OrderedJson chat = anthropic_to_chat_body(OrderedJson::parse(R"({"max_tokens": 8,
      "thinking": {"type": "adaptive", "display": "omitted"},
      "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
      "messages": [{"role": "user", "content": [{"type": "text", "text": "U"}]},
                   {"role": "system", "content": [{"type": "text", "text": "ENV"}]}],
      "tools": [{"name": "Bash", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]})"),
                                                  &notes);
  EXPECT_EQ(chat["chat_template_kwargs"]["enable_thinking"], true);
  ASSERT_EQ(chat["messages"].size(), 3u);
  EXPECT_EQ(chat["messages"][2], (OrderedJson{{"role", "system"}, {"content", "ENV"}}));
  ASSERT_EQ(chat["tools"].size(), 1u);
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "Bash");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("web_search (web_search_20250305)"));
  EXPECT_EQ(anthropic_to_chat_body(
                OrderedJson::parse(R"({"max_tokens": 8, "thinking": {"type": "disabled"},
      "messages": [{"role": "user", "content": "x"}]})"))["chat_template_kwargs"]
                                                         ["enable_thinking"],
            false);
  // count_tokens needs no max_tokens.
  EXPECT_NO_THROW(anthropic_to_chat_body(
      OrderedJson::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), nullptr, true));
}

// Before: Codex's namespace and web_search tools were each a 400, and a stream of function calls
// alone opened an empty message item.
TEST(OpenAiResponses, NamespacesFlattenBuiltInToolsDropAndCallsStreamAlone) {
  ConversionNotes notes;
  ResponsesTools tools;
  const OrderedJson chat = responses_to_chat_body(OrderedJson::parse(R"({"input": "x", "tools": [
      {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
      {"type": "namespace", "name": "multi_agent_v1", "tools": [
          {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
          {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]},
      {"type": "web_search", "external_web_access": false}]})"),
                                                  &tools, &notes);
  ASSERT_EQ(chat["tools"].size(), 2u) << "a namespaced name a top-level function has is left out";
  EXPECT_EQ(chat["tools"][1]["function"]["name"], "spawn_agent");
  EXPECT_EQ(tools.namespace_of,
            (std::unordered_map<std::string, std::string>{{"spawn_agent", "multi_agent_v1"}}));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_THAT(notes[0], HasSubstr("multi_agent_v1 (1 function tools)"));
  EXPECT_THAT(notes[1], HasSubstr("web_search"));

  text::ParsedOutput calls;
  calls.tool_calls.push_back(text::ToolCall{"call_1", "spawn_agent", "{}"});
  ResponsesEvents events("msg_1", tools);
  ResponseMeta meta;
  std::string stream = events.open(meta, 1);  // one statement each: the events are made in order
  stream += events.text_delta("");
  stream += events.close(meta, calls, false, 1, 1);
  EXPECT_EQ(stream.find("\"type\":\"message\""), std::string::npos) << stream;
  EXPECT_THAT(stream, HasSubstr("\"namespace\":\"multi_agent_v1\""));
  ResponsesEvents text_events("msg_2", tools);
  text::ParsedOutput text;
  text.content = "hi";
  stream = text_events.open(meta, 1);
  stream += text_events.text_delta("hi");
  stream += text_events.close(meta, text, false, 1, 1);
  EXPECT_LT(stream.find("response.output_item.added"), stream.find("response.output_text.delta"));
}

// Before: /v1/messages answered errors in OpenAI's shape, which Anthropic's SDKs do not read.
TEST(AnthropicMessages, ErrorsComeInAnthropicsEnvelope) {
  http::Response bad = anthropic_error_for(
      Error(ErrorCode::kInvalidArgument, "request body: field 'x' is required"));
  EXPECT_EQ(bad.status, 400);
  Json body = Json::parse(bad.body);
  EXPECT_EQ(body, (Json{{"type", "error"},
                        {"error",
                         {{"type", "invalid_request_error"},
                          {"message", "request body: field 'x' is required"}}}}));
  EXPECT_EQ(
      Json::parse(
          anthropic_error_for(Error(ErrorCode::kUnauthenticated, "no key")).body)["error"]["type"],
      "authentication_error");
  EXPECT_EQ(
      Json::parse(anthropic_error_for(Error(ErrorCode::kNotFound, "ended")).body)["error"]["type"],
      "not_found_error");
  EXPECT_EQ(
      Json::parse(
          anthropic_error_for(Error(ErrorCode::kResourceExhausted, "big")).body)["error"]["type"],
      "request_too_large");
  http::Response busy = anthropic_error(503, "restarting", 5);
  EXPECT_EQ(Json::parse(busy.body)["error"]["type"], "overloaded_error");
  EXPECT_EQ(busy.headers.get("Retry-After"), "5");
}

}  // namespace
}  // namespace ajet::openai
