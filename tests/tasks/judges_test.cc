// Judges on hand-written answers: right, wrong, malformed and edge cases (negative values,
// precedence, division by zero, numbers used twice), and on whole conversations.
#include <gtest/gtest.h>

#include "common/error.h"
#include "tasks/builtin.h"
#include "tasks/frozenlake.h"

namespace ajet::tasks {
namespace {

Task calc_task_of(const std::string& expression, int64_t answer) {
  Task t;
  t.task_id = "c1";
  t.env_type = "calc";
  t.main_query = expression + "=?";
  t.metadata["expression"] = expression;
  t.metadata["answer"] = answer;
  return t;
}

Task countdown_task_of(std::vector<int64_t> numbers, int64_t target) {
  Task t;
  t.task_id = "d1";
  t.env_type = "countdown";
  t.main_query = "x";
  t.metadata["numbers"] = numbers;
  t.metadata["target"] = target;
  return t;
}

Task lake_task_of(std::vector<std::string> rows, double slip = 0, int max_steps = 10,
                  uint64_t seed = 5) {
  Task t;
  t.task_id = "f1";
  t.env_type = "frozenlake";
  t.main_query = "x";
  t.metadata["map"] = rows;
  t.metadata["slip_prob"] = slip;
  t.metadata["slippery"] = slip > 0;
  t.metadata["max_steps"] = max_steps;
  t.metadata["env_seed"] = seed;
  return t;
}

Judgement calc(const Task& t, const std::string& answer) {
  return builtin_task("calc").judge_answer(t, answer);
}
Judgement countdown(const Task& t, const std::string& answer) {
  return builtin_task("countdown").judge_answer(t, answer);
}

TEST(CalcJudge, RightWrongAndMalformed) {
  const Task t = calc_task_of("37*4+15", 163);
  EXPECT_EQ(calc(t, "<answer>163</answer>").reward, 1.0);
  EXPECT_TRUE(calc(t, "<answer>163</answer>").is_success);
  EXPECT_EQ(calc(t, "The result is <answer> 163 </answer>.").reward, 1.0);
  EXPECT_EQ(calc(t, "<answer>703</answer>").reason,
            "wrong_answer");  // 37*(4+15): precedence ignored
  EXPECT_EQ(calc(t, "163").reason, "no_answer");
  EXPECT_EQ(calc(t, "<answer>163").reason, "no_answer");
  EXPECT_EQ(calc(t, "<answer>163.0</answer>").reason, "bad_answer_format");
  EXPECT_EQ(calc(t, "<answer>one hundred</answer>").reason, "bad_answer_format");
  EXPECT_EQ(calc(t, "<answer>1</answer><answer>163</answer>").reason, "multiple_answers");
  EXPECT_EQ(calc(t, "<answer>1</answer><answer>163</answer>").reward, 0.0);
  EXPECT_EQ(calc(t, "<answer>163</answer>").details["expected"], 163);
}

TEST(CalcJudge, PrecedenceAndNegativeResults) {
  // Normal precedence: 2+3*4 is 14, not 20.
  const Task t = calc_task_of("2+3*4", 14);
  EXPECT_EQ(calc(t, "<answer>14</answer>").reward, 1.0);
  EXPECT_EQ(calc(t, "<answer>20</answer>").reward, 0.0);
  const Task neg = calc_task_of("12-50", -38);
  EXPECT_EQ(calc(neg, "<answer>-38</answer>").reward, 1.0);
  EXPECT_EQ(calc(neg, "<answer>38</answer>").reward, 0.0);
  EXPECT_EQ(calc(neg, "<answer>- 38</answer>").reason, "bad_answer_format");
}

TEST(CalcJudge, AnswerFromExpressionWhenMetadataLacksIt) {
  Task t = calc_task_of("6*7", 0);
  t.metadata.erase("answer");
  EXPECT_EQ(calc(t, "<answer>42</answer>").reward, 1.0);
  t.metadata.erase("expression");
  EXPECT_THROW(calc(t, "<answer>42</answer>"), Error);
}

TEST(CalcJudge, ConversationsAreJudgedOnTheFinalReply) {
  const Task t = calc_task_of("6*7", 42);
  const BuiltinTask& judge = builtin_task("calc");
  std::vector<text::ChatMessage> ms = {
      {.role = text::Role::kUser, .content = "6*7=?"},
      {.role = text::Role::kAssistant, .content = "<answer>41</answer>"},
      {.role = text::Role::kAssistant, .content = "<answer>42</answer>"}};
  EXPECT_EQ(judge.judge_episode(t, ms).reward, 1.0);
  ms.push_back({.role = text::Role::kAssistant,
                .content = "",
                .tool_calls = {{.id = "a", .name = "calculator", .arguments = "{}"}}});
  EXPECT_EQ(judge.judge_episode(t, ms).reason, "no_answer");  // ended on a tool call
  EXPECT_EQ(judge.judge_episode(t, {}).reason, "no_answer");
}

TEST(CountdownJudge, CorrectEquations) {
  const Task t = countdown_task_of({3, 5, 7, 2}, 54);
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7-2</answer>").reward, 1.0);
  EXPECT_EQ(countdown(t, "<answer>7*(5+3)-2</answer>").reward, 1.0);
  EXPECT_EQ(countdown(t, "<answer> (3 + 5) * 7 - 2 = 54 </answer>").reward, 1.0);
  // Exact rationals: 6/4*8 = 12 needs no integer intermediate.
  const Task r = countdown_task_of({6, 4, 8}, 12);
  EXPECT_EQ(countdown(r, "<answer>6/4*8</answer>").reward, 1.0);
  // A negative intermediate is fine; a negative target is reached too.
  const Task neg = countdown_task_of({2, 9, 4}, -3);
  EXPECT_EQ(countdown(neg, "<answer>2-9+4</answer>").reward, 1.0);
}

TEST(CountdownJudge, WellFormedButWrongScoresPointOne) {
  const Task t = countdown_task_of({3, 5, 7, 2}, 54);
  EXPECT_EQ(countdown(t, "<answer>3+5*7-2</answer>").reason, "wrong_value");  // precedence: 36
  EXPECT_DOUBLE_EQ(countdown(t, "<answer>3+5*7-2</answer>").reward, 0.1);
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7</answer>").reason, "wrong_numbers");      // 2 unused
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7-2-2</answer>").reason, "wrong_numbers");  // 2 twice
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7-20/10</answer>").reason, "wrong_numbers");
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7-2=50</answer>").reward,
            1.0);  // the claimed value is ignored
  const Task z = countdown_task_of({4, 3, 3}, 4);
  const Judgement j = countdown(z, "<answer>4/(3-3)</answer>");
  EXPECT_EQ(j.reason, "division_by_zero");
  EXPECT_DOUBLE_EQ(j.reward, 0.1);
}

TEST(CountdownJudge, MalformedScoresZero) {
  const Task t = countdown_task_of({3, 5, 7, 2}, 54);
  EXPECT_EQ(countdown(t, "(3+5)*7-2").reason, "no_answer");
  EXPECT_EQ(countdown(t, "<answer>(3+5*7-2</answer>").reason, "invalid_equation");
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7-2=fifty</answer>").reason, "invalid_equation");
  EXPECT_EQ(countdown(t, "<answer>3 x 5</answer>").reward, 0.0);
  EXPECT_EQ(countdown(t, "<answer></answer>").reward, 0.0);
  EXPECT_EQ(countdown(t, "<answer>(3+5)*7-2</answer><answer>1</answer>").reason,
            "multiple_answers");
}

TEST(FrozenLakeJudge, ReplaysMoves) {
  const Task t = lake_task_of({"SF", "HG"});
  const BuiltinTask& judge = builtin_task("frozenlake");
  EXPECT_EQ(judge.judge_answer(t, "Right Down").reward, 1.0);
  EXPECT_EQ(judge.judge_answer(t, "<action>Right</action><action>Down</action>").reason, "goal");
  EXPECT_EQ(judge.judge_answer(t, "Down").reason, "hole");
  const Judgement partial = judge.judge_answer(t, "Right");
  EXPECT_EQ(partial.reason, "not_finished");
  EXPECT_EQ(partial.details["observation"], "SP\nHG");
  EXPECT_EQ(judge.judge_answer(t, "Right Jump").reason, "format_error");
  EXPECT_EQ(judge.judge_answer(t, "Right,Down,Left").reward,
            1.0);  // moves after the goal are ignored
}

TEST(FrozenLakeJudge, ConversationNeedsExactlyOneActionPerReply) {
  const Task t = lake_task_of({"SF", "FG"});
  const BuiltinTask& judge = builtin_task("frozenlake");
  auto a = [](std::string s) {
    return text::ChatMessage{.role = text::Role::kAssistant, .content = std::move(s)};
  };
  auto u = [](std::string s) {
    return text::ChatMessage{.role = text::Role::kUser, .content = std::move(s)};
  };
  EXPECT_EQ(judge
                .judge_episode(
                    t, {u("g"), a("<action>Down</action>"), u("g"), a("<action>Right</action>")})
                .reward,
            1.0);
  EXPECT_EQ(
      judge.judge_episode(t, {u("g"), a("<action>Down</action><action>Right</action>")}).reason,
      "format_error");
  EXPECT_EQ(judge.judge_episode(t, {u("g"), a("Down")}).reason, "format_error");
  EXPECT_EQ(parse_action("I pick <action> Left </action>."), Move::kLeft);
  EXPECT_FALSE(parse_action("<action>left</action>").has_value());
}

}  // namespace
}  // namespace ajet::tasks
