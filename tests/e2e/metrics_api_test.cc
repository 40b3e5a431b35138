// POST /log_metrics and GET /metrics_history on the real ajet-swarm (echo engine): the admin token,
// every refusal naming what is wrong, the exact shapes the dashboard reads, a trained batch's
// numbers under their documented names, and TensorBoard event files where the config says (and none
// when it says no). The event file's content is checked by an independent reader in
// tests/tools/tfevents_reader_test.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

const char* kToken = "metrics-admin";

class MetricsApiTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}) {
    model_ = fixture(false).tokenizer;
    swarm_ = std::make_unique<SwarmProcess>(
        SwarmProcess::Options{dir_ / "server", bin("ajet-echo-engine"), kToken, std::move(extra)});
    api_ = std::make_unique<Api>(swarm_->url());
  }
  http::ClientResponse log(const Json& body) { return api_->post("/log_metrics", body, admin_); }
  // The 400 message of a refused /log_metrics body.
  std::string refusal(const Json& body) {
    http::ClientResponse r = log(body);
    EXPECT_EQ(r.status, 400) << body.dump().substr(0, 200) << " -> " << r.body;
    return r.json()["error"]["message"].get<std::string>();
  }
  Json history(const std::string& query = "") {
    http::ClientResponse r = api_->get("/metrics_history" + query, admin_);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json();
  }
  // Event files under `dir`/tensorboard.
  std::vector<fs::path> event_files(const fs::path& dir) {
    std::vector<fs::path> out;
    if (!fs::exists(dir / "tensorboard")) return out;
    for (const auto& e : fs::directory_iterator(dir / "tensorboard")) out.push_back(e.path());
    return out;
  }
  fs::path experiment_dir() {
    return api_->get("/get_server_experiment_dir")
        .json()["server_experiment_dir"]
        .get<std::string>();
  }
  std::string episode(const std::string& task, double reward) {
    Json e = api_->claim("client-t");
    EXPECT_TRUE(e.value("success", false)) << e.dump();
    EXPECT_EQ(api_->chat(e["openai_api_key"], user_chat("answer " + task)).status, 200);
    EXPECT_EQ(api_->end("client-t", e["episode_uuid"], task, reward).status, 200);
    return e["episode_uuid"];
  }
  ScratchDir dir_;
  fs::path model_;
  http::Headers admin_{{"Authorization", std::string("Bearer ") + kToken}};
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

TEST_F(MetricsApiTest, BothRoutesNeedTheAdminToken) {
  start();
  auto posted = api_->post("/log_metrics", Json{{"step", 0}, {"metrics", {{"a", 1}}}});
  EXPECT_EQ(posted.status, 401);
  EXPECT_THAT(posted.body, HasSubstr("POST /log_metrics needs the admin token"));
  auto read = api_->get("/metrics_history");
  EXPECT_EQ(read.status, 401);
  EXPECT_THAT(read.body, HasSubstr("GET /metrics_history needs the admin token"));
  EXPECT_EQ(api_->get("/metrics_history", http::Headers{{"Authorization", "Bearer wrong"}}).status,
            401);
  EXPECT_TRUE(history()["names"].empty());  // nothing was written by the refused post
}

TEST_F(MetricsApiTest, EveryBadBodyIsA400NamingWhatIsWrong) {
  start({"--max-json-mb", "0.015625"});  // 16 KiB JSON bodies
  const Json one = {{"a", 1}};
  EXPECT_THAT(refusal(Json{{"metrics", one}}), HasSubstr("'step' is required"));
  EXPECT_THAT(refusal(Json{{"step", -1}, {"metrics", one}}),
              HasSubstr("'step' must be a non-negative integer, got -1"));
  EXPECT_THAT(refusal(Json{{"step", "3"}, {"metrics", one}}), HasSubstr("got \"3\""));
  EXPECT_THAT(refusal(Json{{"step", 1.5}, {"metrics", one}}), HasSubstr("got 1.5"));
  EXPECT_THAT(refusal(Json{{"step", 1}}),
              HasSubstr("'metrics' must be an object of name -> number, got nothing"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", Json::array({1})}}), HasSubstr("got array"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", Json::object()}}),
              HasSubstr("'metrics' is empty"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", one}, {"wall_time", 5}}),
              HasSubstr("unknown field 'wall_time'"));
  EXPECT_THAT(
      refusal(Json{{"step", 1}, {"metrics", {{"has space", 1}}}}),
      HasSubstr("metric name 'has space' must be 1-200 characters of A-Z a-z 0-9 _ . / @ : -"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", {{"", 1}}}}), HasSubstr("metric name ''"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", {{std::string(201, 'n'), 1}}}}),
              HasSubstr("is 201 characters long; at most 200"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", {{"ok", 1}, {"text", "high"}}}}),
              HasSubstr("metrics['text'] must be a finite number, got \"high\""));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", {{"flag", true}}}}),
              HasSubstr("metrics['flag'] must be a finite number, got true"));
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", {{"gone", nullptr}}}}), HasSubstr("got null"));
  Json many = Json::object();
  for (int i = 0; i < 1001; ++i) many["m" + std::to_string(i)] = i;
  EXPECT_THAT(refusal(Json{{"step", 1}, {"metrics", many}}),
              HasSubstr("holds 1001 names; at most 1000 per request"));
  many.erase("m1000");
  EXPECT_EQ(log(Json{{"step", 1}, {"metrics", many}}).status, 200);  // exactly 1000 is fine
  // Not JSON, not an object, too big: the JSON routes' own answers.
  auto garbage = curl("POST", swarm_->url() + "/log_metrics", "{not json",
                      {std::string("Authorization: Bearer ") + kToken});
  EXPECT_EQ(garbage.status, 400) << garbage.body;
  Json huge = {{"step", 1}, {"metrics", {{"a", 1}}}, {"pad", std::string(20000, 'x')}};
  auto big = log(huge);
  EXPECT_EQ(big.status, 413) << big.body;
  // A refused body wrote nothing: only the 1000 names of the accepted one are there.
  Json names = history()["names"];
  EXPECT_EQ(names.size(), 1000u);
  for (const Json& n : names) EXPECT_NE(n["name"], "ok");
}

TEST_F(MetricsApiTest, HistoryShapesOrderAndLimits) {
  start();
  auto r = log(
      Json{{"step", 5}, {"metrics", {{"val/pass_at_4@calc", 0.5}, {"rollout/reward_mean", 0.25}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json(), (Json{{"success", true}, {"step", 5}, {"written", 2}}));
  ASSERT_EQ(log(Json{{"step", 2}, {"metrics", {{"rollout/reward_mean", 0.125}}}}).status, 200);
  ASSERT_EQ(log(Json{{"step", 5}, {"metrics", {{"rollout/reward_mean", 0.375}}}}).status, 200);

  Json listed = history();
  ASSERT_EQ(listed["names"].size(), 2u) << listed.dump();
  EXPECT_EQ(listed["names"][0],
            (Json{{"name", "rollout/reward_mean"}, {"points", 3}, {"last_step", 5}}));
  EXPECT_EQ(listed["names"][1],
            (Json{{"name", "val/pass_at_4@calc"}, {"points", 1}, {"last_step", 5}}));
  EXPECT_EQ(listed["global_step"], 0);
  EXPECT_EQ(listed.size(), 2u);  // names and global_step, nothing else

  Json series = history("?name=rollout/reward_mean,no/such,val/pass_at_4@calc");
  ASSERT_TRUE(series["series"].is_object()) << series.dump();
  const Json& reward = series["series"]["rollout/reward_mean"];
  ASSERT_EQ(reward.size(), 3u) << series.dump();
  // [step, value, unix_time] by step, then by insertion
  EXPECT_EQ(reward[0][0], 2);
  EXPECT_EQ(reward[0][1], 0.125);
  EXPECT_EQ(reward[1][0], 5);
  EXPECT_EQ(reward[1][1], 0.25);
  EXPECT_EQ(reward[2][1], 0.375);
  EXPECT_GT(reward[0][2].get<double>(), 1.7e9);  // unix seconds
  EXPECT_EQ(series["series"]["no/such"], Json::array());
  EXPECT_EQ(series["series"]["val/pass_at_4@calc"].size(), 1u);
  EXPECT_EQ(series["global_step"], 0);
  EXPECT_EQ(
      history("?name=rollout/reward_mean&after_step=2")["series"]["rollout/reward_mean"].size(),
      2u);
  EXPECT_EQ(
      history("?name=rollout/reward_mean&after_step=5")["series"]["rollout/reward_mean"].size(),
      0u);

  std::string many = "a0";
  for (int i = 1; i < 33; ++i) many += ",a" + std::to_string(i);
  auto too_many = api_->get("/metrics_history?name=" + many, admin_);
  EXPECT_EQ(too_many.status, 400);
  EXPECT_THAT(too_many.body, HasSubstr("33 names asked; at most 32 per request"));
  auto bad_step = api_->get("/metrics_history?name=a&after_step=soon", admin_);
  EXPECT_EQ(bad_step.status, 400);
  EXPECT_THAT(bad_step.body, HasSubstr("after_step must be an integer, got 'soon'"));
  auto empty_name = api_->get("/metrics_history?name=a,,b", admin_);
  EXPECT_EQ(empty_name.status, 400);
  EXPECT_THAT(empty_name.body, HasSubstr("name '' is not a metric name"));

  // Before any start_engine there is no experiment directory: the server directory stands in.
  EXPECT_EQ(event_files(dir_ / "server").size(), 1u);
}

TEST_F(MetricsApiTest, ATrainedBatchRecordsEveryNumberAndTheEventFileHasThem) {
  start();
  std::string yaml = config_yaml(model_);
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  api_->boot(yaml, admin_);
  for (const std::string task : {"task-a", "task-b"}) {
    episode(task, 1.0);
    episode(task, 0.0);
  }
  ASSERT_TRUE(eventually([&] { return api_->status()["global_step"] == 1; }))
      << api_->status().dump();
  Json listed = history();
  std::map<std::string, Json> names;
  for (const Json& n : listed["names"]) names[n["name"].get<std::string>()] = n;
  for (const char* name :
       {"rollout/reward_mean", "rollout/reward_std", "rollout/episodes", "rollout/tasks",
        "rollout/staleness_max", "rollout/client/client-t/episodes",
        "rollout/client/client-t/share", "train/loss", "train/policy_version",
        "train/trained_tokens", "merge/calls", "merge/compression_ratio"}) {
    ASSERT_TRUE(names.count(name)) << name << " missing from " << listed.dump();
    EXPECT_EQ(names[name]["last_step"], 0) << name;  // the batch trained at global step 0
    EXPECT_EQ(names[name]["points"], 1) << name;
  }
  EXPECT_EQ(listed["global_step"], 1);
  Json series = history("?name=rollout/reward_mean,rollout/episodes,train/policy_version");
  EXPECT_EQ(series["series"]["rollout/reward_mean"][0][1], 0.5);
  EXPECT_EQ(series["series"]["rollout/episodes"][0][1], 4.0);
  EXPECT_EQ(series["series"]["train/policy_version"][0][1], 1.0);

  // The event file lives in the experiment directory (and only there), and grows with a posted
  // write.
  const fs::path exp = experiment_dir();
  std::vector<fs::path> files = event_files(exp);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(event_files(dir_ / "server").empty());
  // The batch's numbers reach the file through the sink's own thread: wait for them to show.
  ASSERT_TRUE(
      eventually([&] { return read_file(files[0]).find("train/loss") != std::string::npos; }));
  const auto before = fs::file_size(files[0]);
  ASSERT_EQ(log(Json{{"step", 1}, {"metrics", {{"val/greedy_success", 0.75}}}}).status, 200);
  EXPECT_GT(fs::file_size(files[0]), before);  // answered after the event was flushed
  EXPECT_NE(read_file(files[0]).find("val/greedy_success"), std::string::npos);
}

TEST_F(MetricsApiTest, ALoggerListWithoutTensorboardWritesNoEventFiles) {
  start();
  api_->boot(config_yaml(model_, "  trainer_common:\n    logger: [console, jsonl]\n"), admin_);
  episode("task-a", 1.0);
  episode("task-a", 0.0);
  episode("task-b", 1.0);
  episode("task-b", 1.0);  // a full debug batch: recorded
  ASSERT_EQ(log(Json{{"step", 0}, {"metrics", {{"val/greedy_success", 0.5}}}}).status, 200);
  ASSERT_TRUE(eventually([&] {
    Json names = history()["names"];
    return std::any_of(names.begin(), names.end(),
                       [](const Json& n) { return n["name"] == "rollout/reward_mean"; });
  }));
  EXPECT_EQ(history("?name=rollout/reward_mean")["series"]["rollout/reward_mean"][0][1], 0.75);
  EXPECT_TRUE(event_files(experiment_dir()).empty());
  EXPECT_TRUE(event_files(dir_ / "server").empty());
}

}  // namespace
}  // namespace ajet::e2e
