// What the proxy reads of requests and answers in the three APIs (src/proxy/api.h): request checks
// and task ids, answer text from JSON bodies and SSE streams as the front writes them, errors in
// each API's shape.
#include "proxy/api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"

namespace ajet::proxy {
namespace {

using ::testing::HasSubstr;

std::string sse(const std::vector<Json>& events, bool done = false) {
  std::string out;
  for (const Json& e : events) {
    if (e.contains("type") && e["type"].is_string()) {
      out += "event: " + e["type"].get<std::string>() + "\n";
    }
    out += "data: " + e.dump() + "\n\n";
  }
  if (done) out += "data: [DONE]\n\n";
  return out;
}

TEST(AppRequestTest, ReadsStreamAndTaskId) {
  AppRequest r = parse_app_request(
      Api::kChat, {}, R"({"messages": [{"role": "user", "content": "hi"}], "stream": true})");
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.task_id, "");
  r = parse_app_request(Api::kChat, {{"X-AJet-Task-Id", "q-17"}},
                        R"({"messages": [{"role": "user", "content": "hi"}],
                            "metadata": {"task_id": "ignored"}})");
  EXPECT_EQ(r.task_id, "q-17");
  r = parse_app_request(Api::kResponses, {}, R"({"input": "hi", "metadata": {"task_id": "t1"}})");
  EXPECT_EQ(r.task_id, "t1");
  EXPECT_FALSE(r.stream);
}

TEST(AppRequestTest, BadInputNamesTheField) {
  auto message = [](Api api, const std::string& body, http::Headers headers = {}) {
    try {
      parse_app_request(api, headers, body);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(Api::kChat, "not json"), HasSubstr("invalid JSON"));
  EXPECT_THAT(message(Api::kChat, "[1]"), HasSubstr("JSON object"));
  EXPECT_THAT(message(Api::kChat, R"({"messages": []})"), HasSubstr("'messages'"));
  EXPECT_THAT(message(Api::kChat, R"({"messages": [{}], "stream": "yes"})"), HasSubstr("'stream'"));
  EXPECT_THAT(message(Api::kResponses, R"({"input": 3})"), HasSubstr("'input'"));
  EXPECT_THAT(message(Api::kMessages, R"({"messages": [{"role": "user", "content": "x"}]})"),
              HasSubstr("'max_tokens'"));
  EXPECT_THAT(message(Api::kChat, R"({"messages": [{}], "metadata": {"task_id": 5}})"),
              HasSubstr("metadata.task_id"));
  EXPECT_THAT(message(Api::kChat, R"({"messages": [{}]})", {{"X-AJet-Task-Id", "a\nb"}}),
              HasSubstr("control character"));
  EXPECT_THAT(
      message(Api::kChat, R"({"messages": [{}]})", {{"X-AJet-Task-Id", std::string(300, 'x')}}),
      HasSubstr("1 to 256 bytes"));
}

TEST(AnswerTextTest, ChatJsonWithToolCalls) {
  Json body = {
      {"object", "chat.completion"},
      {"choices",
       {{{"index", 0},
         {"message",
          {{"role", "assistant"},
           {"content", "Let me compute."},
           {"tool_calls",
            {{{"id", "c1"},
              {"type", "function"},
              {"function", {{"name", "calculator"}, {"arguments", R"({"expression":"6*7"})"}}}}}}}},
         {"finish_reason", "tool_calls"}}}}};
  EXPECT_EQ(answer_text(Api::kChat, body.dump(), false),
            "Let me compute.\n<tool_call>{\"arguments\":{\"expression\":\"6*7\"},\"name\":"
            "\"calculator\"}</tool_call>");
}

TEST(AnswerTextTest, ChatStreamJoinsDeltas) {
  const std::string stream = sse(
      {{{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}}},
       {{"choices", {{{"index", 0}, {"delta", {{"content", "<answer>4"}}}}}}},
       {{"choices", {{{"index", 0}, {"delta", {{"content", "2</answer>"}}}}}}},
       {{"choices",
         {{{"index", 0},
           {"delta",
            {{"tool_calls",
              {{{"index", 0}, {"function", {{"name", "calc"}, {"arguments", "{\"x\":"}}}}}}}}}}}},
       {{"choices",
         {{{"index", 0},
           {"delta", {{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "1}"}}}}}}}}}}}},
       {{"choices", {{{"index", 0}, {"delta", Json::object()}, {"finish_reason", "stop"}}}}},
       {{"choices", Json::array()}, {"usage", {{"total_tokens", 3}}}}},
      true);
  EXPECT_EQ(
      answer_text(Api::kChat, stream, true),
      "<answer>42</answer>\n<tool_call>{\"arguments\":{\"x\":1},\"name\":\"calc\"}</tool_call>");
}

TEST(AnswerTextTest, IncompleteOrFailedStreamsAreRefused) {
  const std::string cut = sse({{{"choices", {{{"index", 0}, {"delta", {{"content", "4"}}}}}}}});
  EXPECT_THAT([&] { answer_text(Api::kChat, cut, true); },
              ::testing::ThrowsMessage<Error>(HasSubstr("finish_reason")));
  const std::string error = sse({{{"error", {{"message", "engine died"}}}}}, true);
  EXPECT_THAT([&] { answer_text(Api::kChat, error, true); },
              ::testing::ThrowsMessage<Error>(HasSubstr("engine died")));
  EXPECT_THROW(answer_text(Api::kChat, R"({"choices": []})", false), Error);
  EXPECT_THROW(answer_text(Api::kChat, R"({"choices": [{"index": 0}]})", false), Error);
  EXPECT_THROW(
      answer_text(Api::kChat, R"({"choices": [{"message": {"tool_calls": [{"function": 1}]}}]})",
                  false),
      Error);
  EXPECT_THROW(answer_text(Api::kResponses, sse({{{"type", "response.created"}}}), true), Error);
  EXPECT_THROW(answer_text(Api::kMessages, sse({{{"type", "message_start"}}}), true), Error);
  EXPECT_THROW(answer_text(Api::kMessages, "not json", false), Error);
}

TEST(AnswerTextTest, ResponsesJsonAndStream) {
  Json response = {
      {"object", "response"},
      {"status", "completed"},
      {"output",
       {{{"type", "reasoning"}, {"summary", Json::array()}},
        {{"type", "message"},
         {"role", "assistant"},
         {"content", {{{"type", "output_text"}, {"text", "The sum is 5."}}}}},
        {{"type", "function_call"}, {"name", "lookup"}, {"arguments", "{\"q\":\"x\"}"}}}}};
  const std::string expected =
      "The sum is 5.\n<tool_call>{\"arguments\":{\"q\":\"x\"},\"name\":\"lookup\"}</tool_call>";
  EXPECT_EQ(answer_text(Api::kResponses, response.dump(), false), expected);
  const std::string stream =
      sse({{{"type", "response.created"}, {"sequence_number", 0}},
           {{"type", "response.output_text.delta"}, {"delta", "The sum"}},
           {{"type", "response.completed"}, {"sequence_number", 9}, {"response", response}}});
  EXPECT_EQ(answer_text(Api::kResponses, stream, true), expected);
}

TEST(AnswerTextTest, MessagesJsonAndStream) {
  Json message = {
      {"type", "message"},
      {"role", "assistant"},
      {"content",
       {{{"type", "thinking"}, {"thinking", "hmm"}},
        {{"type", "text"}, {"text", "Sure."}},
        {{"type", "tool_use"}, {"id", "t"}, {"name", "calc"}, {"input", {{"e", "1+1"}}}}}},
      {"stop_reason", "tool_use"}};
  const std::string expected =
      "Sure.\n<tool_call>{\"arguments\":{\"e\":\"1+1\"},\"name\":\"calc\"}</tool_call>";
  EXPECT_EQ(answer_text(Api::kMessages, message.dump(), false), expected);
  const std::string stream = sse({
      {{"type", "message_start"}, {"message", {{"content", Json::array()}}}},
      {{"type", "content_block_start"},
       {"index", 0},
       {"content_block", {{"type", "text"}, {"text", ""}}}},
      {{"type", "ping"}},
      {{"type", "content_block_delta"},
       {"index", 0},
       {"delta", {{"type", "text_delta"}, {"text", "Su"}}}},
      {{"type", "content_block_delta"},
       {"index", 0},
       {"delta", {{"type", "text_delta"}, {"text", "re."}}}},
      {{"type", "content_block_stop"}, {"index", 0}},
      {{"type", "content_block_start"},
       {"index", 1},
       {"content_block",
        {{"type", "tool_use"}, {"id", "t"}, {"name", "calc"}, {"input", Json::object()}}}},
      {{"type", "content_block_delta"},
       {"index", 1},
       {"delta", {{"type", "input_json_delta"}, {"partial_json", "{\"e\": \"1+1\"}"}}}},
      {{"type", "content_block_stop"}, {"index", 1}},
      {{"type", "message_delta"}, {"delta", {{"stop_reason", "tool_use"}}}},
      {{"type", "message_stop"}},
  });
  EXPECT_EQ(answer_text(Api::kMessages, stream, true), expected);
}

TEST(RequestTextTest, TheConversationOfEachApi) {
  Json chat = {{"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "2+2?"}}}}}}}};
  EXPECT_EQ(request_text(Api::kChat, chat), "system: Be brief.\n\nuser: 2+2?");
  Json responses = {{"instructions", "Be brief."},
                    {"input",
                     {{{"role", "user"}, {"content", "2+2?"}},
                      {{"type", "function_call"}, {"name", "calc"}, {"arguments", "{}"}},
                      {{"type", "function_call_output"}, {"output", "4"}}}}};
  EXPECT_EQ(request_text(Api::kResponses, responses),
            "system: Be brief.\n\nuser: 2+2?\n\nassistant: "
            "<tool_call>{\"arguments\":{},\"name\":\"calc\"}</tool_call>\n\ntool: 4");
  Json messages = {
      {"system", "Be brief."},
      {"max_tokens", 5},
      {"messages",
       {{{"role", "user"}, {"content", "2+2?"}},
        {{"role", "user"}, {"content", {{{"type", "tool_result"}, {"content", "4"}}}}}}}};
  EXPECT_EQ(request_text(Api::kMessages, messages),
            "system: Be brief.\n\nuser: 2+2?\n\nuser: <tool_response>4</tool_response>");
  EXPECT_EQ(request_text(Api::kChat, Json::array()), "");
  EXPECT_EQ(request_text(Api::kChat, {{"messages", {{{"role", 3}}}}}), ": ");
}

TEST(ApiErrorTest, EachApiItsOwnShape) {
  http::Response chat = api_error(Api::kChat, 400, "bad field", "invalid_request");
  Json body = Json::parse(chat.body);
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(body["error"]["message"], "bad field");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  http::Response messages = api_error(Api::kMessages, 503, "busy");
  body = Json::parse(messages.body);
  EXPECT_EQ(body["type"], "error");
  EXPECT_EQ(body["error"]["type"], "overloaded_error");
  EXPECT_EQ(body["error"]["message"], "busy");
  EXPECT_TRUE(messages.headers.has("Retry-After"));
  EXPECT_TRUE(api_error(Api::kResponses, 503, "busy").headers.has("Retry-After"));
}

TEST(StreamErrorEventTest, EachApiItsOwnShape) {
  const std::string openai = R"({"error": {"message": "field 'top_p' must be in (0, 1]",
                                 "type": "invalid_request_error", "code": "invalid_argument"}})";
  const std::string anthropic =
      R"({"type": "error", "error": {"type": "invalid_request_error", "message": "bad max_tokens"}})";
  auto data = [](const std::string& event, const std::string& prefix) {
    EXPECT_EQ(event.rfind(prefix, 0), 0u) << event;
    EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
    return parse_json(event.substr(prefix.size()), "event data");
  };
  // Chat: the OpenAI error as a data event (what the SDKs raise from), Anthropic's rewritten.
  Json chat = data(stream_error_event(Api::kChat, 400, openai), "data: ");
  EXPECT_EQ(chat["error"]["code"], "invalid_argument");
  chat = data(stream_error_event(Api::kChat, 400, anthropic), "data: ");
  EXPECT_EQ(chat["error"]["message"], "bad max_tokens");
  EXPECT_FALSE(chat.contains("type"));
  // Responses: an `error` event.
  Json responses = data(stream_error_event(Api::kResponses, 400, openai), "event: error\ndata: ");
  EXPECT_EQ(responses["type"], "error");
  EXPECT_EQ(responses["code"], "invalid_argument");
  EXPECT_EQ(responses["message"], "field 'top_p' must be in (0, 1]");
  // Messages: Anthropic's error object as it is; an OpenAI one rewritten.
  Json messages = data(stream_error_event(Api::kMessages, 400, anthropic), "event: error\ndata: ");
  EXPECT_EQ(messages, parse_json(anthropic, "anthropic"));
  messages = data(stream_error_event(Api::kMessages, 503, openai), "event: error\ndata: ");
  EXPECT_EQ(messages["type"], "error");
  EXPECT_EQ(messages["error"]["type"], "overloaded_error");
  // A body in no known shape: its status and its first bytes.
  chat = data(stream_error_event(Api::kChat, 502, "<html>bad gateway</html>"), "data: ");
  EXPECT_THAT(chat["error"]["message"].get<std::string>(),
              HasSubstr("HTTP 502 from the front: <html>bad gateway</html>"));
}

}  // namespace
}  // namespace ajet::proxy
