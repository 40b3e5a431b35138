// The chat request model: parsing OpenAI messages/tools with errors that name the field path, and
// the Jinja-compatible JSON writer templates use.
#include <gtest/gtest.h>

#include "common/error.h"
#include "text/messages.h"

namespace ajet::text {
namespace {

// The message of the Error that parsing `json` throws ("" when it does not throw).
std::string parse_error(const std::string& json) {
  try {
    parse_chat_request(json, "request");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(ChatMessages, ParsesAFullRequest) {
  const ChatRequest r = parse_chat_request(R"({
    "model": "ignored",
    "messages": [
      {"role": "developer", "content": "dev"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "reasoning_content": "why",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "f", "content": "42"},
      {"role": "assistant", "content": "done"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
  })",
                                           "test");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, Role::kDeveloper);
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_FALSE(r.messages[1].content_was_null);
  const ChatMessage& a = r.messages[2];
  EXPECT_EQ(a.role, Role::kAssistant);
  EXPECT_TRUE(a.content_was_null);
  EXPECT_EQ(a.content, "");
  EXPECT_EQ(a.reasoning_content, "why");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].id, "call_1");
  EXPECT_EQ(a.tool_calls[0].name, "f");
  EXPECT_EQ(a.tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[3].name, "f");
  EXPECT_FALSE(r.messages[4].reasoning_content.has_value());
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");
}

TEST(ChatMessages, AbsentToolsAndNullReasoningAreEmpty) {
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "assistant", "reasoning_content": null}], "tools": null})", "test");
  EXPECT_TRUE(r.tools.empty());
  EXPECT_FALSE(r.messages[0].reasoning_content.has_value());
  EXPECT_TRUE(r.messages[0].content_was_null);
}

TEST(ChatMessages, ErrorsNameTheFieldPath) {
  struct Case {
    const char* json;
    const char* expected;
  };
  const Case cases[] = {
      {R"([1])", "request: request must be a JSON object, got array"},
      {R"({})", "request: messages is required"},
      {R"({"messages": {}})", "messages must be an array, got object"},
      {R"({"messages": []})", "messages must not be empty"},
      {R"({"messages": [1]})", "messages[0] must be an object, got integer"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role is required"},
      {R"({"messages": [{"role": 3, "content": "x"}]})",
       "messages[0].role must be a string, got integer"},
      {R"({"messages": [{"role": "bot", "content": "x"}]})",
       "messages[0].role 'bot' is not one of"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content is required for a user message"},
      {R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content must be a string, null or a list of text parts, got integer"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type 'image_url' is not supported (only text parts can be "
       "rendered)"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text is required"},
      {R"({"messages": [{"role": "user", "content": ["hi"]}]})",
       "messages[0].content[0] must be an object, got string"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{}]}]})",
       "messages[0].tool_calls is only allowed on assistant messages, not user"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": {}}]})",
       "messages[1].tool_calls must be an array, got object"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]})",
       "messages[0].tool_calls[0].function is required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "code", "function": {}}]}]})",
       "messages[0].tool_calls[0].type must be \"function\", got \"code\""},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].function.name is required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "", "arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].function.name must not be empty"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "q"}, {"role": "user", "content": "q"},
          {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}]})",
       "messages[3].tool_calls[0].function.arguments must be a string (JSON text), got object"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]})",
       "messages[0].tool_calls[0].function.arguments is required"},
      {R"({"messages": [{"role": "assistant", "reasoning_content": 1}]})",
       "messages[0].reasoning_content must be a string, got integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})",
       "tools must be an array, got object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]})",
       "tools[0].type must be \"function\", got \"retrieval\""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0].function is required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})",
       "tools[0].function.name is required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]})",
       "tools[0].function.parameters must be an object (JSON Schema), got array"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "description": 2}}]})",
       "tools[0].function.description must be a string, got integer"},
  };
  for (const Case& c : cases) {
    const std::string message = parse_error(c.json);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "input: " << c.json << "\n got: " << message;
    EXPECT_EQ(message.rfind("request: ", 0), 0u)
        << "errors start with the source name: " << message;
  }
}

TEST(ChatMessages, InvalidJsonTextNamesTheSource) {
  const std::string message = parse_error(R"({"messages": [)");
  EXPECT_NE(message.find("request: invalid JSON"), std::string::npos) << message;
}

// Issue 38: arguments are any text, but JSON in them deeper than the body's own limit is refused
// naming the field, before anything renders or signs them.
TEST(ChatMessages, ToolCallArgumentsNestedPastTheLimitAreRefusedNamingTheField) {
  auto body = [](const std::string& arguments) {
    return R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [)"
           R"({"type": "function", "function": {"name": "f", "arguments": ")" +
           arguments + R"("}}]}]})";
  };
  const std::string message = parse_error(body(std::string(70000, '[') + std::string(70000, ']')));
  EXPECT_NE(message.find("messages[1].tool_calls[0].function.arguments: invalid JSON at [0][0]"),
            std::string::npos)
      << message.substr(0, 300);
  EXPECT_NE(message.find("nested deeper than 128 levels"), std::string::npos)
      << message.substr(0, 300);
  EXPECT_NO_THROW(parse_chat_request(body(std::string(128, '[') + std::string(128, ']')), "test"));
  EXPECT_NO_THROW(parse_chat_request(body("[[[ not json"), "test"));
}

TEST(ChatMessages, KeepsToolKeyOrder) {
  const ChatRequest r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {"zeta": 1, "alpha": 2, "mid": 3}}}]})",
      "test");
  EXPECT_EQ(
      template_json(r.tools[0]),
      R"({"type": "function", "function": {"name": "f", "parameters": {"zeta": 1, "alpha": 2, "mid": 3}}})");
}

TEST(ChatMessages, TemplateJsonFormatsLikeJinjaTojson) {
  const OrderedJson v = OrderedJson::parse(
      R"({"b": [1, -2, 0.25, 1.0, 1e100, true, false, null], "a": {}, "c": [], "s": "é中🚀 \"q\" \\ / \n\t\r\b\f \u0001 \u001f \u007f"})");
  EXPECT_EQ(template_json(v),
            "{\"b\": [1, -2, 0.25, 1.0, 1e+100, true, false, null], \"a\": {}, \"c\": [], "
            "\"s\": \"é中🚀 \\\"q\\\" \\\\ / \\n\\t\\r\\b\\f \\u0001 \\u001f \x7f\"}");
  EXPECT_EQ(template_json(OrderedJson("x")), "\"x\"");
  EXPECT_EQ(template_json(OrderedJson(12345678901234LL)), "12345678901234");
}

TEST(ChatMessages, ToOpenAiJsonRoundTrips) {
  const std::string text = R"({"messages": [
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "content": "r", "tool_call_id": "c"},
      {"role": "assistant", "content": "x", "reasoning_content": "y"}]})";
  const ChatRequest r = parse_chat_request(text, "test");
  OrderedJson again = OrderedJson::object();
  again["messages"] = OrderedJson::array();
  for (const ChatMessage& m : r.messages) again["messages"].push_back(to_openai_json(m));
  EXPECT_TRUE(again["messages"][0]["content"].is_null());
  const ChatRequest r2 = parse_chat_request(again);
  ASSERT_EQ(r2.messages.size(), r.messages.size());
  for (size_t i = 0; i < r.messages.size(); ++i) {
    EXPECT_EQ(to_openai_json(r2.messages[i]), to_openai_json(r.messages[i])) << i;
  }
}

TEST(ChatMessages, RoleNames) {
  for (Role r : {Role::kSystem, Role::kDeveloper, Role::kUser, Role::kAssistant, Role::kTool}) {
    EXPECT_EQ(role_from_name(role_name(r)), r);
  }
  EXPECT_FALSE(role_from_name("function").has_value());
}

}  // namespace
}  // namespace ajet::text
