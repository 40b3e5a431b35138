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

namespace ajet::swarm {
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
  EXPECT_THAT(error_of(convert, R"({"input": "x", "tools": [{"type": "function", "name": "f", "description": 3}]})"),
              HasSubstr("'tools[0].description' must be a string"));
  EXPECT_THAT(error_of(convert, R"({"input": "x", "tool_choice": "sometimes"})"), HasSubstr("'tool_choice'"));
  EXPECT_EQ(responses_field_names().max_tokens, "max_output_tokens");
}

// Before: /v1/messages answered errors in OpenAI's shape, which Anthropic's SDKs do not read.
TEST(AnthropicMessages, ErrorsComeInAnthropicsEnvelope) {
  http::Response bad = anthropic_error_for(Error(ErrorCode::kInvalidArgument, "request body: field 'x' is required"));
  EXPECT_EQ(bad.status, 400);
  Json body = Json::parse(bad.body);
  EXPECT_EQ(body, (Json{{"type", "error"},
                        {"error", {{"type", "invalid_request_error"}, {"message", "request body: field 'x' is required"}}}}));
  EXPECT_EQ(Json::parse(anthropic_error_for(Error(ErrorCode::kUnauthenticated, "no key")).body)["error"]["type"],
            "authentication_error");
  EXPECT_EQ(Json::parse(anthropic_error_for(Error(ErrorCode::kNotFound, "ended")).body)["error"]["type"],
            "not_found_error");
  EXPECT_EQ(Json::parse(anthropic_error_for(Error(ErrorCode::kResourceExhausted, "big")).body)["error"]["type"],
            "request_too_large");
  http::Response busy = anthropic_error(503, "restarting", 5);
  EXPECT_EQ(Json::parse(busy.body)["error"]["type"], "overloaded_error");
  EXPECT_EQ(busy.headers.get("Retry-After"), "5");
}

}  // namespace
}  // namespace ajet::swarm
