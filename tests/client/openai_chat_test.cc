// Chat message parsing and stream assembly (what ChatClient returns), without a server; and a
// server's answer that is not a ChatCompletion, from a real HTTP server.
#include "client/openai_chat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "http/router.h"
#include "http/server.h"

namespace ajet::client {
namespace {

TEST(ChatMessageTest, ParsesContentAndToolCallsAndRoundTrips) {
  Json m = {
      {"role", "assistant"},
      {"content", nullptr},
      {"tool_calls",
       {{{"id", "call_1"},
         {"type", "function"},
         {"function", {{"name", "calculator"}, {"arguments", "{\"expression\": \"6*7\"}"}}}}}}};
  ChatMessage msg = parse_message(m, "tool_calls");
  EXPECT_FALSE(msg.content.has_value());
  ASSERT_EQ(msg.tool_calls.size(), 1u);
  EXPECT_EQ(msg.tool_calls[0].id, "call_1");
  EXPECT_EQ(msg.tool_calls[0].name, "calculator");
  EXPECT_EQ(msg.finish_reason, "tool_calls");
  EXPECT_EQ(msg.to_json(), m);
  EXPECT_EQ(tool_message("call_1", "42"),
            (Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}));
  EXPECT_THROW(parse_message(Json::array()), Error);
}

TEST(StreamAccumulatorTest, JoinsContentAndToolCallFragmentsOfOneChoice) {
  StreamAccumulator acc(0);
  acc.add({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", "He"}}}}}}});
  acc.add({{"choices",
            {{{"index", 0}, {"delta", {{"content", "llo"}}}},
             {{"index", 1}, {"delta", {{"content", "x"}}}}}}});
  acc.add({{"choices",
            {{{"index", 0},
              {"delta",
               {{"tool_calls",
                 {{{"index", 0},
                   {"id", "c1"},
                   {"function", {{"name", "calc"}, {"arguments", "{\"a\""}}}}}}}}}}}});
  acc.add(
      {{"choices",
        {{{"index", 0},
          {"delta", {{"tool_calls", {{{"index", 0}, {"function", {{"arguments", ": 1}"}}}}}}}}}}}});
  acc.add(
      {{"choices", {{{"index", 0}, {"delta", Json::object()}, {"finish_reason", "tool_calls"}}}}});
  acc.add(
      {{"choices", Json::array()}, {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 4}}}});
  ChatMessage m = acc.message();
  EXPECT_EQ(m.content.value_or(""), "Hello");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].id, "c1");
  EXPECT_EQ(m.tool_calls[0].name, "calc");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(m.finish_reason, "tool_calls");
  ASSERT_TRUE(acc.usage());
  EXPECT_EQ((*acc.usage())["completion_tokens"], 4);
}

TEST(ChatClientTest, ABadBaseUrlIsAnErrorAtConstruction) {
  EXPECT_THROW(ChatClient("https://secure.example/v1", "k"), Error);
  EXPECT_NO_THROW(ChatClient("http://127.0.0.1:1/v1", "k"));
}

// An answer nested 100,000 levels deep (issue 38): read without a depth limit, the first copy of
// the tool call's function (parse_message) recursed once per level off the stack. The bounded parse
// refuses it as not JSON, an error of the client's own.
TEST(ChatClientTest, AnAnswerNestedTooDeepIsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string answer =
      R"({"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [)"
      R"({"id": "c", "function": )" +
      deep + "}]}}]}";
  http::Router router;
  router.post("/v1/chat/completions", [answer](http::Request, http::Respond respond) {
    http::Response r;
    r.headers.add("Content-Type", "application/json");
    r.body = answer;
    respond(std::move(r));
  });
  http::HttpServer server(http::ServerOptions{}, std::move(router));
  server.start();
  ChatClient chat("http://127.0.0.1:" + std::to_string(server.port()) + "/v1", "k");
  try {
    chat.create(Json::array({{{"role", "user"}, {"content", "hi"}}}));
    ADD_FAILURE() << "the answer was accepted";
  } catch (const SwarmError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("not a ChatCompletion"));
  }
  server.stop();
}

}  // namespace
}  // namespace ajet::client
