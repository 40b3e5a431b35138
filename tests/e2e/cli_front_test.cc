// What the stock agent CLIs send, through the real ajet-swarm with ajet-echo-engine (whose answer
// is the last user message, so a user message holding a Hermes <tool_call> block is a tool call on
// cue): Claude Code's Messages bodies (adaptive thinking, system messages inside `messages`, server
// tools, `?beta=true`), its overflow sentences, count_tokens and HEAD /; Codex's Responses bodies
// (namespace and built-in tools) and a stream of function calls alone; model names that do not
// split an episode; the stored conversation of Messages and Responses calls; refused calls in the
// log; the per-turn cap as a contract. The stock CLIs themselves run in stock_cli_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

// The echo engine answers the last user message; this one calls a tool.
std::string tool_call_text(const std::string& name, const Json& arguments) {
  return "<tool_call>\n" + Json{{"name", name}, {"arguments", arguments}}.dump() + "\n</tool_call>";
}

Json schema_with(const std::string& property) {
  return Json{{"type", "object"}, {"properties", {{property, {{"type", "string"}}}}}};
}

class CliFrontTest : public ::testing::Test {
 protected:
  // `max_model_len` 2048 leaves room for tool schemas, a per-turn cap of 256 tokens for a tool
  // call.
  void boot(const std::string& extra = "") {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
    std::string yaml = config_yaml(fixture(false).tokenizer, extra);
    const std::string len = "max_model_len: 512";
    yaml.replace(yaml.find(len), len.size(), "max_model_len: 2048");
    const std::string prompt = "max_prompt_length: 256";
    yaml.replace(yaml.find(prompt), prompt.size(), "max_prompt_length: 1536");
    const std::string turn = "max_response_length_in_one_turn: 48";
    yaml.replace(yaml.find(turn), turn.size(), "max_response_length_in_one_turn: 256");
    api_->boot(yaml);
  }
  http::ClientResponse messages(const std::string& key, const Json& body,
                                const std::string& path = "/v1/messages") {
    return api_->http.request("POST", path,
                              {{"x-api-key", key},
                               {"anthropic-version", "2023-06-01"},
                               {"Content-Type", "application/json"}},
                              body.dump());
  }
  http::ClientResponse responses(const std::string& key, const Json& body) {
    return api_->http.request(
        "POST", "/v1/responses",
        {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}}, body.dump());
  }
  Json episode(const std::string& uuid) {
    auto r = api_->get("/episodes/" + uuid);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  }
  ScratchDir dir_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

// What Claude Code 2.1 sends by default, cut down: system blocks with cache_control, a system
// message after the user's (its mid-conversation-system beta), a deferred tool and a server tool,
// adaptive thinking, and fields this server ignores.
Json claude_code_body(const std::string& user_text, bool stream) {
  return Json{
      {"model", "claude-opus-4-8"},
      {"max_tokens", 32000},
      {"stream", stream},
      {"system",
       Json::array({{{"type", "text"}, {"text", "x-anthropic-billing-header: cc_version=2.1"}},
                    {{"type", "text"},
                     {"text", "You are Claude Code."},
                     {"cache_control", {{"type", "ephemeral"}}}}})},
      {"messages",
       Json::array(
           {{{"role", "user"}, {"content", Json::array({{{"type", "text"}, {"text", user_text}}})}},
            {{"role", "system"},
             {"content", Json::array({{{"type", "text"},
                                       {"text", "# Environment\nPrimary working directory: /w"},
                                       {"cache_control", {{"type", "ephemeral"}}}}})}}})},
      {"tools",
       Json::array({{{"name", "Bash"},
                     {"description", "Runs a command"},
                     {"input_schema", schema_with("command")}},
                    {{"name", "Deferred"},
                     {"description", "later"},
                     {"input_schema", schema_with("x")},
                     {"defer_loading", true}},
                    {{"type", "web_search_20250305"}, {"name", "web_search"}, {"max_uses", 5}}})},
      {"thinking", {{"type", "adaptive"}, {"display", "omitted"}}},
      {"context_management",
       {{"edits", Json::array({{{"type", "clear_thinking_20251015"}, {"keep", "all"}}})}}},
      {"output_config", {{"effort", "medium"}}},
      {"metadata", {{"user_id", "{\"session_id\": \"s\"}"}}}};
}

// Before (issue 39): stock Claude Code was refused on every request: `thinking: {"type":
// "adaptive"}` and a {"role": "system"} message inside `messages` were each a 400.
TEST_F(CliFrontTest, MessagesTakesWhatClaudeCodeSendsAndKeepsItsSystemMessagesInPlace) {
  boot();
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  auto r = messages(key, claude_code_body(tool_call_text("Bash", {{"command", "echo hi"}}), false),
                    "/v1/messages?beta=true");
  ASSERT_EQ(r.status, 200) << r.body;
  Json answer = r.json();
  EXPECT_EQ(answer["stop_reason"], "tool_use") << r.body;
  ASSERT_FALSE(answer["content"].empty());
  EXPECT_EQ(answer["content"].back()["name"], "Bash");

  auto streamed = messages(key, claude_code_body("plain answer", true), "/v1/messages?beta=true");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_THAT(streamed.body, HasSubstr("event: message_stop"));

  // The system message stays where Claude Code put it (a system turn after the user's), and the
  // server tool is gone from what the model saw.
  Json ep = episode(claim["episode_uuid"]);
  ASSERT_EQ(ep["calls"].size(), 2u);
  const Json& request = ep["calls"][0]["request"];
  ASSERT_EQ(request["messages"].size(), 3u) << request.dump();
  EXPECT_EQ(request["messages"][0]["role"], "system");
  EXPECT_EQ(request["messages"][1]["role"], "user");
  EXPECT_EQ(request["messages"][2]["role"], "system");
  EXPECT_THAT(request["messages"][2]["content"].get<std::string>(),
              HasSubstr("Primary working directory"));
  ASSERT_EQ(request["tools"].size(), 2u) << request["tools"].dump();
  EXPECT_EQ(
      swarm_->wait_for_line("dropped 1 server tool(s) this server does not run: web_search", 10s)
          .empty(),
      false)
      << swarm_->output();
}

// Before: overflow was "context overflow: …" in words Claude Code does not act on; Anthropic's
// sentences make it compact its history or retry with a smaller max_tokens.
TEST_F(CliFrontTest, OverflowIsSaidInAnthropicsSentencesOnMessages) {
  boot();
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  const Json user = Json::array({{{"role", "user"}, {"content", "hi"}}});
  auto both = messages(key, Json{{"max_tokens", 5000}, {"messages", user}});
  ASSERT_EQ(both.status, 400) << both.body;
  EXPECT_EQ(both.json()["type"], "error");
  EXPECT_EQ(both.json()["error"]["type"], "invalid_request_error");
  EXPECT_THAT(both.json()["error"]["message"].get<std::string>(),
              ::testing::MatchesRegex(
                  "input length and `max_tokens` exceed context limit: [0-9]+ \\+ 5000 > 2048, "
                  "decrease input length or `max_tokens` and try again"));
  // A prompt longer than the context: "prompt is too long: N tokens > M maximum", exactly.
  const Json long_user = Json::array({{{"role", "user"}, {"content", std::string(9000, 'z')}}});
  auto prompt = messages(key, Json{{"max_tokens", 8}, {"messages", long_user}});
  ASSERT_EQ(prompt.status, 400) << prompt.body;
  EXPECT_THAT(prompt.json()["error"]["message"].get<std::string>(),
              ::testing::MatchesRegex("prompt is too long: [0-9]+ tokens > 2048 maximum"));
  EXPECT_EQ(prompt.json().size(), 2u) << "only type and error, as Anthropic answers";
  // The chat API says it in OpenAI's sentences and code (what OpenAI SDK users, Codex and Qwen Code
  // match on), naming the config key.
  auto chat = api_->chat(key, user_chat("hi", {{"max_tokens", 5000}}));
  EXPECT_EQ(chat.status, 400);
  EXPECT_THAT(chat.body, HasSubstr("This model's maximum context length is"));
  EXPECT_THAT(chat.body, HasSubstr("ajet.rollout.max_model_len"));
  EXPECT_EQ(chat.json()["error"]["code"], "context_length_exceeded") << chat.body;
}

// Before: POST /v1/messages/count_tokens and HEAD / were 404.
TEST_F(CliFrontTest, CountTokensCountsWhatAMessagesCallRendersAndTheRootAnswers) {
  boot();
  const std::string key = api_->claim("client-a", "train")["openai_api_key"];
  Json body = claude_code_body("count me", false);
  auto counted = messages(key, body, "/v1/messages/count_tokens");
  ASSERT_EQ(counted.status, 200) << counted.body;
  auto called = messages(key, body);
  ASSERT_EQ(called.status, 200) << called.body;
  EXPECT_EQ(counted.json()["input_tokens"], called.json()["usage"]["input_tokens"]);
  body.erase("max_tokens");  // not needed to count
  EXPECT_EQ(messages(key, body, "/v1/messages/count_tokens").status, 200);
  EXPECT_EQ(messages("sk-ajet-forged", body, "/v1/messages/count_tokens").json()["error"]["type"],
            "authentication_error");

  Captured head = run_capture("curl -s -S --max-time 30 -o /dev/null -I -w '%{http_code}' " +
                              shell_quote(swarm_->url() + "/"));
  EXPECT_EQ(head.out, "200") << "Claude Code probes HEAD /";
  EXPECT_EQ(curl("GET", swarm_->url() + "/").json()["status"], "ok");
}

// What Codex 0.171 sends by default, cut down: function tools, a namespace of function tools and a
// built-in web_search tool, developer messages, and fields this server ignores.
Json codex_body(const std::string& user_text, bool stream) {
  auto function = [](const std::string& name) {
    return Json{{"type", "function"},
                {"name", name},
                {"description", name},
                {"strict", false},
                {"parameters", schema_with("cmd")}};
  };
  return Json{
      {"model", "gpt-5-codex"},
      {"stream", stream},
      {"store", false},
      {"tool_choice", "auto"},
      {"parallel_tool_calls", true},
      {"reasoning", {{"summary", "auto"}}},
      {"include", Json::array({"reasoning.encrypted_content"})},
      {"prompt_cache_key", "k"},
      {"tools",
       Json::array({function("exec_command"),
                    {{"type", "namespace"},
                     {"name", "multi_agent_v1"},
                     {"description", "agents"},
                     {"tools", Json::array({function("spawn_agent"), function("wait_agent")})}},
                    {{"type", "web_search"}, {"external_web_access", false}}})},
      {"input",
       Json::array(
           {{{"type", "message"},
             {"role", "developer"},
             {"content", Json::array({{{"type", "input_text"}, {"text", "You are Codex."}}})}},
            {{"type", "message"},
             {"role", "user"},
             {"content", Json::array({{{"type", "input_text"}, {"text", user_text}}})}}})}};
}

// Before: Codex was refused on every request (namespace and web_search tools were 400), and a
// stream with only function calls opened an empty message item first.
TEST_F(CliFrontTest, ResponsesFlattensNamespacesDropsBuiltInToolsAndStreamsCallsAlone) {
  boot();
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  auto call = responses(key, codex_body(tool_call_text("wait_agent", {{"cmd", "x"}}), false));
  ASSERT_EQ(call.status, 200) << call.body;
  Json output = call.json()["output"];
  ASSERT_EQ(output.size(), 1u) << call.body;
  EXPECT_EQ(output[0]["type"], "function_call");
  EXPECT_EQ(output[0]["name"], "wait_agent");
  EXPECT_EQ(output[0]["namespace"], "multi_agent_v1") << "Codex routes a namespaced call by both";

  std::vector<Json> added;
  std::string completed_status;
  http::HttpClient client(swarm_->url());
  auto streamed =
      client.stream("POST", "/v1/responses",
                    {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}},
                    codex_body(tool_call_text("exec_command", {{"cmd", "ls"}}), true).dump(),
                    [&](const http::SseEvent& e) {
                      Json d = Json::parse(e.data);
                      if (e.event == "response.output_item.added") added.push_back(d);
                      if (e.event == "response.completed")
                        completed_status = d["response"]["status"];
                      return true;
                    });
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  ASSERT_EQ(added.size(), 1u) << "one item: the call, no empty message before it";
  EXPECT_EQ(added[0]["item"]["type"], "function_call");
  EXPECT_EQ(added[0]["output_index"], 0);
  EXPECT_FALSE(added[0]["item"].contains("namespace"));
  EXPECT_EQ(completed_status, "completed");

  // A text answer still opens its message item (with the first text).
  auto text = responses(key, codex_body("just text", true));
  ASSERT_EQ(text.status, 200);
  EXPECT_THAT(text.body, HasSubstr("response.output_text.delta"));
  EXPECT_THAT(text.body, HasSubstr("\"type\":\"message\""));

  Json ep = episode(claim["episode_uuid"]);
  ASSERT_EQ(ep["calls"].size(), 3u);
  EXPECT_EQ(ep["calls"][0]["request"]["tools"].size(), 3u)
      << "exec_command, spawn_agent, wait_agent";
  EXPECT_FALSE(
      swarm_->wait_for_line("flattened namespace tool(s) into function tools: multi_agent_v1", 10s)
          .empty());
  EXPECT_FALSE(
      swarm_->wait_for_line("dropped 1 built-in tool(s) this server does not run: web_search", 10s)
          .empty());
}

// Before: any `model` became an agent name, so Claude Code's model (and a side call on another)
// split one episode into agents. Now only a configured or known name does.
TEST_F(CliFrontTest, ModelNamesSplitAnEpisodeOnlyWhenConfigured) {
  boot("  context_tracker:\n    model_agents:\n      claude-haiku-side: helper\n");
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  for (const char* model : {"claude-opus-4-8", "gpt-5-codex", "claude-haiku-side"}) {
    auto r =
        messages(key, Json{{"model", model},
                           {"max_tokens", 8},
                           {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["model"], model) << "the model is echoed as sent";
  }
  Json ep = episode(claim["episode_uuid"]);
  ASSERT_EQ(ep["calls"].size(), 3u);
  EXPECT_EQ(ep["calls"][0]["agent_name"], "default_agent_name");
  EXPECT_EQ(ep["calls"][1]["agent_name"], "default_agent_name");
  EXPECT_EQ(ep["calls"][2]["agent_name"], "helper");
}

// Before: the stored request of a Messages or Responses call was the body as sent, which the
// episode views read as a chat body: every view showed {"messages": [], "tools": []}, and each read
// logged a warning.
TEST_F(CliFrontTest, EveryViewShowsTheConversationOfMessagesAndResponsesCalls) {
  boot();
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  ASSERT_EQ(messages(key, claude_code_body("from claude", false)).status, 200);
  ASSERT_EQ(responses(key, codex_body("from codex", false)).status, 200);
  const size_t lines_before = swarm_->output().size();
  Json ep = episode(claim["episode_uuid"]);
  ASSERT_EQ(ep["calls"].size(), 2u);
  const Json& first = ep["calls"][0]["request"]["messages"];
  ASSERT_EQ(first.size(), 3u) << first.dump();
  EXPECT_THAT(first[1]["content"].get<std::string>(), HasSubstr("from claude"));
  const Json& second = ep["calls"][1]["request"]["messages"];
  ASSERT_EQ(second.size(), 2u) << second.dump();
  EXPECT_EQ(second[0]["role"], "system") << "developer is rendered as system";
  EXPECT_THAT(second[1]["content"].get<std::string>(), HasSubstr("from codex"));
  EXPECT_EQ(swarm_->output().substr(lines_before).find("stored request"), std::string::npos)
      << swarm_->output();
  // The CLI (ajet episode show) reads the same store.
  Captured show = run_capture(shell_quote(bin("ajet").string()) + " episode show " +
                              shell_quote(claim["episode_uuid"].get<std::string>()) +
                              " --color never --url " + shell_quote(swarm_->url()));
  EXPECT_THAT(show.out, HasSubstr("from claude")) << show.out;
}

// Before: a refused /v1 call left no line in the front's log.
TEST_F(CliFrontTest, RefusedCallsAreLoggedRateLimited) {
  boot();
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(
        messages(key, Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}})
            .status,
        400);
  }
  EXPECT_EQ(responses("sk-ajet-forged", Json{{"input", "hi"}}).status, 401);
  EXPECT_FALSE(
      swarm_
          ->wait_for_line(
              "POST /v1/messages refused (400): request body: field 'max_tokens' is required", 10s)
          .empty())
      << swarm_->output();
  EXPECT_FALSE(swarm_->wait_for_line("POST /v1/responses refused (401)", 10s).empty())
      << swarm_->output();
  const std::string out = swarm_->output();
  size_t lines = 0;
  for (size_t at = out.find("POST /v1/messages refused (400)"); at != std::string::npos;
       at = out.find("POST /v1/messages refused (400)", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << "five refusals within 10 s: one line\n" << out;
}

// Before: the per-turn cap (max_response_length_in_one_turn, 256 here) silently cut a turn that the
// client had allowed 1000 tokens, and the answer said max_tokens / incomplete / length: Claude Code
// read that as its own limit and sent "continue" turns, Codex failed the turn, Qwen Code retried
// with a larger max_tokens. Now such a cut ends as a normal turn; the stored call keeps "length".
TEST_F(CliFrontTest, APerTurnCapBelowTheClientsMaxTokensEndsTheTurnNormally) {
  boot();
  Json claim = api_->claim("client-a", "train");
  const std::string key = claim["openai_api_key"];
  std::string long_text;  // far more than 256 tokens of echo
  for (int i = 0; i < 300; ++i) long_text += "w" + std::to_string(i * 7919 % 1000) + " ";
  const Json user = Json::array({{{"role", "user"}, {"content", long_text}}});
  auto m = messages(key, Json{{"max_tokens", 1000}, {"messages", user}});
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.json()["stop_reason"], "end_turn");
  EXPECT_EQ(m.json()["usage"]["output_tokens"], 256);
  auto own = messages(key, Json{{"max_tokens", 5}, {"messages", user}});
  EXPECT_EQ(own.json()["stop_reason"], "max_tokens") << "the client's own limit is said as such";

  auto r = responses(key, Json{{"input", long_text}});  // Codex sends no max_output_tokens
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["status"], "completed");
  auto r_own = responses(key, Json{{"input", long_text}, {"max_output_tokens", 5}});
  EXPECT_EQ(r_own.json()["status"], "incomplete");

  auto chat = api_->chat(key, user_chat(long_text, {{"max_tokens", 1000}}));
  EXPECT_EQ(chat.json()["choices"][0]["finish_reason"], "stop");
  auto chat_default = api_->chat(key, user_chat(long_text));
  EXPECT_EQ(chat_default.json()["choices"][0]["finish_reason"], "length")
      << "no max_tokens: the server's, as vLLM";

  Json ep = episode(claim["episode_uuid"]);
  ASSERT_EQ(ep["calls"].size(), 6u);
  EXPECT_EQ(ep["calls"][0]["finish_reason"], "length") << "the sample still knows it was cut";
}

}  // namespace
}  // namespace ajet::e2e
