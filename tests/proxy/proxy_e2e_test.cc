// The live-traffic proxy against the real ajet-swarm with the echo engine (its answer is the last
// user message): each application request becomes N = num_repeat episodes ended with the judge's
// rewards under one task id, or all aborted when the judge or an episode fails, and the application
// gets a well-formed answer of its own API either way. The proxy runs in-process (src/proxy),
// except in the test of the `ajet proxy` command line, which drives the binary with curl and the
// official OpenAI and Anthropic JS SDKs (tests/js/proxy_sdks.mjs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <set>

#include "client_e2e/client_e2e_util.h"
#include "common/fs.h"
#include "http/response.h"
#include "http/server.h"
#include "proxy/proxy.h"

namespace ajet::proxy {
namespace {

using namespace ajet::e2e;
using clients_test::EchoSwarm;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

constexpr int kN = 4;
constexpr const char* kInferenceKey = "front-inference-key";

const char* kFixedScores =
    "print(json.dumps({'scores': [0.1, 0.9, 0.3, 0.5][:len(doc['answers'])]}))\n";

// One echo front for the whole suite: every test uses task ids of its own.
class ProxyE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    front_ = new EchoSwarm(dir_->path() / "front", "debug", /*batch=*/200, /*repeat=*/kN, "",
                           {"--inference-key", kInferenceKey});
  }
  static void TearDownTestSuite() {
    delete front_;
    delete dir_;
  }

  // A judge command in the scratch dir: a Python script reading the JSON document on stdin.
  std::string judge_script(const std::string& name, const std::string& body) {
    const fs::path path = scratch_.path() / name;
    write_file_atomic(path, "import json, sys\ndoc = json.load(sys.stdin)\n" + body);
    return "python3 " + shell_quote(path.string());
  }

  // A judge that gives kFixedScores once the file `gate` exists (the test writes it).
  std::unique_ptr<Judge> gated_judge(const fs::path& gate) {
    return make_command_judge(
        {judge_script("judge.py", "import os, time\nwhile not os.path.exists(" +
                                      Json(gate.string()).dump() + "): time.sleep(0.02)\n" +
                                      kFixedScores),
         JudgeMode::kPointwise, std::chrono::seconds(120)});
  }

  // The rewards the front holds for `task_id` in the batch being collected.
  std::vector<double> front_rewards(const std::string& task_id) {
    Json pool = front_->pool();
    std::vector<double> out;
    if (pool["completed_tasks_rewards"].contains(task_id)) {
      for (const Json& r : pool["completed_tasks_rewards"][task_id]) out.push_back(r.get<double>());
    }
    return out;
  }

  static ScratchDir* dir_;
  static EchoSwarm* front_;
  ScratchDir scratch_;
};
ScratchDir* ProxyE2eTest::dir_ = nullptr;
EchoSwarm* ProxyE2eTest::front_ = nullptr;

// The proxy in-process on an ephemeral port.
class LiveProxy {
 public:
  LiveProxy(const std::string& front, std::unique_ptr<Judge> judge,
            ReturnPolicy policy = ReturnPolicy::kBest, const std::string& api_key = "",
            std::chrono::milliseconds claim_timeout = std::chrono::seconds(60), int n = 0,
            std::chrono::milliseconds stream_heartbeat = std::chrono::seconds(10),
            const std::string& front_inference_key = "") {
    ProxyOptions o;
    o.front_url = front;
    o.group.n = n > 0 ? n : front_num_repeat(front);
    o.group.policy = policy;
    o.group.claim_timeout = claim_timeout;
    o.group.upstream_timeout = std::chrono::seconds(60);
    o.group.stream_heartbeat = stream_heartbeat;
    o.api_key = api_key;
    o.front_inference_key = front_inference_key;
    o.max_body_bytes = 64 * 1024;
    proxy_ = std::make_unique<Proxy>(o, std::move(judge));
    http::ServerOptions s;
    s.port = 0;
    server_ = std::make_unique<http::HttpServer>(s, proxy_->router());
    server_->start();
    url_ = "http://127.0.0.1:" + std::to_string(server_->port());
  }
  ~LiveProxy() {
    server_->stop();
    server_->wait();
    proxy_->drain();
  }
  const std::string& url() const { return url_; }
  Json stats() { return http::HttpClient(url_).get("/proxy/stats").json(); }
  // Waits until `n` groups have ended (trained or dropped): after the answer under --return first.
  Json stats_after_groups(int64_t n) {
    Json s;
    eventually([&] {
      s = stats();
      return s["groups_trained"].get<int64_t>() + s["groups_dropped"].get<int64_t>() >= n;
    });
    return s;
  }
  http::ClientResponse post(const std::string& path, const Json& body, http::Headers headers = {}) {
    return http::HttpClient(url_).post_json(path, body, headers);
  }

 private:
  std::unique_ptr<Proxy> proxy_;
  std::unique_ptr<http::HttpServer> server_;
  std::string url_;
};

Json chat_body(const std::string& text, bool stream = false) {
  return {{"model", "gpt-4o"},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"stream", stream}};
}

TEST_F(ProxyE2eTest, ChatAnswerIsTheBestAndTheGroupTrainsWithTheJudgesRewards) {
  const fs::path seen = scratch_.path() / "seen.json";
  LiveProxy proxy(
      front_->url(),
      make_command_judge(
          {judge_script("judge.py", "open(" + Json(seen.string()).dump() +
                                        ", 'w').write(json.dumps(doc))\n" + kFixedScores),
           JudgeMode::kPointwise, std::chrono::seconds(60)}));
  http::ClientResponse r = proxy.post("/v1/chat/completions", chat_body("What is 6 * 7?"),
                                      {{"X-AJet-Task-Id", "chat-best"}});
  ASSERT_EQ(r.status, 200) << r.body;
  Json answer = r.json();
  EXPECT_EQ(answer["object"], "chat.completion");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], "What is 6 * 7?");

  Json stats = proxy.stats_after_groups(1);
  EXPECT_EQ(stats["groups_trained"], 1) << stats.dump();
  EXPECT_EQ(stats["episodes_ended"], kN);
  const Json& group = stats["recent_groups"][0];
  EXPECT_EQ(group["task_id"], "chat-best");
  EXPECT_EQ(group["returned"], 1);  // the judge's best: 0.9
  EXPECT_EQ(group["episode_uuids"].size(), size_t(kN));
  EXPECT_THAT(front_rewards("chat-best"), UnorderedElementsAreArray({0.1, 0.9, 0.3, 0.5}));

  // What the judge read: the conversation and the N answers, as text.
  Json doc = parse_json(read_file(seen), "judge input");
  EXPECT_EQ(doc["api"], "chat");
  EXPECT_EQ(doc["question"], "user: What is 6 * 7?");
  EXPECT_EQ(doc["answers"], Json(std::vector<std::string>(kN, "What is 6 * 7?")));
  EXPECT_EQ(doc["request"]["model"], "gpt-4o");
}

TEST_F(ProxyE2eTest, StreamsOfEveryApiComeBackWellFormed) {
  LiveProxy proxy(front_->url(),
                  make_command_judge({judge_script("judge.py", kFixedScores), JudgeMode::kPointwise,
                                      std::chrono::seconds(60)}));
  http::ClientResponse chat = proxy.post("/v1/chat/completions", chat_body("Hi there", true),
                                         {{"X-AJet-Task-Id", "stream-chat"}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_THAT(chat.headers.get_or("Content-Type", ""), HasSubstr("text/event-stream"));
  EXPECT_EQ(answer_text(Api::kChat, chat.body, true), "Hi there");
  EXPECT_THAT(chat.body, HasSubstr("data: [DONE]"));

  http::ClientResponse responses =
      proxy.post("/v1/responses", {{"model", "m"}, {"input", "Hello Responses"}, {"stream", true}},
                 {{"X-AJet-Task-Id", "stream-responses"}});
  ASSERT_EQ(responses.status, 200) << responses.body;
  EXPECT_EQ(answer_text(Api::kResponses, responses.body, true), "Hello Responses");

  Json messages_body = {{"model", "claude"},
                        {"max_tokens", 64},
                        {"messages", {{{"role", "user"}, {"content", "Hello Messages"}}}},
                        {"stream", true}};
  http::ClientResponse messages =
      proxy.post("/v1/messages", messages_body, {{"X-AJet-Task-Id", "stream-messages"}});
  ASSERT_EQ(messages.status, 200) << messages.body;
  EXPECT_EQ(answer_text(Api::kMessages, messages.body, true), "Hello Messages");

  // And not streamed.
  messages_body["stream"] = false;
  http::ClientResponse plain = proxy.post("/v1/messages", messages_body);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.json()["type"], "message");
  EXPECT_EQ(answer_text(Api::kMessages, plain.body, false), "Hello Messages");

  Json stats = proxy.stats_after_groups(4);
  EXPECT_EQ(stats["groups_trained"], 4) << stats.dump();
  for (const char* task : {"stream-chat", "stream-responses", "stream-messages"}) {
    EXPECT_EQ(front_rewards(task).size(), size_t(kN)) << task;
  }
}

TEST_F(ProxyE2eTest, RequestsWithoutATaskIdAreEachTheirOwnTaskAndSharedIdsShareAGroup) {
  LiveProxy proxy(front_->url(),
                  make_command_judge({judge_script("judge.py", kFixedScores), JudgeMode::kListwise,
                                      std::chrono::seconds(60)}));
  ASSERT_EQ(proxy.post("/v1/chat/completions", chat_body("one")).status, 200);
  ASSERT_EQ(proxy.post("/v1/chat/completions", chat_body("two")).status, 200);
  Json same = chat_body("three");
  same["metadata"] = {{"task_id", "shared-task"}};
  ASSERT_EQ(proxy.post("/v1/chat/completions", same).status, 200);
  ASSERT_EQ(proxy.post("/v1/chat/completions", same).status, 200);

  Json stats = proxy.stats_after_groups(4);
  ASSERT_EQ(stats["groups_trained"], 4) << stats.dump();
  std::set<std::string> own;  // the task ids the proxy made (groups end in any order)
  for (const Json& g : stats["recent_groups"]) {
    if (g["task_id"] != "shared-task") own.insert(g["task_id"].get<std::string>());
  }
  ASSERT_EQ(own.size(), 2u) << stats.dump();
  const std::string first = *own.begin();
  EXPECT_THAT(first, ::testing::StartsWith("proxy-"));
  // Listwise: scores 0.1, 0.9, 0.3, 0.5 rank as 4th, 1st, 3rd, 2nd → -1, 1, -1/3, 1/3.
  std::vector<double> rewards = front_rewards(first);
  ASSERT_EQ(rewards.size(), size_t(kN));
  EXPECT_THAT(rewards,
              UnorderedElementsAreArray(
                  {::testing::DoubleNear(-1, 1e-9), ::testing::DoubleNear(1, 1e-9),
                   ::testing::DoubleNear(-1.0 / 3, 1e-9), ::testing::DoubleNear(1.0 / 3, 1e-9)}));
  EXPECT_EQ(front_rewards("shared-task").size(), size_t(2 * kN));
}

TEST_F(ProxyE2eTest, AFailingJudgeLosesNoRequestAndDropsTheGroup) {
  struct Case {
    std::string command, kind;
    std::chrono::milliseconds timeout;
  };
  // Only the hanging judge meets its timeout: the others have far more time than they use.
  const std::vector<Case> cases = {
      {judge_script("crash.py", "raise SystemExit(3)\n"), "crash", std::chrono::seconds(120)},
      {judge_script("malformed.py", "print('the second one is best')\n"), "malformed",
       std::chrono::seconds(120)},
      {judge_script("hang.py", "import time\ntime.sleep(600)\n"), "timeout",
       std::chrono::milliseconds(1500)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind);
    LiveProxy proxy(front_->url(),
                    make_command_judge({c.command, JudgeMode::kPointwise, c.timeout}));
    const std::string task = "judge-" + c.kind;
    http::ClientResponse r = proxy.post("/v1/chat/completions", chat_body("still answered", true),
                                        {{"X-AJet-Task-Id", task}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(answer_text(Api::kChat, r.body, true), "still answered");
    Json stats = proxy.stats_after_groups(1);
    EXPECT_EQ(stats["groups_trained"], 0);
    EXPECT_EQ(stats["groups_dropped_by_reason"]["judge_failed"], 1) << stats.dump();
    EXPECT_EQ(stats["judge_failures_by_kind"][c.kind], 1) << stats.dump();
    EXPECT_EQ(stats["episodes_aborted"], kN);
    EXPECT_GE(stats["recent_groups"][0]["returned"], 0);  // the first answer ready went back
    EXPECT_TRUE(front_rewards(task).empty());             // nothing of the group is trained
    const std::string metrics = http::HttpClient(proxy.url()).get("/metrics").body;
    EXPECT_EQ(sample_value(metrics, "ajet_proxy_judge_failures_total{kind=\"" + c.kind + "\"}"), 1)
        << metrics;
  }
}

TEST_F(ProxyE2eTest, FirstReadyAnswerGoesBackBeforeTheJudgeRuns) {
  // The judge waits for a file the test writes only after the application has its answer.
  const fs::path gate = scratch_.path() / "gate";
  LiveProxy proxy(front_->url(), gated_judge(gate), ReturnPolicy::kFirst);
  http::ClientResponse r = proxy.post("/v1/chat/completions", chat_body("fast please"),
                                      {{"X-AJet-Task-Id", "first-ready"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["choices"][0]["message"]["content"], "fast please");
  EXPECT_EQ(proxy.stats()["groups_trained"], 0);  // the judge is still waiting
  write_file_atomic(gate, "go");
  Json stats = proxy.stats_after_groups(1);
  EXPECT_EQ(stats["groups_trained"], 1) << stats.dump();
  EXPECT_EQ(front_rewards("first-ready").size(), size_t(kN));
}

TEST_F(ProxyE2eTest, AStreamThatWaitsGetsCommentsUntilItsAnswer) {
  // The judge waits for a file the test writes once the proxy has sent two heartbeats.
  const fs::path gate = scratch_.path() / "gate";
  LiveProxy proxy(front_->url(), gated_judge(gate), ReturnPolicy::kBest, "",
                  std::chrono::seconds(60), 0, std::chrono::milliseconds(20));
  auto pending = std::async(std::launch::async, [&] {
    return proxy.post("/v1/chat/completions", chat_body("worth the wait", true),
                      {{"X-AJet-Task-Id", "heartbeat"}});
  });
  eventually([&] { return proxy.stats()["stream_heartbeats"].get<int64_t>() >= 2; });
  write_file_atomic(gate, "go");
  http::ClientResponse r = pending.get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.headers.get_or("Content-Type", ""), HasSubstr("text/event-stream"));
  EXPECT_EQ(r.body.rfind(": ajet proxy: the answer is not chosen yet\n\n", 0), 0u) << r.body;
  EXPECT_EQ(answer_text(Api::kChat, r.body, true), "worth the wait");
  EXPECT_THAT(r.body, HasSubstr("data: [DONE]"));
  Json stats = proxy.stats_after_groups(1);
  EXPECT_EQ(stats["groups_trained"], 1) << stats.dump();
  EXPECT_EQ(stats["recent_groups"][0]["returned"], 1);  // the judge's best, after the comments
  const std::string metrics = http::HttpClient(proxy.url()).get("/metrics").body;
  EXPECT_GE(sample_value(metrics, "ajet_proxy_stream_heartbeats_total"), 2) << metrics;
}

TEST_F(ProxyE2eTest, AnErrorAfterTheStreamOpenedIsItsLastEventInTheApisShape) {
  // No front: the claim retries for 3 s while the heartbeat (every 10 ms) opens the stream.
  ClosedPort nobody;
  LiveProxy proxy(
      nobody.url(), make_command_judge({"true", JudgeMode::kPointwise, std::chrono::seconds(5)}),
      ReturnPolicy::kBest, "", std::chrono::seconds(3), kN, std::chrono::milliseconds(10));
  http::ClientResponse r = proxy.post(
      "/v1/messages",
      {{"max_tokens", 5}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.rfind(": ajet proxy", 0), 0u) << r.body;
  const size_t event = r.body.find("event: error\ndata: ");
  ASSERT_NE(event, std::string::npos) << r.body;
  Json error = parse_json(r.body.substr(event + 19), "the error event");
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "overloaded_error");
  EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr("the model is busy"));
  Json stats = proxy.stats_after_groups(1);
  EXPECT_EQ(stats["groups_dropped_by_reason"]["claim_failed"], 1) << stats.dump();
}

TEST_F(ProxyE2eTest, TheFrontsRefusalGoesBackInTheApplicationsShapeAndNothingTrains) {
  LiveProxy proxy(front_->url(),
                  make_command_judge({judge_script("judge.py", kFixedScores), JudgeMode::kPointwise,
                                      std::chrono::seconds(60)}));
  Json bad = chat_body("x");
  bad["top_p"] = 0;  // the front refuses: field 'top_p' must be in (0, 1]
  http::ClientResponse r = proxy.post("/v1/chat/completions", bad, {{"X-AJet-Task-Id", "refused"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("top_p"));
  Json stats = proxy.stats_after_groups(1);
  EXPECT_EQ(stats["groups_dropped_by_reason"]["upstream_error"], 1) << stats.dump();
  EXPECT_EQ(stats["episodes_aborted"], kN);
  EXPECT_TRUE(front_rewards("refused").empty());
}

TEST_F(ProxyE2eTest, BadRequestsGetErrorsOfTheirOwnApi) {
  LiveProxy proxy(front_->url(),
                  make_command_judge({"true", JudgeMode::kPointwise, std::chrono::seconds(5)}),
                  ReturnPolicy::kBest, "app-key");
  // A client per request: a refusal at the head closes its connection.
  auto post = [&](const std::string& path, const std::string& body, const http::Headers& h) {
    return http::HttpClient(proxy.url()).request("POST", path, h, body);
  };
  // Without the key: 401, before the body is read.
  http::ClientResponse r = post("/v1/chat/completions", chat_body("x").dump(), {});
  EXPECT_EQ(r.status, 401);
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("--api-key"));
  r = post("/v1/messages", R"({"max_tokens": 5})", {{"x-api-key", "wrong"}});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.json()["type"], "error");
  const http::Headers key = {{"Authorization", "Bearer app-key"}};
  r = post("/v1/chat/completions", "{not json", key);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("invalid JSON"));
  r = post("/v1/messages", R"({"messages": []})", {{"x-api-key", "app-key"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["type"], "error");
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("'messages'"));
  r = post("/v1/responses", Json({{"input", std::string(70 * 1024, 'x')}}).dump(), key);
  EXPECT_EQ(r.status, 413);
  r = http::HttpClient(proxy.url()).get("/v1/models", key);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["data"][0]["id"], "agentjet");
  // The proxy keeps serving, and nothing was claimed for the refused requests.
  EXPECT_EQ(http::HttpClient(proxy.url()).get("/health").status, 200);
  EXPECT_EQ(proxy.stats()["episodes_aborted"], 0);
}

TEST_F(ProxyE2eTest, AnUnreachableFrontIsA503OfTheApplicationsApi) {
  ClosedPort nobody;
  LiveProxy proxy(nobody.url(),
                  make_command_judge({"true", JudgeMode::kPointwise, std::chrono::seconds(5)}),
                  ReturnPolicy::kBest, "", std::chrono::seconds(1), kN);
  http::ClientResponse r = proxy.post(
      "/v1/messages", {{"max_tokens", 5}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_TRUE(r.headers.has("Retry-After"));
  EXPECT_EQ(r.json()["error"]["type"], "overloaded_error");
  Json stats = proxy.stats_after_groups(1);
  EXPECT_EQ(stats["groups_dropped_by_reason"]["claim_failed"], 1) << stats.dump();
  EXPECT_EQ(stats["answers_by_status"]["503"], 1);
}

TEST_F(ProxyE2eTest, CountTokensIsTheFrontsCountUnderItsInferenceKeyAndClaimsNothing) {
  auto judge = [&] {
    return make_command_judge({"true", JudgeMode::kPointwise, std::chrono::seconds(5)});
  };
  const Json shortish = {{"model", "claude"},
                         {"messages", {{{"role", "user"}, {"content", "two words"}}}}};
  Json longer = shortish;
  longer["messages"][0]["content"] = "a longer question with many more words in it than before";
  // The front counts under its inference key (and under an episode's key, as before).
  auto front_count = [&](const Json& body) {
    http::ClientResponse r =
        http::HttpClient(front_->url())
            .post_json("/v1/messages/count_tokens", body, {{"x-api-key", kInferenceKey}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json()["input_tokens"].get<int64_t>();
  };
  const int64_t short_n = front_count(shortish), long_n = front_count(longer);
  EXPECT_GT(short_n, 0);
  EXPECT_GT(long_n, short_n);

  LiveProxy proxy(front_->url(), judge(), ReturnPolicy::kBest, "", std::chrono::seconds(60), 0,
                  std::chrono::seconds(10), kInferenceKey);
  http::ClientResponse r = proxy.post("/v1/messages/count_tokens", shortish);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["input_tokens"], short_n);
  EXPECT_EQ(proxy.post("/v1/messages/count_tokens", longer).json()["input_tokens"], long_n);
  // A body the front refuses comes back in Anthropic's shape, naming the field.
  r = proxy.post("/v1/messages/count_tokens", {{"messages", "not a list"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["type"], "error");
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("messages"));
  // Counting claims no episode: nothing is aborted, no group forms.
  Json stats = proxy.stats();
  EXPECT_EQ(stats["episodes_aborted"], 0);
  EXPECT_EQ(stats["groups_trained"], 0);
  EXPECT_EQ(stats["groups_dropped"], 0);
  EXPECT_EQ(stats["answers_by_status"]["200"], 2) << stats.dump();

  // Without the key the route says how to serve it; with a wrong one, which flags must agree.
  LiveProxy keyless(front_->url(), judge());
  r = keyless.post("/v1/messages/count_tokens", shortish);
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.json()["type"], "error");
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("--front-inference-key"));
  LiveProxy wrong(front_->url(), judge(), ReturnPolicy::kBest, "", std::chrono::seconds(60), 0,
                  std::chrono::seconds(10), "not-the-key");
  r = wrong.post("/v1/messages/count_tokens", shortish);
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_THAT(r.json()["error"]["message"].get<std::string>(), HasSubstr("--inference-key"));
  EXPECT_EQ(http::HttpClient(wrong.url()).get("/health").status, 200);
}

TEST_F(ProxyE2eTest, AJudgeModelScoresPointwiseAndListwise) {
  // A stand-in judge model: pointwise it gives every answer "Score: 7"; listwise it ranks
  // [2,1,4,3].
  http::Router judge_routes;
  judge_routes.post("/v1/chat/completions", [](http::Request request, http::Respond respond) {
    const Json body = parse_json(request.body, "judge request");
    const std::string prompt = body["messages"][0]["content"];
    const std::string reply = prompt.find("Answer 4:") != std::string::npos
                                  ? "Ranking: [2, 1, 4, 3]"
                                  : "Reasonable. Score: 7";
    respond(http::json_response(
        {{"choices", {{{"message", {{"role", "assistant"}, {"content", reply}}}}}}}));
  });
  http::HttpServer judge_server({}, std::move(judge_routes));
  judge_server.start();
  const std::string judge_url = "http://127.0.0.1:" + std::to_string(judge_server.port()) + "/v1";
  for (JudgeMode mode : {JudgeMode::kPointwise, JudgeMode::kListwise}) {
    ModelJudgeOptions o;
    o.url = judge_url;
    o.mode = mode;
    LiveProxy proxy(front_->url(), make_model_judge(o));
    const std::string task = mode == JudgeMode::kPointwise ? "model-pointwise" : "model-listwise";
    ASSERT_EQ(proxy.post("/v1/chat/completions", chat_body("judge me"), {{"X-AJet-Task-Id", task}})
                  .status,
              200);
    Json stats = proxy.stats_after_groups(1);
    ASSERT_EQ(stats["groups_trained"], 1) << stats.dump();
    if (mode == JudgeMode::kPointwise) {
      EXPECT_EQ(front_rewards(task), std::vector<double>(kN, 7.0));
    } else {
      EXPECT_EQ(stats["recent_groups"][0]["returned"], 1);  // answer 2 ranked first
      EXPECT_THAT(front_rewards(task),
                  UnorderedElementsAreArray(
                      {::testing::DoubleNear(1, 1e-9), ::testing::DoubleNear(1.0 / 3, 1e-9),
                       ::testing::DoubleNear(-1.0 / 3, 1e-9), ::testing::DoubleNear(-1, 1e-9)}));
    }
  }
  judge_server.stop();
}

TEST_F(ProxyE2eTest, AJudgeModelServedByASwarmFrontAnswersFromEvalEpisodes) {
  // A second echo front serves the judge: its answer is the prompt, so the template's own last line
  // is the score.
  EchoSwarm judge_front(scratch_.path() / "judge-front", "debug", 200, 1);
  ModelJudgeOptions o;
  o.swarm_url = judge_front.url();
  o.prompt_template = "Grade this: {{answer}}\nScore: 6";
  LiveProxy proxy(front_->url(), make_model_judge(o));
  ASSERT_EQ(proxy
                .post("/v1/chat/completions", chat_body("judged by a front"),
                      {{"X-AJet-Task-Id", "model-swarm"}})
                .status,
            200);
  Json stats = proxy.stats_after_groups(1);
  ASSERT_EQ(stats["groups_trained"], 1) << stats.dump();
  EXPECT_EQ(front_rewards("model-swarm"), std::vector<double>(kN, 6.0));
  // The judge's episodes were eval episodes, aborted: nothing of the judge trains.
  Json pool = judge_front.pool();
  EXPECT_EQ(pool["completed_episodes"], 0) << pool.dump();
  EXPECT_EQ(pool["claimed_episodes"], 0) << pool.dump();
}

TEST_F(ProxyE2eTest, TheCommandLineServesCurlAndTheOpenAiAndAnthropicSdks) {
  // The judge takes 0.3 s and the heartbeat comes every 10 ms: the SDKs' streams open with SSE
  // comments before their events, which each SDK must skip.
  const std::string judge =
      judge_script("judge.py", "import time\ntime.sleep(0.3)\n" + std::string(kFixedScores));
  Subprocess proc = Subprocess::spawn(SpawnOptions{
      {bin("ajet").string(), "proxy", "--front", front_->url(), "--listen", "127.0.0.1:0",
       "--judge-command", judge, "--return", "best", "--stream-heartbeat", "0.01"},
      {{"AJET_INFERENCE_KEY", kInferenceKey}},  // the count_tokens route's key
      {}});
  std::string ready;
  std::string output;
  eventually(
      [&] {
        proc.wait_some(std::chrono::milliseconds(50), [&](std::string line) {
          output += line + "\n";
          if (line.find("ajet proxy ready: ") != std::string::npos) ready = line;
        });
        return !ready.empty() || proc.exited();
      },
      std::chrono::seconds(30));
  ASSERT_FALSE(ready.empty()) << output;
  EXPECT_THAT(ready, HasSubstr("n 4"));
  const std::string url = ready.substr(18, ready.find(' ', 18) - 18);

  Captured curl =
      run_capture("curl -s " + url + "/v1/chat/completions -H 'X-AJet-Task-Id: cli-curl' -d " +
                  shell_quote(chat_body("from curl").dump()));
  ASSERT_EQ(curl.status, 0) << curl.out;
  EXPECT_EQ(parse_json(curl.out, "curl answer")["choices"][0]["message"]["content"], "from curl");

  std::string why;
  if (auto node_modules = clients_test::npm_node_modules(&why)) {
    Captured node = run_capture("node " + shell_quote(source("tests/js/proxy_sdks.mjs").string()) +
                                " " + shell_quote(node_modules->string()) + " " + url + "/v1");
    EXPECT_EQ(node.status, 0) << node.out;
    EXPECT_THAT(node.out, HasSubstr("\"ok\":true")) << node.out;
    // Its three streamed requests waited for the judge with comments.
    EXPECT_GE(http::HttpClient(url).get("/proxy/stats").json()["stream_heartbeats"].get<int64_t>(),
              3);
  } else {
    std::cerr << "SKIPPED LOUDLY (the JS SDK part): " << why << "\n";
  }
  Json stats = http::HttpClient(url).get("/proxy/stats").json();
  EXPECT_GE(stats["groups_trained"].get<int64_t>() + stats["in_flight"].get<int64_t>(), 1);
  proc.signal_group(SIGTERM);
  const int status = proc.wait([&](std::string line) { output += line + "\n"; });
  EXPECT_TRUE(exited_cleanly(status)) << describe_exit(status) << "\n" << output;
  EXPECT_EQ(front_rewards("cli-curl").size(), size_t(kN));
}

}  // namespace
}  // namespace ajet::proxy
