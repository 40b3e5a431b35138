// GET /metrics and GET /version of the real ajet-swarm on loopback, with ajet-echo-engine: the
// whole exposition read by a strict parser (prometheus_parse.h), route labels that are patterns,
// counters that move by exactly what known requests did (requests, LLM calls, prompt and completion
// tokens, the engine's generated tokens, ended episodes), the engine's figures while it runs and
// ajet_engine_up 0 without it. Every count is read after the request that makes it was answered,
// and the front counts before it answers: no waiting on timing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

#include "e2e_util.h"
#include "prometheus_parse.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = fixture(false).tokenizer; }
  void start() {
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
  }
  Exposition scrape() {
    http::ClientResponse r = api_->get("/metrics");
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.get_or("Content-Type", ""), "text/plain; version=0.0.4; charset=utf-8");
    return parse_exposition(r.body);
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

// What a chat call reported in its usage.
struct Usage {
  int64_t prompt = 0;
  int64_t completion = 0;
};

Usage chat_usage(Api& api, const std::string& key, const std::string& content) {
  auto r = api.chat(key, user_chat(content));
  EXPECT_EQ(r.status, 200) << r.body;
  Json u = r.json()["usage"];
  return Usage{u["prompt_tokens"].get<int64_t>(), u["completion_tokens"].get<int64_t>()};
}

Usage streamed_usage(const std::string& url, const std::string& key, const std::string& content) {
  http::HttpClient client(url);
  Usage usage;
  bool done = false;
  auto r = client.stream(
      "POST", "/v1/chat/completions",
      {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}},
      user_chat(content, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}).dump(),
      [&](const http::SseEvent& e) {
        if (e.data == "[DONE]") {
          done = true;
        } else if (Json chunk = Json::parse(e.data); chunk["usage"].is_object()) {
          usage = Usage{chunk["usage"]["prompt_tokens"].get<int64_t>(),
                        chunk["usage"]["completion_tokens"].get<int64_t>()};
        }
        return true;
      });
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(done);
  EXPECT_GT(usage.completion, 0);
  return usage;
}

TEST_F(PrometheusTest, TheExpositionParsesAndRoutesArePatternsWhileOffline) {
  start();
  const std::string uuid = "0123456789abcdef0123456789abcdef";
  for (int i = 0; i < 3; ++i) ASSERT_EQ(api_->get("/health").status, 200);
  EXPECT_EQ(api_->post("/health", Json::object()).status, 405);
  EXPECT_EQ(api_->get("/episodes/" + uuid).status, 404);
  EXPECT_EQ(api_->get("/no/such/" + uuid).status, 404);
  EXPECT_EQ(curl("BREW", swarm_->url() + "/health").status,
            405);  // an unknown method stays one label

  Exposition m = scrape();
  EXPECT_EQ(
      m.at("ajet_http_requests_total", {{"route", "/health"}, {"method", "GET"}, {"code", "200"}}),
      3);
  EXPECT_EQ(
      m.at("ajet_http_requests_total", {{"route", "/health"}, {"method", "POST"}, {"code", "405"}}),
      1);
  EXPECT_EQ(m.at("ajet_http_requests_total",
                 {{"route", "/health"}, {"method", "other"}, {"code", "405"}}),
            1);
  EXPECT_EQ(m.at("ajet_http_requests_total",
                 {{"route", "/episodes/{episode_uuid}"}, {"method", "GET"}, {"code", "404"}}),
            1);
  EXPECT_EQ(m.at("ajet_http_requests_total",
                 {{"route", "unmatched"}, {"method", "GET"}, {"code", "404"}}),
            1);
  EXPECT_EQ(m.at("ajet_http_request_duration_seconds_count", {{"route", "/health"}}), 5);
  // No raw path becomes a label.
  for (const auto& s : m.all("ajet_http_requests_total")) {
    EXPECT_THAT(s.labels.at("route"), ::testing::Not(HasSubstr(uuid)));
  }
  // The first scrape was counted before its answer went out.
  Exposition again = scrape();
  EXPECT_EQ(again.at("ajet_http_requests_total",
                     {{"route", "/metrics"}, {"method", "GET"}, {"code", "200"}}),
            1);
  EXPECT_GE(again.at("ajet_http_connections_open"), 1);  // the scrape's own
  EXPECT_GE(again.at("ajet_http_connections_total"), 2);

  // No engine: up 0 and no engine figures; OFFLINE is the one status at 1.
  EXPECT_EQ(m.at("ajet_engine_up"), 0);
  EXPECT_FALSE(m.has("ajet_engine_sequences"));
  EXPECT_FALSE(m.has("ajet_engine_generated_tokens_total"));
  EXPECT_EQ(m.at("ajet_engine_status", {{"status", "ENGINE.OFFLINE"}}), 1);
  EXPECT_EQ(m.at("ajet_engine_status", {{"status", "ENGINE.ROLLING"}}), 0);
  EXPECT_EQ(m.all("ajet_engine_status").size(), 6u);
  EXPECT_EQ(m.at("ajet_global_step"), 0);
  EXPECT_EQ(m.at("ajet_episodes", {{"state", "claimed"}}), 0);
  EXPECT_EQ(m.at("ajet_episodes_ended_total", {{"outcome", "finished"}, {"type", "train"}}), 0);
  EXPECT_EQ(m.at("ajet_completion_tokens_total"), 0);
  EXPECT_GE(m.at("ajet_store_queued_writes"), 0);
  EXPECT_TRUE(m.has("ajet_work_pool_queued_tasks"));
  // The process.
  EXPECT_GT(m.at("process_resident_memory_bytes"), 1e6);
  EXPECT_GT(m.at("process_start_time_seconds"), 1.6e9);
  EXPECT_GE(m.at("process_cpu_seconds_total"), 0);
  EXPECT_GT(m.at("process_open_fds"), 0);
  // Every family is ours or the process's, and named by the conventions.
  for (const auto& [name, family] : m.families) {
    EXPECT_TRUE(name.rfind("ajet_", 0) == 0 || name.rfind("process_", 0) == 0) << name;
  }
}

TEST_F(PrometheusTest, VersionSaysWhatTheBinaryIs) {
  start();
  auto r = api_->get("/version");
  ASSERT_EQ(r.status, 200) << r.body;
  Json v = r.json();
  const std::string version = v["version"], commit = v["git_commit"], build_type = v["build_type"];
  Captured printed = run_capture(shell_quote(bin("ajet-swarm").string()) + " --version");
  ASSERT_EQ(printed.status, 0) << printed.out;
  EXPECT_EQ(printed.out,
            "ajet-swarm " + version + " (commit " + commit + ", build type " + build_type + ")\n");
  EXPECT_TRUE(commit == "unknown" || std::regex_match(commit, std::regex("[0-9a-f]{12}")))
      << commit;
  EXPECT_FALSE(build_type.empty());  // this build sets CMAKE_BUILD_TYPE (Release by default)
  EXPECT_EQ(v["protocol"]["swarm_api"], 1);
  EXPECT_EQ(v["protocol"]["engine_rpc"], 1);
  EXPECT_EQ(v["protocol"]["episode_json"], 1);
  // /metrics says the same in ajet_build_info.
  Exposition m = scrape();
  EXPECT_EQ(m.at("ajet_build_info",
                 {{"version", version}, {"git_commit", commit}, {"build_type", build_type}}),
            1);
}

TEST_F(PrometheusTest, CountersMoveByWhatTheCallsDidAndEngineFiguresComeAndGo) {
  start();
  api_->boot(config_yaml(model_));
  Json claim = api_->claim("client-a");
  ASSERT_EQ(claim["success"], true) << claim.dump();
  const std::string key = claim["openai_api_key"], uuid = claim["episode_uuid"];

  Exposition before = scrape();
  EXPECT_EQ(before.at("ajet_engine_up"), 1);
  EXPECT_EQ(before.at("ajet_engine_status", {{"status", "ENGINE.ROLLING"}}), 1);
  EXPECT_EQ(before.at("ajet_episodes", {{"state", "claimed"}}), 1);
  EXPECT_EQ(before.at("ajet_episodes", {{"state", "registered"}}),
            7);  // max_env_worker 8, one claimed
  EXPECT_EQ(before.at("ajet_engine_sequences", {{"state", "running"}}), 0);
  EXPECT_EQ(before.at("ajet_engine_sequences", {{"state", "waiting"}}), 0);
  EXPECT_EQ(before.at("ajet_engine_kv_cache_blocks", {{"state", "used"}}) +
                before.at("ajet_engine_kv_cache_blocks", {{"state", "free"}}),
            64);
  EXPECT_EQ(before.at("ajet_engine_prefix_cache_hit_tokens_total"), 0);

  Usage total;
  for (const char* content :
       {"Hello there, agent.", "A second, longer message for the echo engine."}) {
    Usage u = chat_usage(*api_, key, content);
    total.prompt += u.prompt;
    total.completion += u.completion;
  }
  Usage streamed =
      streamed_usage(swarm_->url(), key, "Streamed words, counted when the stream ends.");
  total.prompt += streamed.prompt;
  total.completion += streamed.completion;

  Exposition after = scrape();
  auto delta = [&](const std::string& name, const PromLabels& labels = {}) {
    return after.at(name, labels) - before.at(name, labels);
  };
  const PromLabels chat_ok = {
      {"route", "/v1/chat/completions"}, {"method", "POST"}, {"code", "200"}};
  EXPECT_EQ(after.at("ajet_http_requests_total", chat_ok), 3);  // the streamed one too
  EXPECT_EQ(
      after.at("ajet_http_request_duration_seconds_count", {{"route", "/v1/chat/completions"}}), 3);
  EXPECT_EQ(delta("ajet_llm_calls_total", {{"outcome", "answered"}}), 3);
  EXPECT_EQ(delta("ajet_llm_calls_total", {{"outcome", "failed"}}), 0);
  EXPECT_EQ(delta("ajet_llm_call_duration_seconds_count"), 3);
  EXPECT_EQ(delta("ajet_prompt_tokens_total"), double(total.prompt));
  EXPECT_EQ(delta("ajet_completion_tokens_total"), double(total.completion));
  EXPECT_EQ(delta("ajet_engine_generated_tokens_total"), double(total.completion));
  EXPECT_GE(after.at("ajet_llm_calls_in_flight"),
            0);  // a call ends its flight when its last owner lets go

  ASSERT_EQ(api_->end("client-a", uuid, "task-1", 1.0).status, 200);
  Exposition ended = scrape();
  EXPECT_EQ(ended.at("ajet_episodes_ended_total", {{"outcome", "finished"}, {"type", "train"}}), 1);
  EXPECT_EQ(ended.at("ajet_episodes", {{"state", "claimed"}}), 0);
  EXPECT_EQ(ended.at("ajet_batch_episodes"), 1);
  EXPECT_EQ(ended.at("ajet_batch_episodes_target"), 4);  // train_batch_size 2 * num_repeat 2
  EXPECT_EQ(ended.at("ajet_batch_tasks"), 0);            // task-1 has 1 of its 2 episodes
  EXPECT_EQ(ended.at("ajet_batch_tasks_target"), 2);

  // abort_episode's cause (issue 39): counted by cause, none is "unspecified", a malformed one is a
  // 400.
  EXPECT_EQ(ended.at("ajet_episodes_aborted_total", {{"cause", "unspecified"}}), 0);
  auto abort = [&](const Json& claimed, const Json& cause) {
    Json body{{"client_uuid", "client-a"}, {"episode_uuid", claimed["episode_uuid"]}};
    if (!cause.is_null()) body["cause"] = cause;
    return api_->post("/abort_episode", body).status;
  };
  Json second = api_->claim("client-a"), third = api_->claim("client-a");
  EXPECT_EQ(abort(second, "Verifier timeout"), 400);
  EXPECT_EQ(abort(second, "verifier_timeout"), 200);
  EXPECT_EQ(abort(third, Json()), 200);
  Exposition aborted = scrape();
  EXPECT_EQ(aborted.at("ajet_episodes_aborted_total", {{"cause", "verifier_timeout"}}), 1);
  EXPECT_EQ(aborted.at("ajet_episodes_aborted_total", {{"cause", "unspecified"}}), 1);
  EXPECT_EQ(aborted.at("ajet_episodes_ended_total", {{"outcome", "aborted"}, {"type", "train"}}),
            2);

  // The engine stops: its figures go, the front's counters stay.
  ASSERT_EQ(api_->post("/stop_engine", Json::object()).status, 200);
  ASSERT_TRUE(eventually([&] { return api_->engine_status() == "ENGINE.OFFLINE"; }));
  Exposition stopped = scrape();
  EXPECT_EQ(stopped.at("ajet_engine_up"), 0);
  EXPECT_FALSE(stopped.has("ajet_engine_generated_tokens_total"));
  EXPECT_FALSE(stopped.has("ajet_engine_kv_cache_blocks"));
  EXPECT_EQ(stopped.at("ajet_engine_status", {{"status", "ENGINE.OFFLINE"}}), 1);
  EXPECT_EQ(stopped.at("ajet_completion_tokens_total"), after.at("ajet_completion_tokens_total"));
  EXPECT_EQ(stopped.at("ajet_episodes", {{"state", "registered"}}), 0);
}

}  // namespace
}  // namespace ajet::e2e
