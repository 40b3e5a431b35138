// ajet-swarm with the real ajet-engine and a micro model made by `ajet model init` (random weights,
// so the text is noise but every shape, count and id is real): non-streamed and streamed chat, n,
// logprobs, completions, recording, a crashed engine restarted, and no orphan engine after the
// front is SIGKILLed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"
#include "prometheus_parse.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class RealEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(bin("ajet-engine")))
      GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
    model_ = fixture(true).model;
    swarm_ = std::make_unique<SwarmProcess>(SwarmProcess::Options{dir_ / "server", {}, "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
    api_->boot(config_yaml(model_));
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(RealEngineTest, ChatStreamNLogprobsAndCompletionsAgainstTheRealEngine) {
  Json claim = api_->claim("client-a");
  ASSERT_EQ(claim["success"], true) << claim.dump();
  const std::string key = claim["openai_api_key"], uuid = claim["episode_uuid"];

  auto r = api_->chat(
      key, user_chat("Hello!", {{"max_tokens", 8}, {"logprobs", true}, {"top_logprobs", 2}}));
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = r.json();
  const int completion = body["usage"]["completion_tokens"];
  EXPECT_GE(completion, 1);
  EXPECT_LE(completion, 8);
  Json choice = body["choices"][0];
  EXPECT_TRUE(choice["finish_reason"] == "stop" || choice["finish_reason"] == "length")
      << choice.dump();
  EXPECT_EQ(choice["logprobs"]["content"].size(), size_t(completion));
  for (const auto& t : choice["logprobs"]["content"]) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_EQ(t["top_logprobs"].size(), 2u);
  }
  EXPECT_THAT(body["system_fingerprint"].get<std::string>(), HasSubstr("ajet-policy-"));

  // Streamed: chunks arrive one by one and end with a usage chunk and [DONE].
  http::HttpClient client(swarm_->url());
  std::vector<Json> chunks;
  bool done = false;
  auto s = client.stream(
      "POST", "/v1/chat/completions",
      {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}},
      user_chat(
          "Count to five.",
          {{"stream", true}, {"max_tokens", 6}, {"stream_options", {{"include_usage", true}}}})
          .dump(),
      [&](const http::SseEvent& e) {
        if (e.data == "[DONE]")
          done = true;
        else
          chunks.push_back(Json::parse(e.data));
        return true;
      });
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_GE(chunks.back()["usage"]["completion_tokens"].get<int>(), 1);

  auto n = api_->chat(key, user_chat("Pick a word.", {{"n", 3}, {"max_tokens", 4}}));
  ASSERT_EQ(n.status, 200) << n.body;
  EXPECT_EQ(n.json()["choices"].size(), 3u);

  auto completion_r =
      api_->post("/v1/completions", Json{{"prompt", "Once upon a time"}, {"max_tokens", 5}},
                 {{"Authorization", "Bearer " + key}});
  ASSERT_EQ(completion_r.status, 200) << completion_r.body;
  EXPECT_EQ(completion_r.json()["object"], "text_completion");

  ASSERT_EQ(api_->end("client-a", uuid, "t", 1.0).status, 200);
  auto episode = api_->get("/episodes/" + uuid);
  ASSERT_EQ(episode.status, 200);
  // chat (1) + stream (1) + n (3) + completion (1) calls, each with real ids and logprobs.
  Json calls = episode.json()["calls"];
  ASSERT_EQ(calls.size(), 6u);
  EXPECT_THAT(calls.dump(), HasSubstr("completion_ids"));

  // GET /metrics: the real engine's figures through the front, and the front's token counts.
  http::ClientResponse scraped = api_->get("/metrics");
  ASSERT_EQ(scraped.status, 200);
  Exposition m = parse_exposition(scraped.body);
  const int64_t completions = body["usage"]["completion_tokens"].get<int64_t>() +
                              chunks.back()["usage"]["completion_tokens"].get<int64_t>() +
                              n.json()["usage"]["completion_tokens"].get<int64_t>() +
                              completion_r.json()["usage"]["completion_tokens"].get<int64_t>();
  EXPECT_EQ(m.at("ajet_completion_tokens_total"), double(completions));
  EXPECT_EQ(m.at("ajet_engine_up"), 1);
  EXPECT_GE(m.at("ajet_engine_generated_tokens_total"), double(completions));
  EXPECT_GT(m.at("ajet_engine_computed_tokens_total"), 0);
  EXPECT_GE(m.at("ajet_engine_prefix_cache_hit_tokens_total"), 0);
  EXPECT_GE(m.at("ajet_engine_sequences", {{"state", "waiting"}}), 0);
  EXPECT_GT(m.at("ajet_engine_kv_cache_blocks", {{"state", "free"}}), 0);
  EXPECT_GT(m.at("ajet_engine_kv_cache_block_tokens"), 0);
  EXPECT_GE(m.at("ajet_engine_rpc_generate_requests_total"), 4);
}

// The real engine's first tokens event of a call that ends at once (max_tokens 1, or a stop token
// first) also carries its finish reason: the stream opened for it is answered, not dropped (the
// front answered such a call with a 500, "the handler dropped the request without responding").
TEST_F(RealEngineTest, AStreamedCallEndedByItsFirstEventIsAnswered) {
  Json claim = api_->claim("client-a", "eval");
  ASSERT_EQ(claim["success"], true) << claim.dump();
  const std::string key = claim["openai_api_key"];
  const http::Headers headers{{"Authorization", "Bearer " + key},
                              {"Content-Type", "application/json"}};
  http::HttpClient client(swarm_->url());
  for (const std::string path : {"/v1/chat/completions", "/v1/completions"}) {
    const bool chat = path == "/v1/chat/completions";
    Json body = chat ? user_chat("Hello!", {{"stream", true},
                                            {"max_tokens", 1},
                                            {"logprobs", true},
                                            {"stream_options", {{"include_usage", true}}}})
                     : Json{{"prompt", "Once upon a time"},
                            {"stream", true},
                            {"max_tokens", 1},
                            {"stream_options", {{"include_usage", true}}}};
    std::vector<Json> chunks;
    bool done = false;
    auto s = client.stream("POST", path, headers, body.dump(), [&](const http::SseEvent& e) {
      if (e.data == "[DONE]")
        done = true;
      else
        chunks.push_back(Json::parse(e.data));
      return true;
    });
    ASSERT_EQ(s.status, 200) << path << ": " << s.body;
    EXPECT_TRUE(done) << path;
    ASSERT_GE(chunks.size(), 2u) << path;
    Json finish;
    for (const auto& c : chunks) {
      for (const auto& choice : c["choices"]) {
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
      }
    }
    EXPECT_TRUE(finish == "length" || finish == "stop") << path << ": " << finish.dump();
    EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 1) << path;
  }
}

TEST_F(RealEngineTest, CrashedEngineIsRestartedAndNothingIsOrphanedWhenTheFrontDies) {
  const int64_t first = api_->engine_pid();
  ASSERT_GT(first, 0) << api_->status().dump();
  ASSERT_EQ(::kill(pid_t(first), SIGKILL), 0);
  ASSERT_TRUE(eventually([&] {
    int64_t now = api_->engine_pid();
    return api_->engine_status() == "ENGINE.ROLLING" && now > 0 && now != first;
  })) << api_->status().dump();
  EXPECT_THAT(api_->get("/get_verbose_logs").body, HasSubstr("restarting it from"));
  Json claim = api_->claim("client-a");
  EXPECT_EQ(api_->chat(claim["openai_api_key"], user_chat("Hi", {{"max_tokens", 2}})).status, 200);

  const int64_t second = api_->engine_pid();
  swarm_->stop(SIGKILL);
  EXPECT_TRUE(eventually([&] { return process_gone(second); }, 20s))
      << "the engine outlived the SIGKILLed front";
}

}  // namespace
}  // namespace ajet::e2e
