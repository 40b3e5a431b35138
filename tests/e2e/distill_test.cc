// One front as another front's teacher (docs/training.md "Distillation"): the teacher serves
// /v1/completions with vLLM's prompt_logprobs to its --inference-key (untracked: no episode), and
// a training front whose config names it (and whose --teacher-url allows it) sends every sample of
// its batch there before the real train step; the step's metrics count the teacher's tokens. A
// config naming a teacher the front was not started with is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

http::Headers bearer(const std::string& key) {
  http::Headers h;
  h.add("Authorization", "Bearer " + key);
  return h;
}

TEST(DistillTest, AFrontServesPromptLogprobsToItsInferenceKeyAndTeachesAnotherFront) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  SwarmProcess teacher(
      SwarmProcess::Options{dir / "teacher", {}, "", {"--inference-key", "teach-key"}});
  Api t(teacher.url());
  t.boot(config_yaml(model));

  // The teacher's API: token ids in, a logprob per prompt position out (null first).
  const Json ids = Json::array({5, 17, 9, 33, 2, 41});
  auto r = t.raw_post("/v1/completions",
                      Json{{"prompt", ids}, {"max_tokens", 1}, {"prompt_logprobs", 2}},
                      bearer("teach-key"));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json lp = r.json()["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(lp.size(), ids.size()) << r.body;
  EXPECT_TRUE(lp[0].is_null());
  for (size_t p = 1; p < ids.size(); ++p) {
    const std::string own = std::to_string(ids[p].get<int>());
    ASSERT_TRUE(lp[p].contains(own)) << lp[p].dump();
    const double x = lp[p][own]["logprob"].get<double>();
    EXPECT_TRUE(std::isfinite(x) && x <= 0) << lp[p].dump();
    EXPECT_GE(lp[p][own]["rank"].get<int>(), 1);
    EXPECT_GE(lp[p].size(), 2u);  // the best two, and the prompt's own token when not among them
  }
  // The inference key is nobody's episode: nothing was recorded, and no other key gets in.
  EXPECT_EQ(t.get("/episodes").json()["episodes"].size(), 0u);
  EXPECT_EQ(
      t.raw_post("/v1/completions", Json{{"prompt", ids}, {"max_tokens", 1}}, bearer("wrong-key"))
          .status,
      401);
  r = t.raw_post("/v1/completions",
                 Json{{"prompt", ids}, {"max_tokens", 1}, {"prompt_logprobs", 1}, {"stream", true}},
                 bearer("teach-key"));
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("prompt_logprobs"));

  // The student: a real torch front whose batches go to the teacher first.
  const std::string teacher_v1 = teacher.url() + "/v1";
  SwarmProcess student(
      SwarmProcess::Options{dir / "student", {}, "", {"--teacher-url", teacher_v1}});
  Api s(student.url());
  std::string yaml = config_yaml(model, "  distillation:\n    base_url: " + teacher_v1 +
                                            "\n    api_key: teach-key\n    top_k: 2\n"
                                            "  trainer_common:\n    optim:\n      lr: 0.001\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  s.boot(yaml);
  for (const auto& [task, reward] : std::vector<std::pair<std::string, double>>{
           {"task-a", 1.0}, {"task-a", 0.0}, {"task-b", 0.0}, {"task-b", 1.0}}) {
    Json e = s.claim("client-d");
    ASSERT_EQ(e["success"], true) << e.dump();
    auto c = s.chat(e["openai_api_key"], user_chat("Tell me about " + task, {{"max_tokens", 6}}));
    ASSERT_EQ(c.status, 200) << c.body;
    ASSERT_EQ(s.end("client-d", e["episode_uuid"], task, reward).status, 200);
  }
  std::string logs;
  ASSERT_TRUE(eventually(
      [&] {
        logs = s.get("/get_verbose_logs").body;
        return logs.find("step 0 done") != std::string::npos;
      },
      300s))
      << logs << "\n"
      << student.output();
  EXPECT_THAT(logs, HasSubstr("teacher answered for 4 of 4 samples"));
  const Json history =
      s.get("/metrics_history?name=distill/tokens,distill/failed,train/distill_tokens").json();
  const Json series = history.value("series", Json::object());
  ASSERT_TRUE(series.contains("distill/tokens")) << history.dump();
  EXPECT_GT(series["distill/tokens"][0][1].get<double>(), 0) << history.dump();
  EXPECT_EQ(series["distill/failed"][0][1].get<double>(), 0) << history.dump();
  EXPECT_GT(series["train/distill_tokens"][0][1].get<double>(), 0) << history.dump();
}

TEST(DistillTest, AConfigNamingAnUnlistedTeacherIsRefused) {
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  SwarmProcess front(SwarmProcess::Options{dir / "front", bin("ajet-echo-engine"), "", {}});
  Api api(front.url());
  auto r =
      api.post("/sync_train_config",
               Json{{"yaml_as_string",
                     config_yaml(model, "  distillation:\n    base_url: http://10.1.2.3:9/v1\n")}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(r.body, HasSubstr("--teacher-url http://10.1.2.3:9/v1"));
}

}  // namespace
}  // namespace ajet::e2e
