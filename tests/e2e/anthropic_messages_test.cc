// Anthropic's Messages API (POST /v1/messages), and OpenAI's Responses API beside it, through the
// real ajet-swarm with ajet-echo-engine, whose answer is the last user message: a Messages call is
// tracked exactly like the equivalent chat call, its streamed events come in Anthropic's order and
// a quiet stream gets heartbeats, and malformed bodies name the Anthropic field. The official SDK's
// checks are in tests/js/anthropic_sdk_swarm.mjs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class AnthropicMessagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
    std::string yaml = config_yaml(fixture(false).tokenizer);
    const std::string len = "max_model_len: 512";
    yaml.replace(yaml.find(len), len.size(), "max_model_len: 2048");  // room for a tool schema
    const std::string prompt = "max_prompt_length: 256";
    yaml.replace(yaml.find(prompt), prompt.size(), "max_prompt_length: 1536");
    const std::string turn = "max_response_length_in_one_turn: 48";
    yaml.replace(yaml.find(turn), turn.size(), "max_response_length_in_one_turn: 256");
    api_->boot(yaml);
  }
  http::ClientResponse messages(const std::string& key, const Json& body) {
    return api_->http.request("POST", "/v1/messages",
                              {{"x-api-key", key},
                               {"anthropic-version", "2023-06-01"},
                               {"Content-Type", "application/json"}},
                              body.dump());
  }
  ScratchDir dir_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

const char* kToolCall =
    "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
    "\"6*7\"}}\n</tool_call>";

TEST_F(AnthropicMessagesTest, AMessagesCallIsTrackedLikeTheSameChatCall) {
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  // Written out, so the tool's keys keep the order OpenAI clients send (name, description,
  // parameters).
  const std::string chat_body =
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": )" +
      Json(kToolCall).dump() +
      R"(}], "tools": [{"type": "function", "function": {"name": "calculator", "description": "Evaluates arithmetic",
          "parameters": {"properties": {"expression": {"type": "string"}}, "type": "object"}}}], "max_tokens": 200})";
  auto chat = api_->http.request(
      "POST", "/v1/chat/completions",
      {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}}, chat_body);
  ASSERT_EQ(chat.status, 200) << chat.body.substr(0, 400);
  auto m = messages(
      key,
      Json{{"model", "claude-test"},
           {"max_tokens", 200},
           {"system", "Be brief."},
           {"messages", Json::array({{{"role", "user"}, {"content", kToolCall}}})},
           {"tools", Json::array({{{"name", "calculator"},
                                   {"description", "Evaluates arithmetic"},
                                   {"input_schema",
                                    {{"type", "object"},
                                     {"properties", {{"expression", {{"type", "string"}}}}}}}}})}});
  ASSERT_EQ(m.status, 200) << m.body;
  Json answer = m.json();
  EXPECT_EQ(answer["type"], "message");
  EXPECT_THAT(answer["id"].get<std::string>(), ::testing::StartsWith("msg_"));
  EXPECT_EQ(answer["stop_reason"], "tool_use");
  ASSERT_EQ(answer["content"].size(), 1u) << answer.dump();
  EXPECT_EQ(answer["content"][0]["type"], "tool_use");
  EXPECT_EQ(answer["content"][0]["name"], "calculator");
  EXPECT_EQ(answer["content"][0]["input"], Json({{"expression", "6*7"}}));
  EXPECT_GT(answer["usage"]["input_tokens"].get<int>(), 0);

  auto episode = api_->get("/episodes/" + claim["episode_uuid"].get<std::string>());
  ASSERT_EQ(episode.status, 200) << episode.body;
  const Json ep = episode.json();
  const Json& calls = ep["calls"];
  ASSERT_EQ(calls.size(), 2u) << episode.body.substr(0, 500);
  EXPECT_EQ(calls[1]["prompt_ids"], calls[0]["prompt_ids"])
      << "the same conversation renders the same tokens";
  EXPECT_EQ(calls[1]["completion_ids"], calls[0]["completion_ids"]);

  // The tool result turn: Anthropic's blocks become the same tool message a chat client sends.
  auto turn = messages(
      key,
      Json{{"model", "claude-test"},
           {"max_tokens", 64},
           {"messages",
            Json::array({{{"role", "user"}, {"content", "compute"}},
                         {{"role", "assistant"},
                          {"content", Json::array({{{"type", "tool_use"},
                                                    {"id", answer["content"][0]["id"]},
                                                    {"name", "calculator"},
                                                    {"input", {{"expression", "6*7"}}}}})}},
                         {{"role", "user"},
                          {"content", Json::array({{{"type", "tool_result"},
                                                    {"tool_use_id", answer["content"][0]["id"]},
                                                    {"content", "42"}}})}}})}});
  ASSERT_EQ(turn.status, 200) << turn.body;
  EXPECT_EQ(turn.json()["stop_reason"], "end_turn");
  EXPECT_THAT(turn.json()["content"][0]["text"].get<std::string>(), HasSubstr("42"));
}

// OpenAI's Responses API runs the same way (openai_responses.h): the same conversation gives the
// same tokens as a chat call, and the function call comes back as a function_call item.
TEST_F(AnthropicMessagesTest, AResponsesCallIsTrackedLikeTheSameChatCall) {
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  const http::Headers auth{{"Authorization", "Bearer " + key},
                           {"Content-Type", "application/json"}};
  auto chat = api_->http.request(
      "POST", "/v1/chat/completions", auth,
      Json{{"messages", Json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", kToolCall}}})},
           {"max_tokens", 200}}
          .dump());
  ASSERT_EQ(chat.status, 200) << chat.body.substr(0, 400);
  auto r = api_->http.request(
      "POST", "/v1/responses", auth,
      Json{{"instructions", "Be brief."}, {"input", kToolCall}, {"max_output_tokens", 200}}.dump());
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 400);
  Json answer = r.json();
  EXPECT_EQ(answer["object"], "response");
  EXPECT_EQ(answer["status"], "completed");
  auto episode = api_->get("/episodes/" + claim["episode_uuid"].get<std::string>());
  const Json ep = episode.json();
  ASSERT_EQ(ep["calls"].size(), 2u) << episode.body.substr(0, 500);
  EXPECT_EQ(ep["calls"][1]["prompt_ids"], ep["calls"][0]["prompt_ids"]);
  EXPECT_EQ(ep["calls"][1]["completion_ids"], ep["calls"][0]["completion_ids"]);
  // Not stateless-safe, so refused by name.
  auto previous =
      api_->http.request("POST", "/v1/responses", auth,
                         Json{{"input", "x"}, {"previous_response_id", answer["id"]}}.dump());
  EXPECT_EQ(previous.status, 400);
  EXPECT_THAT(previous.body, HasSubstr("previous_response_id"));
}

TEST_F(AnthropicMessagesTest, StreamsOpenAtOnceComeInAnthropicsOrderAndAQuietStreamGetsHeartbeats) {
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  http::HttpClient client(swarm_->url());
  const http::Headers h{{"x-api-key", key}, {"Content-Type", "application/json"}};
  std::vector<std::string> names;
  std::string text;
  auto r = client.stream(
      "POST", "/v1/messages", h,
      Json{{"model", "m"},
           {"max_tokens", 64},
           {"stream", true},
           {"stop_sequences", {"STOP"}},
           {"messages", Json::array({{{"role", "user"}, {"content", "hello there STOP unseen"}}})}}
          .dump(),
      [&](const http::SseEvent& e) {
        names.push_back(e.event);
        Json d = Json::parse(e.data);
        EXPECT_EQ(d["type"], e.event);
        if (e.event == "content_block_delta") text += d["delta"]["text"].get<std::string>();
        if (e.event == "message_delta") {
          EXPECT_EQ(d["delta"]["stop_reason"], "stop_sequence");
          EXPECT_EQ(d["delta"]["stop_sequence"], "STOP");
        }
        return true;
      });
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(text, "hello there ");
  ASSERT_GE(names.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 3),
            (std::vector<std::string>{"message_start", "content_block_start", "ping"}));
  EXPECT_EQ(std::vector<std::string>(names.end() - 3, names.end()),
            (std::vector<std::string>{"content_block_stop", "message_delta", "message_stop"}));

  // HOLD: the echo engine sends one token and then nothing. The stream shows empty text deltas
  // (every 5 s) so that an idle watchdog does not abort it; the client hangs up after one.
  bool heartbeat = false;
  client.stream(
      "POST", "/v1/messages", h,
      Json{{"model", "m"},
           {"max_tokens", 64},
           {"stream", true},
           {"messages", Json::array({{{"role", "user"}, {"content", "HOLD\nslow answer"}}})}}
          .dump(),
      [&](const http::SseEvent& e) {
        if (e.event != "content_block_delta") return true;
        Json d = Json::parse(e.data);
        heartbeat = d["delta"]["text"] == "";
        return !heartbeat;
      });
  EXPECT_TRUE(heartbeat);
}

TEST_F(AnthropicMessagesTest, MalformedBodiesNameTheAnthropicField) {
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  const Json user = Json::array({{{"role", "user"}, {"content", "hi"}}});
  struct Case {
    Json body;
    std::string field;
  };
  const std::vector<Case> cases = {
      {Json{{"messages", user}}, "'max_tokens' is required"},
      {Json{{"max_tokens", 8}}, "'messages' is required"},
      {Json{{"max_tokens", 8}, {"messages", Json::array({{{"role", "tool"}, {"content", "x"}}})}},
       "messages[0].role"},
      {Json{{"max_tokens", 8},
            {"messages",
             Json::array(
                 {{{"role", "user"},
                   {"content", Json::array({{{"type", "image"}, {"source", Json::object()}}})}}})}},
       "messages[0].content[0].type' 'image' blocks are not supported"},
      {Json{{"max_tokens", 8},
            {"messages", Json::array({{{"role", "user"},
                                       {"content", Json::array({{{"type", "tool_result"},
                                                                 {"content", "1"}}})}}})}},
       "messages[0].content[0].tool_use_id' is required"},
      {Json{{"max_tokens", 8}, {"messages", user}, {"tools", Json::array({{{"name", "f"}}})}},
       "tools[0].input_schema"},
      {Json{{"max_tokens", 8}, {"messages", user}, {"tool_choice", {{"type", "sometimes"}}}},
       "tool_choice.type"},
  };
  for (const auto& c : cases) {
    auto r = messages(key, c.body);
    EXPECT_EQ(r.status, 400) << c.body.dump() << " -> " << r.body;
    EXPECT_THAT(r.body, HasSubstr(c.field)) << c.body.dump();
  }
  EXPECT_EQ(messages("sk-ajet-forged", Json{{"max_tokens", 8}, {"messages", user}}).status, 401);
  // The Authorization header works too.
  auto bearer = api_->http.request("POST", "/v1/messages", {{"Authorization", "Bearer " + key}},
                                   Json{{"max_tokens", 8}, {"messages", user}}.dump());
  EXPECT_EQ(bearer.status, 200) << bearer.body;
}

// Before: /v1/messages answered errors in OpenAI's shape, and both adapters' errors named the chat
// fields the body became ('stop', 'max_tokens') instead of the fields the client sent.
TEST_F(AnthropicMessagesTest, ErrorsNameTheFieldsSentAndMessagesUsesAnthropicsEnvelope) {
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  const Json user = Json::array({{{"role", "user"}, {"content", "hi"}}});
  auto stop = messages(
      key, Json{{"max_tokens", 8}, {"messages", user}, {"stop_sequences", Json::array({""})}});
  EXPECT_EQ(stop.status, 400) << stop.body;
  const Json error = stop.json();
  EXPECT_EQ(error["type"], "error") << stop.body;
  EXPECT_EQ(error["error"]["type"], "invalid_request_error") << stop.body;
  EXPECT_THAT(error["error"]["message"].get<std::string>(),
              HasSubstr("'stop_sequences[0]' must not be empty"));
  EXPECT_THAT(stop.body, ::testing::Not(HasSubstr("'stop[")));
  auto overflow = messages(key, Json{{"max_tokens", 100000}, {"messages", user}});
  EXPECT_EQ(overflow.status, 400);
  // Anthropic's own sentence, which Claude Code parses to retry with a smaller max_tokens.
  EXPECT_THAT(overflow.json()["error"]["message"].get<std::string>(),
              ::testing::MatchesRegex(
                  "input length and `max_tokens` exceed context limit: [0-9]+ \\+ 100000 > 2048, "
                  "decrease input length or `max_tokens` and try again"));
  auto forged = messages("sk-ajet-forged", Json{{"max_tokens", 8}, {"messages", user}});
  EXPECT_EQ(forged.status, 401);
  EXPECT_EQ(forged.json()["type"], "error");
  EXPECT_EQ(forged.json()["error"]["type"], "authentication_error");

  const http::Headers auth{{"Authorization", "Bearer " + key},
                           {"Content-Type", "application/json"}};
  auto zero = api_->http.request("POST", "/v1/responses", auth,
                                 Json{{"input", "hi"}, {"max_output_tokens", 0}}.dump());
  EXPECT_EQ(zero.status, 400);
  EXPECT_THAT(zero.json()["error"]["message"].get<std::string>(),
              HasSubstr("'max_output_tokens' must be at least 1"));
  auto long_answer = api_->http.request(
      "POST", "/v1/responses", auth, Json{{"input", "hi"}, {"max_output_tokens", 100000}}.dump());
  EXPECT_EQ(long_answer.status, 400);
  EXPECT_THAT(long_answer.body, HasSubstr("lower max_output_tokens to at most"));
  EXPECT_THAT(long_answer.body, ::testing::Not(HasSubstr("max_tokens")));
}

// Before: a tool result answering no tool call was accepted on all three endpoints; OpenAI and
// Anthropic answer 400.
TEST_F(AnthropicMessagesTest, ToolResultsThatAnswerNoToolCallAre400NamingThem) {
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  auto turn = [](const std::string& result_id) {
    return Json{{"max_tokens", 16},
                {"messages",
                 Json::array({{{"role", "user"}, {"content", "compute"}},
                              {{"role", "assistant"},
                               {"content", Json::array({{{"type", "tool_use"},
                                                         {"id", "toolu_1"},
                                                         {"name", "calculator"},
                                                         {"input", {{"expression", "6*7"}}}}})}},
                              {{"role", "user"},
                               {"content", Json::array({{{"type", "tool_result"},
                                                         {"tool_use_id", result_id},
                                                         {"content", "42"}}})}}})}};
  };
  EXPECT_EQ(messages(key, turn("toolu_1")).status, 200);
  auto orphan = messages(key, turn("toolu_9"));
  EXPECT_EQ(orphan.status, 400) << orphan.body;
  EXPECT_EQ(orphan.json()["error"]["type"], "invalid_request_error");
  EXPECT_THAT(orphan.json()["error"]["message"].get<std::string>(),
              HasSubstr("'messages[2].content[0].tool_use_id' 'toolu_9' answers no tool_use"));

  const http::Headers auth{{"Authorization", "Bearer " + key},
                           {"Content-Type", "application/json"}};
  auto items = [](const std::string& output_id) {
    return Json{{"input", Json::array({{{"role", "user"}, {"content", "compute"}},
                                       {{"type", "function_call"},
                                        {"call_id", "c1"},
                                        {"name", "calculator"},
                                        {"arguments", "{}"}},
                                       {{"type", "function_call_output"},
                                        {"call_id", output_id},
                                        {"output", "42"}}})}};
  };
  EXPECT_EQ(api_->http.request("POST", "/v1/responses", auth, items("c1").dump()).status, 200);
  auto output = api_->http.request("POST", "/v1/responses", auth, items("c9").dump());
  EXPECT_EQ(output.status, 400) << output.body;
  EXPECT_THAT(output.json()["error"]["message"].get<std::string>(),
              HasSubstr("'input[2].call_id' 'c9' answers no function call"));

  auto chat = [](const std::string& tool_call_id) {
    return Json{
        {"messages",
         Json::array(
             {{{"role", "user"}, {"content", "compute"}},
              {{"role", "assistant"},
               {"content", nullptr},
               {"tool_calls",
                Json::array({{{"id", "call_1"},
                              {"type", "function"},
                              {"function", {{"name", "calculator"}, {"arguments", "{}"}}}}})}},
              {{"role", "tool"}, {"tool_call_id", tool_call_id}, {"content", "42"}}})}};
  };
  EXPECT_EQ(api_->http.request("POST", "/v1/chat/completions", auth, chat("call_1").dump()).status,
            200);
  auto tool = api_->http.request("POST", "/v1/chat/completions", auth, chat("call_9").dump());
  EXPECT_EQ(tool.status, 400) << tool.body;
  EXPECT_THAT(tool.json()["error"]["message"].get<std::string>(),
              HasSubstr("'messages[2].tool_call_id' 'call_9'"));
}

}  // namespace
}  // namespace ajet::e2e
