// The Responses body adapter (responses_to_chat_body) on a function_call item's arguments.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/json.h"
#include "openai/openai_responses.h"

namespace ajet::openai {
namespace {

text::OrderedJson body_with_arguments(const std::string& arguments) {
  return text::OrderedJson{
      {"input",
       {{{"role", "user"}, {"content", "hi"}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", arguments}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "ok"}}}}};
}

// Issue 38: arguments 70,000 levels deep went on to the tracker, which overflowed the stack; they
// are refused here, naming the field as the client sent it.
TEST(ResponsesBody, FunctionCallArgumentsNestedPastTheLimitAreRefusedNamingTheItem) {
  try {
    responses_to_chat_body(body_with_arguments(std::string(70000, '[') + std::string(70000, ']')));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), ::testing::StartsWith(
                              "request body: field 'input[1].arguments': invalid JSON at [0][0]"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nested deeper than 128 levels"));
  }
  const text::OrderedJson chat = responses_to_chat_body(body_with_arguments(R"({"x": [1, 2]})"));
  EXPECT_EQ(chat["messages"][1]["tool_calls"][0]["function"]["arguments"], R"({"x": [1, 2]})");
  EXPECT_NO_THROW(responses_to_chat_body(body_with_arguments("not json {{{")));
}

}  // namespace
}  // namespace ajet::openai
