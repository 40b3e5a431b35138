// End to end through the real ajet-swarm with ajet-echo-engine, the engine test double whose output
// is the last user message: the OpenAI API's answer shapes (non-streamed, SSE, tool calls, stop
// strings, n, logprobs, lengths), the tracking of every call, and the episode error paths of
// docs/protocol.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/encoding.h"
#include "e2e_util.h"
#include "store/sqlite.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const char* kToolCallText =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

Json weather_tools() {
  return Json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"description", "Weather of a city"},
          {"parameters",
           {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
}

struct Streamed {
  int status = 0;
  std::vector<Json> chunks;
  bool done = false;
  std::string body;  // a non-SSE answer
};

Streamed stream_chat(const std::string& url, const std::string& key, const Json& body) {
  http::HttpClient client(url);
  Streamed out;
  http::Headers h{{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}};
  auto r =
      client.stream("POST", "/v1/chat/completions", h, body.dump(), [&](const http::SseEvent& e) {
        if (e.data == "[DONE]") {
          out.done = true;
        } else {
          out.chunks.push_back(Json::parse(e.data));
        }
        return true;
      });
  out.status = r.status;
  out.body = r.body;
  return out;
}

std::string streamed_content(const Streamed& s, int index = 0) {
  std::string text;
  for (const auto& c : s.chunks) {
    for (const auto& choice : c["choices"]) {
      if (choice["index"] == index && choice["delta"].contains("content") &&
          choice["delta"]["content"].is_string()) {
        text += choice["delta"]["content"].get<std::string>();
      }
    }
  }
  return text;
}

Json streamed_finish(const Streamed& s, int index = 0) {
  for (const auto& c : s.chunks) {
    for (const auto& choice : c["choices"]) {
      if (choice["index"] == index && !choice["finish_reason"].is_null())
        return choice["finish_reason"];
    }
  }
  return nullptr;
}

class EchoFlowTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = fixture(false).tokenizer; }
  void boot(const std::string& extra_yaml = "", std::vector<std::string> flags = {},
            int64_t max_model_len = 512) {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", std::move(flags)});
    api_ = std::make_unique<Api>(swarm_->url());
    std::string yaml = config_yaml(model_, extra_yaml);
    const std::string key = "max_model_len: 512";
    yaml.replace(yaml.find(key), key.size(), "max_model_len: " + std::to_string(max_model_len));
    if (max_model_len > 512) {  // room for long echoed answers too
      const std::string turn = "max_response_length_in_one_turn: 48";
      yaml.replace(yaml.find(turn), turn.size(), "max_response_length_in_one_turn: 256");
    }
    api_->boot(yaml);
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(EchoFlowTest, ChatIsAnsweredTrackedAndTheEpisodeEnds) {
  boot();
  Json claim = api_->claim("client-a");
  ASSERT_EQ(claim["success"], true) << claim.dump();
  EXPECT_THAT(claim["openai_base_url"].get<std::string>(), HasSubstr("/v1"));
  const std::string key = claim["openai_api_key"], uuid = claim["episode_uuid"];
  EXPECT_THAT(key, StartsWith("sk-ajet-"));

  auto r = api_->chat(key, user_chat("Hello there, agent."));
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = r.json();
  EXPECT_THAT(body["id"].get<std::string>(), StartsWith("chatcmpl-"));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "agentjet");
  EXPECT_TRUE(body["created"].is_number_integer());
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hello there, agent.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_GT(body["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(body["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(
      body["usage"]["total_tokens"].get<int>(),
      body["usage"]["prompt_tokens"].get<int>() + body["usage"]["completion_tokens"].get<int>());

  // A second turn that repeats the first answer: its prompt must start with the first call's ids.
  Json turn2 = {
      {"messages", Json::array({{{"role", "user"}, {"content", "Hello there, agent."}},
                                {{"role", "assistant"}, {"content", "Hello there, agent."}},
                                {{"role", "user"}, {"content", "Again!"}}})}};
  ASSERT_EQ(api_->chat(key, turn2).status, 200);

  // Naming the client shows its own ids (others' are pseudonyms).
  Json buffer =
      api_->post("/get_episode_buffer", Json{{"client_uuid", "client-a"}}).json()["buffer"];
  bool seen = false;
  for (const auto& e : buffer) {
    if (e["episode_uuid"] == uuid) {
      seen = true;
      EXPECT_EQ(e["episode_status"], "claimed");
      EXPECT_EQ(e["client_uuid"], "client-a");
      EXPECT_EQ(e["llm_call_count"], 2);
    }
  }
  EXPECT_TRUE(seen) << buffer.dump();

  auto episode = api_->get("/episodes/" + uuid);
  ASSERT_EQ(episode.status, 200) << episode.body;
  Json ep = episode.json();
  ASSERT_EQ(ep["calls"].size(), 2u) << episode.body.substr(0, 2000);
  // Timeline merging: the second call continues the first, so the episode is one sample.
  EXPECT_EQ(ep["samples"].size(), 1u) << ep["diagnostics"].dump();

  auto replay = api_->post("/replay_latest_llm_call", Json::object());
  ASSERT_EQ(replay.status, 200);
  EXPECT_EQ(replay.json()["input"]["messages"].size(), 3u);
  EXPECT_EQ(replay.json()["output"]["object"], "chat.completion");

  auto end = api_->end("client-a", uuid, "task-1", 0.5);
  EXPECT_EQ(end.status, 200) << end.body;
  EXPECT_EQ(end.json()["success"], true);
  Json pool = api_->get("/get_current_batch_rollout_pool_information?client_uuid=client-a").json();
  EXPECT_EQ(pool["completed_episodes"], 1);
  EXPECT_EQ(pool["completed_tasks_details"]["task-1"][0], uuid);
  EXPECT_EQ(pool["engine_status"], "ENGINE.ROLLING");
  // The key of a finished episode no longer works: 404.
  auto after = api_->chat(key, user_chat("more?"));
  EXPECT_EQ(after.status, 404) << after.body;
  EXPECT_EQ(
      api_->post("/can_continue_episode", Json{{"client_uuid", "client-a"}, {"episode_uuid", uuid}})
          .json()["can_continue"],
      false);
}

TEST_F(EchoFlowTest, StreamingSendsRoleContentFinishUsageAndDone) {
  boot();
  Json claim = api_->claim("client-a");
  const std::string text =
      "Streaming works: caf\xC3\xA9, \xE4\xBD\xA0\xE5\xA5\xBD, \xF0\x9F\x98\x80 done.";
  Streamed s = stream_chat(
      swarm_->url(), claim["openai_api_key"],
      user_chat(text, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(s.status, 200) << s.body;
  ASSERT_GE(s.chunks.size(), 4u);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.chunks.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(streamed_content(s), text);  // every chunk is whole UTF-8, together the whole answer
  EXPECT_EQ(streamed_finish(s), "stop");
  // More than one content chunk: tokens are sent as they come, not replayed at the end.
  int content_chunks = 0;
  for (const auto& c : s.chunks) {
    if (!c["choices"].empty() && c["choices"][0]["delta"].value("content", "") != "")
      content_chunks += 1;
  }
  EXPECT_GT(content_chunks, 3);
  const Json& last = s.chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_GT(last["usage"]["completion_tokens"].get<int>(), 0);
  for (const auto& c : s.chunks) EXPECT_EQ(c["id"], s.chunks.front()["id"]);
}

TEST_F(EchoFlowTest, ToolCallsBecomeToolCallsStreamedAndNot) {
  boot("", {},
       2048);  // the tool schema alone is ~500 tokens of the test tokenizer's 400-id vocabulary
  Json claim = api_->claim("client-a");
  const std::string key = claim["openai_api_key"];
  Json request =
      user_chat(std::string("I will check.\n") + kToolCallText, {{"tools", weather_tools()}});
  auto r = api_->chat(key, request);
  ASSERT_EQ(r.status, 200) << r.body;
  Json choice = r.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
  Json call = choice["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), StartsWith("call_"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}}));
  EXPECT_EQ(choice["message"]["content"], "I will check.");

  request["stream"] = true;
  Streamed s = stream_chat(swarm_->url(), key, request);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_THAT(streamed_content(s), Not(HasSubstr("<tool_call>")));
  EXPECT_THAT(streamed_content(s), StartsWith("I will check."));
  EXPECT_EQ(streamed_finish(s), "tool_calls");
  Json tool_delta;
  for (const auto& c : s.chunks) {
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("tool_calls"))
      tool_delta = c["choices"][0]["delta"];
  }
  ASSERT_TRUE(tool_delta.is_object());
  EXPECT_EQ(tool_delta["tool_calls"][0]["index"], 0);
  EXPECT_EQ(tool_delta["tool_calls"][0]["function"]["name"], "get_weather");

  // Without tools in the request the same text stays content; tool_choice "none" too.
  auto plain = api_->chat(key, user_chat(kToolCallText));
  EXPECT_EQ(plain.json()["choices"][0]["message"]["content"], kToolCallText);
  auto none = api_->chat(
      key, user_chat(kToolCallText, {{"tools", weather_tools()}, {"tool_choice", "none"}}));
  EXPECT_EQ(none.json()["choices"][0]["finish_reason"], "stop");
  // A tool result turn renders and is answered.
  Json with_result = {
      {"tools", weather_tools()},
      {"messages",
       Json::array(
           {{{"role", "user"}, {"content", "weather?"}},
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}},
            {{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "sunny"}},
            {{"role", "user"}, {"content", "thanks"}}})}};
  auto result = api_->chat(key, with_result);
  EXPECT_EQ(result.status, 200) << result.body;
  EXPECT_EQ(result.json()["choices"][0]["message"]["content"], "thanks");
}

TEST_F(EchoFlowTest, StopStringsNLogprobsAndLengthLimits) {
  boot();
  Json claim = api_->claim("client-a", "eval");
  const std::string key = claim["openai_api_key"];
  auto stop =
      api_->chat(key, user_chat("one two three four", {{"stop", Json::array({"three", "zzz"})}}));
  ASSERT_EQ(stop.status, 200) << stop.body;
  EXPECT_EQ(stop.json()["choices"][0]["message"]["content"], "one two ");
  EXPECT_EQ(stop.json()["choices"][0]["finish_reason"], "stop");
  Streamed s = stream_chat(swarm_->url(), key,
                           user_chat("one two three four", {{"stream", true}, {"stop", "three"}}));
  EXPECT_EQ(streamed_content(s), "one two ");
  EXPECT_EQ(streamed_finish(s), "stop");

  auto n = api_->chat(
      key, user_chat("same for all", {{"n", 3}, {"logprobs", true}, {"top_logprobs", 2}}));
  ASSERT_EQ(n.status, 200) << n.body;
  Json choices = n.json()["choices"];
  ASSERT_EQ(choices.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(choices[i]["index"], i);
    EXPECT_EQ(choices[i]["message"]["content"], "same for all");
    const Json& content = choices[i]["logprobs"]["content"];
    ASSERT_GE(content.size(), 2u);
    EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.25f);
    EXPECT_TRUE(content[0]["token"].is_string());
    EXPECT_TRUE(content[0]["bytes"].is_array());
    EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(n.json()["usage"]["completion_tokens"].get<int>() % 3, 0);

  auto len =
      api_->chat(key, user_chat("a fairly long answer that will be cut", {{"max_tokens", 2}}));
  EXPECT_EQ(len.json()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(len.json()["usage"]["completion_tokens"], 2);

  auto completion = api_->post(
      "/v1/completions", Json{{"prompt", "plain text in"}, {"max_tokens", 40}, {"logprobs", 1}},
      {{"Authorization", "Bearer " + key}});
  ASSERT_EQ(completion.status, 200) << completion.body;
  EXPECT_EQ(completion.json()["object"], "text_completion");
  EXPECT_THAT(completion.json()["id"].get<std::string>(), StartsWith("cmpl-"));
  EXPECT_EQ(completion.json()["choices"][0]["text"], "plain text in");
  EXPECT_FALSE(completion.json()["choices"][0]["logprobs"]["tokens"].empty());

  auto models = api_->get("/v1/models", {{"Authorization", "Bearer " + key}});
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["object"], "list");
  EXPECT_EQ(models.json()["data"][0]["object"], "model");
}

TEST_F(EchoFlowTest, MalformedRequestsNameTheFieldAndOverflowIsAClear400) {
  boot();
  const std::string key = api_->claim("client-a", "eval")["openai_api_key"];
  struct Case {
    Json body;
    std::string field;
  };
  std::vector<Case> cases = {
      {Json{{"messages", "hi"}}, "messages"},
      {Json{{"model", "m"}}, "messages"},
      {user_chat("x", {{"n", 0}}), "'n'"},
      {user_chat("x", {{"temperature", "hot"}}), "temperature"},
      {user_chat("x", {{"top_p", 0}}), "top_p"},
      {user_chat("x", {{"max_tokens", -1}}), "max_tokens"},
      {user_chat("x", {{"stop", Json::array({1})}}), "stop[0]"},
      {user_chat("x", {{"top_logprobs", 3}}), "top_logprobs"},
      {user_chat("x", {{"tool_choice", "sometimes"}}), "tool_choice"},
      {Json{{"messages", Json::array({{{"role", "wizard"}, {"content", "x"}}})}}, "messages[0]"},
      {user_chat("x", {{"max_tokens", 100000}}), "context"},
  };
  for (const auto& c : cases) {
    auto r = api_->chat(key, c.body);
    EXPECT_EQ(r.status, 400) << c.body.dump() << " -> " << r.body;
    EXPECT_THAT(r.body, HasSubstr(c.field)) << c.body.dump();
    EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  }
  auto bad_json = curl("POST", swarm_->url() + "/v1/chat/completions", "{not json",
                       {"Authorization: Bearer " + key});
  EXPECT_EQ(bad_json.status, 400);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "word" + std::to_string(i) + " ";
  auto overflow = api_->chat(key, user_chat(words));
  EXPECT_EQ(overflow.status, 400) << overflow.body.substr(0, 300);
  EXPECT_THAT(overflow.body, HasSubstr("context"));
}

// Before: each of a call's n choices stored its own copy of the request and of the whole response
// (logprobs of every choice included), so memory and store grew with n²; and n went up to 128 while
// the engine decodes at most 64.
TEST_F(EchoFlowTest, NChoicesStoreTheirBodiesOnceAndNStopsAt64) {
  boot();
  Json claim = api_->claim("client-a", "eval");
  const std::string key = claim["openai_api_key"];
  const std::string uuid = claim["episode_uuid"];
  const std::string request =
      user_chat("same words for every choice", {{"n", 16}, {"logprobs", true}, {"top_logprobs", 5}})
          .dump();
  auto r = api_->http.request(
      "POST", "/v1/chat/completions",
      {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}}, request);
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  ASSERT_EQ(r.json()["choices"].size(), 16u);

  // Every reader still sees 16 whole calls (GET /episodes reads the store after a flush).
  auto episode = api_->get("/episodes/" + uuid);
  ASSERT_EQ(episode.status, 200) << episode.body.substr(0, 300);
  const Json calls = episode.json()["calls"];
  ASSERT_EQ(calls.size(), 16u);
  for (const Json& c : calls) {
    ASSERT_EQ(c["request"]["messages"].size(), 1u) << c.dump().substr(0, 300);
    EXPECT_EQ(c["request"]["messages"][0]["content"], "same words for every choice");
    EXPECT_EQ(c["completion_text"], "same words for every choice");
  }
  // The store holds the request and the response once: on the first choice's row.
  store::Db db(dir_ / "server" / "swarm.sqlite");
  db.exec("PRAGMA query_only=1");
  const std::string where = " FROM calls WHERE episode_uuid = '" + uuid + "'";
  EXPECT_EQ(db.query_text("SELECT count(*)" + where), "16");
  EXPECT_EQ(db.query_text("SELECT count(*)" + where + " AND length(response) > 0"), "1");
  EXPECT_EQ(
      db.query_text("SELECT sum(length(CAST(request AS BLOB)) + length(CAST(response AS BLOB)))" +
                    where),
      std::to_string(request.size() + r.body.size()));
  EXPECT_EQ(db.query_text("SELECT count(*)" + where + " AND bodies_from IS NOT NULL"), "15");

  auto over = api_->chat(key, user_chat("x", {{"n", 65}}));
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_THAT(over.body, HasSubstr("'n' must be between 1 and 64, got 65"));
}

// Before: one key could make calls until the front ran out of memory (4,146 calls of 1 MB: RSS
// 23 MB -> 4.2 GB, store +4.2 GB), and one request could ask for any n x max_tokens x top_logprobs.
TEST_F(EchoFlowTest, AnEpisodePastItsLimitsIsRefusedNamingTheLimitAndItsFlag) {
  boot("", {"--max-episode-calls", "3", "--max-request-token-entries", "2000"});
  Json claim = api_->claim("client-a", "eval");
  const std::string key = claim["openai_api_key"];
  ASSERT_EQ(api_->chat(key, user_chat("one")).status, 200);
  ASSERT_EQ(api_->chat(key, user_chat("two")).status, 200);
  auto two_more = api_->chat(key, user_chat("three", {{"n", 2}}));  // 2 + 2 > 3
  EXPECT_EQ(two_more.status, 413) << two_more.body;
  EXPECT_THAT(two_more.body, HasSubstr("--max-episode-calls"));
  ASSERT_EQ(api_->chat(key, user_chat("three")).status, 200);
  auto fourth = api_->chat(key, user_chat("four"));
  EXPECT_EQ(fourth.status, 413) << fourth.body;
  EXPECT_THAT(fourth.json()["error"]["message"].get<std::string>(),
              HasSubstr("limit of 3 calls per episode (ajet-swarm --max-episode-calls)"));
  // /v1/messages says it in Anthropic's envelope.
  auto messages = api_->http.request(
      "POST", "/v1/messages", {{"x-api-key", key}, {"Content-Type", "application/json"}},
      Json{{"max_tokens", 8}, {"messages", Json::array({{{"role", "user"}, {"content", "five"}}})}}
          .dump());
  EXPECT_EQ(messages.status, 413) << messages.body;
  EXPECT_EQ(messages.json()["type"], "error");
  EXPECT_EQ(messages.json()["error"]["type"], "request_too_large");
  EXPECT_THAT(messages.json()["error"]["message"].get<std::string>(),
              HasSubstr("--max-episode-calls"));

  // n x max_tokens x (1 + top_logprobs): 3 x 40 x 21 = 2520 > 2000.
  const std::string other = api_->claim("client-a", "eval")["openai_api_key"];
  auto wide = api_->chat(
      other,
      user_chat("x", {{"n", 3}, {"max_tokens", 40}, {"logprobs", true}, {"top_logprobs", 20}}));
  EXPECT_EQ(wide.status, 400) << wide.body;
  EXPECT_THAT(wide.body, HasSubstr("n (3) × max_tokens (40) × (1 + top_logprobs (20)) = 2520"));
  EXPECT_THAT(wide.body, HasSubstr("--max-request-token-entries"));
  EXPECT_EQ(
      api_->chat(other,
                 user_chat(
                     "x", {{"n", 1}, {"max_tokens", 40}, {"logprobs", true}, {"top_logprobs", 20}}))
          .status,
      200);
}

TEST_F(EchoFlowTest, AnEpisodePastItsStoredBytesIsRefusedNamingTheFlag) {
  boot("", {"--max-episode-mb", "0.01"});  // 10,485 bytes
  Json claim = api_->claim("client-a", "eval");
  const std::string key = claim["openai_api_key"];
  // The body is stored as sent: 3,000 bytes of a field the chat parser ignores.
  const Json padded = user_chat("hi", {{"user", std::string(3000, 'u')}});
  ASSERT_EQ(api_->chat(key, padded).status, 200);
  int accepted = 1;
  http::ClientResponse refused;
  for (int i = 0; i < 10; ++i) {
    refused = api_->chat(key, padded);
    if (refused.status != 200) break;
    ++accepted;
  }
  EXPECT_GE(accepted, 2);
  EXPECT_LE(accepted, 3);
  EXPECT_EQ(refused.status, 413) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr("bytes per episode (ajet-swarm --max-episode-mb 0.01)"));
  // Ending the episode frees its budget with it: the next episode is served.
  ASSERT_EQ(api_->end("client-a", claim["episode_uuid"], "t", 1.0).status, 200);
  const std::string next = api_->claim("client-a", "eval")["openai_api_key"];
  EXPECT_EQ(api_->chat(next, padded).status, 200);
}

TEST_F(EchoFlowTest, KeysOfOtherEpisodesForgedOrEditedAreRefused) {
  boot();
  Json a = api_->claim("client-a"), b = api_->claim("client-b");
  const std::string key = a["openai_api_key"];
  // Edit the key's JSON (another episode's uuid) and keep the old signature: 401.
  std::string payload = *base64_decode(key.substr(8));
  Json claims = Json::parse(payload);
  claims["episode_uuid"] = b["episode_uuid"];
  const std::string edited = "sk-ajet-" + base64_encode(claims.dump());
  auto r = api_->chat(edited, user_chat("hi"));
  EXPECT_EQ(r.status, 401) << r.body;
  claims.erase("sig");
  auto unsigned_key = api_->chat("sk-ajet-" + base64_encode(claims.dump()), user_chat("hi"));
  EXPECT_EQ(unsigned_key.status, 401);
  // The episode of another client: end_episode → 404.
  auto other = api_->end("client-b", a["episode_uuid"], "t", 1.0);
  EXPECT_EQ(other.status, 404) << other.body;
  // X-Agent-Name picks the agent; a bad one is a 400.
  auto named = api_->chat(key, user_chat("hi"), {{"X-Agent-Name", "planner"}});
  EXPECT_EQ(named.status, 200);
  auto bad_agent = api_->chat(key, user_chat("hi"), {{"X-Agent-Name", std::string(200, 'a')}});
  EXPECT_EQ(bad_agent.status, 400);
}

TEST_F(EchoFlowTest, JanitorReclaimsIdleEpisodesAndEndNamesTheTimeout) {
  boot();
  Json claim = api_->claim("client-a", "train", 0.3);
  const std::string uuid = claim["episode_uuid"];
  ASSERT_TRUE(eventually([&] {
    return api_->post("/can_continue_episode",
                      Json{{"client_uuid", "client-a"}, {"episode_uuid", uuid}})
               .json()["can_continue"] == false;
  }));
  auto end = api_->end("client-a", uuid, "t", 1.0);
  EXPECT_EQ(end.status, 400);
  EXPECT_THAT(end.body, HasSubstr("discard_episode_timeout"));
  auto chat = api_->chat(claim["openai_api_key"], user_chat("hi"));
  EXPECT_EQ(chat.status, 404);
  Json logs = api_->get("/get_verbose_logs").json();
  EXPECT_THAT(logs.dump(), HasSubstr("reclaimed"));
}

TEST_F(EchoFlowTest, AClientThatHangsUpMidStreamAbortsTheEngineRequest) {
  boot();
  Json claim = api_->claim("client-a");
  http::HttpClient client(swarm_->url());
  int events = 0;
  auto r =
      client.stream("POST", "/v1/chat/completions",
                    {{"Authorization", "Bearer " + claim["openai_api_key"].get<std::string>()},
                     {"Content-Type", "application/json"}},
                    user_chat("HOLD\nthis answer never ends", {{"stream", true}}).dump(),
                    [&](const http::SseEvent&) { return ++events < 2; });  // hang up after 2 events
  EXPECT_EQ(r.status, 200);
  ASSERT_TRUE(eventually([&] {
    return api_->get("/get_verbose_logs").body.find("aborted") != std::string::npos;
  })) << api_->get("/get_verbose_logs").body;
  // Nothing reached the agent, so nothing was recorded; the episode goes on.
  auto episode = api_->get("/episodes/" + claim["episode_uuid"].get<std::string>());
  EXPECT_TRUE(episode.json()["calls"].empty()) << episode.body.substr(0, 500);
  EXPECT_EQ(api_->chat(claim["openai_api_key"], user_chat("next")).status, 200);
}

// An episode was reclaimed while its own chat call was generating: idle time counted from the start
// of the call. A call in flight is activity, however long it runs; the idle clock starts when it
// ends.
TEST_F(EchoFlowTest, AGeneratingCallKeepsItsEpisodeAlivePastTheTimeout) {
  boot();
  Json claim = api_->claim("client-a", "train", 0.3);  // the janitor sweeps every 0.1 s
  const std::string uuid = claim["episode_uuid"];
  auto can_continue = [&] {
    return api_->post("/can_continue_episode",
                      Json{{"client_uuid", "client-a"}, {"episode_uuid", uuid}})
               .json()["can_continue"] == true;
  };
  http::HttpClient client(swarm_->url());
  bool alive_while_generating = false;
  auto r = client.stream("POST", "/v1/chat/completions",
                         {{"Authorization", "Bearer " + claim["openai_api_key"].get<std::string>()},
                          {"Content-Type", "application/json"}},
                         user_chat("HOLD\nthis answer never ends", {{"stream", true}}).dump(),
                         [&](const http::SseEvent&) {
                           std::this_thread::sleep_for(1500ms);  // five timeouts, fifteen sweeps
                           alive_while_generating = can_continue();
                           return false;  // hang up: the call ends
                         });
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(alive_while_generating) << "reclaimed while its call was generating";
  // Once the call is over, the episode idles like any other and is reclaimed after its timeout.
  EXPECT_TRUE(eventually([&] { return !can_continue(); }));
}

TEST_F(EchoFlowTest, DebugBackboneRecordsAFullBatchWithoutTraining) {
  boot();  // backbone debug, train_batch_size 2, num_repeat 2
  for (const std::string task : {"task-a", "task-b"}) {
    for (int i = 0; i < 2; ++i) {
      Json c = api_->claim("client-a");
      ASSERT_EQ(c["success"], true) << c.dump();
      ASSERT_EQ(api_->chat(c["openai_api_key"], user_chat("answer for " + task)).status, 200);
      ASSERT_EQ(api_->end("client-a", c["episode_uuid"], task, i == 0 ? 1.0 : 0.0).status, 200);
    }
  }
  ASSERT_TRUE(eventually(
      [&] { return api_->get("/get_verbose_logs").body.find("recorded") != std::string::npos; }));
  Json status = api_->status();
  EXPECT_EQ(status["engine_status"], "ENGINE.ROLLING");
  EXPECT_EQ(status["global_step"], 0);
  EXPECT_THAT(status["engine_status_detail"].get<std::string>(), HasSubstr("nothing trains"));
  Json pool = api_->get("/get_current_batch_rollout_pool_information").json();
  EXPECT_EQ(pool["completed_episodes"], 0);  // the next batch starts empty
  EXPECT_EQ(api_->claim("client-a")["success"], true);
}

TEST_F(EchoFlowTest, SyncTrainConfigOutsideOfflineIs400AndStopEngineGoesOffline) {
  boot();
  auto r = api_->post("/sync_train_config", Json{{"yaml_as_string", config_yaml(model_)}});
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("stop_engine"));
  auto start_again = api_->post("/start_engine", Json::object());
  EXPECT_EQ(start_again.status, 400);
  Json claim = api_->claim("client-a");
  auto stop = api_->post("/stop_engine", Json::object());
  EXPECT_EQ(stop.status, 200) << stop.body;
  EXPECT_EQ(api_->engine_status(), "ENGINE.OFFLINE");
  auto chat = api_->chat(claim["openai_api_key"], user_chat("hi"));
  EXPECT_EQ(chat.status, 503);
  EXPECT_TRUE(chat.headers.has("Retry-After"));
  EXPECT_EQ(api_->post("/sync_train_config", Json{{"yaml_as_string", config_yaml(model_)}}).status,
            200);
}

}  // namespace
}  // namespace ajet::e2e
