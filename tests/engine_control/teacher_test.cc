// The distillation teacher's client (src/engine_control/teacher.h): reading vLLM's prompt_logprobs
// (the prompt's own token, the top alternatives by rank), refusing malformed answers by name, and
// a teacher that cannot be reached: every sample counted as failed, its logprobs NaN (no term),
// never zero. The real teacher (a front serving /v1/completions) is in tests/e2e/distill_test.cc.
#include "engine_control/teacher.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"

namespace ajet::engine_control {
namespace {

Json answer_for(const Json& prompt_logprobs) {
  return Json{
      {"choices",
       Json::array({Json{{"index", 0}, {"text", "x"}, {"prompt_logprobs", prompt_logprobs}}})}};
}

std::string error_of(const Json& answer, const std::vector<int32_t>& ids, int k = 0) {
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  try {
    parse_prompt_logprobs(answer, ids, k, &top_ids, &top_logprobs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Teacher, ReadsTheOwnTokenAndTheTopAlternativesByRank) {
  const Json lp =
      Json::array({nullptr,
                   Json{{"5", {{"logprob", -0.25}, {"rank", 1}, {"decoded_token", "a"}}},
                        {"9", {{"logprob", -1.5}, {"rank", 2}, {"decoded_token", "b"}}}},
                   Json{{"7", {{"logprob", -3.0}, {"rank", 4}}},
                        {"2", {{"logprob", -0.1}, {"rank", 1}}},
                        {"3", {{"logprob", -2.5}, {"rank", 2}}}}});
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  const std::vector<float> t =
      parse_prompt_logprobs(answer_for(lp), {1, 5, 7}, 2, &top_ids, &top_logprobs);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_TRUE(std::isnan(t[0]));
  EXPECT_FLOAT_EQ(t[1], -0.25f);
  EXPECT_FLOAT_EQ(t[2], -3.0f);
  ASSERT_EQ(top_ids.size(), 6u);
  EXPECT_EQ(top_ids[0], -1);  // position 0 predicts nothing
  EXPECT_EQ(top_ids[2], 5);
  EXPECT_EQ(top_ids[3], 9);
  EXPECT_EQ(top_ids[4], 2);  // the own token (rank 4) is not among the best two
  EXPECT_EQ(top_ids[5], 3);
  EXPECT_FLOAT_EQ(top_logprobs[5], -2.5f);
}

TEST(Teacher, MalformedAnswersAreRefusedByName) {
  const Json ok_entry = Json{{"5", {{"logprob", -0.5}, {"rank", 1}}}};
  EXPECT_NE(error_of(Json{{"object", "error"}}, {1, 5}).find("choices"), std::string::npos);
  EXPECT_NE(error_of(Json{{"choices", Json::array({Json{{"text", "x"}}})}}, {1, 5})
                .find("prompt_logprobs"),
            std::string::npos);
  EXPECT_NE(error_of(answer_for(Json::array({nullptr})), {1, 5}).find("tokenizer"),
            std::string::npos);  // a length mismatch: another tokenizer
  EXPECT_NE(error_of(answer_for(Json::array({nullptr, Json{{"6", {{"logprob", -1}}}}})), {1, 5})
                .find("token 5"),
            std::string::npos);
  EXPECT_NE(error_of(answer_for(Json::array({nullptr, Json{{"5", {{"logprob", "x"}}}}})), {1, 5})
                .find("logprob"),
            std::string::npos);
  EXPECT_NE(error_of(answer_for(Json::array({nullptr, Json{{"5", {{"logprob", 0.7}}}}})), {1, 5})
                .find("not a logprob"),
            std::string::npos);
  EXPECT_NE(error_of(answer_for(Json::array(
                         {nullptr, Json{{"5", {{"logprob", -1}}}, {"x", {{"logprob", -2}}}}})),
                     {1, 5}, 2)
                .find("not a token id"),
            std::string::npos);
  EXPECT_EQ(error_of(answer_for(Json::array({nullptr, ok_entry})), {1, 5}), "");
}

TEST(Teacher, AnUnreachableTeacherFailsEverySampleAndLeavesNaN) {
  rpc::TrainBatch b;
  b.sample_offsets = {0, 4, 7};
  b.token_ids = {1, 2, 3, 4, 5, 6, 7};
  b.loss_mask = {0, 0, 1, 1, 0, 1, 1};
  b.logprobs = {0, 0, -1, -1, 0, -1, -1};
  b.rewards = {1.0, 0.0};
  TeacherOptions o;
  o.base_url = "http://127.0.0.1:1/v1";  // nothing listens on port 1
  o.timeout_s = 5;
  o.top_k = 2;
  const TeacherReport r = fill_teacher_logprobs(b, o);
  EXPECT_EQ(r.samples, 2);
  EXPECT_EQ(r.failed, 2);
  EXPECT_EQ(r.tokens, 0);
  ASSERT_FALSE(r.errors.empty());
  ASSERT_EQ(b.teacher_logprobs.size(), 7u);
  for (float v : b.teacher_logprobs) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(b.teacher_top_ids.size(), 14u);
  // The batch still encodes and decodes: the engine reads NaN as "no teacher".
  rpc::TrainBatch back = rpc::decode_train_batch(rpc::encode_train_batch(b));
  EXPECT_EQ(back.teacher_top_k, 2);
  EXPECT_TRUE(std::isnan(back.teacher_logprobs[3]));
}

}  // namespace
}  // namespace ajet::engine_control
