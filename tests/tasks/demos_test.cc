// SFT demonstrations: correct ones score 1 with the judge, imperfect ones score less, the share of
// correct ones matches the requested ratio within binomial noise, the error mix is followed, and
// the output is what `ajet sft` renders (OpenAI messages that the chat template accepts).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/error.h"
#include "tasks/builtin.h"
#include "tasks/corpus.h"
#include "tasks/drills.h"

namespace ajet::tasks {
namespace {

std::vector<Task> train_tasks(const std::string& name, int64_t n, uint64_t seed,
                              OrderedJson params = OrderedJson::object()) {
  return builtin_task(name).generate(
      GenerateOptions{.split = Split::kTrain, .count = n, .seed = seed, .params = params});
}

struct Case {
  std::string task;
  OrderedJson params;
};

class DemosOf : public ::testing::TestWithParam<Case> {};

TEST_P(DemosOf, CorrectScoreOneImperfectScoreLessAndRatioHolds) {
  const Case& c = GetParam();
  const BuiltinTask& kind = builtin_task(c.task);
  const int64_t n = c.task == "frozenlake" ? 300 : 600;
  const double ratio = 0.4;
  const std::vector<Task> tasks = train_tasks(c.task, n, 5, c.params);
  const std::vector<Demo> demos =
      generate_demos(kind, tasks, DemoOptions{.correct_ratio = ratio, .error_mix = {}, .seed = 8});
  ASSERT_EQ(demos.size(), tasks.size());
  std::map<std::string, int> kinds;
  for (size_t i = 0; i < demos.size(); ++i) {
    const Demo& d = demos[i];
    ++kinds[d.kind];
    EXPECT_EQ(d.task_id, tasks[i].task_id);
    // Judge the conversation again from scratch (with the seed it was played with).
    const Judgement j =
        kind.judge_episode(tasks[i], d.messages, AgentOptions{.env_seed = d.env_seed});
    EXPECT_EQ(j.reward, d.judgement.reward) << d.kind;
    if (d.kind == "correct") {
      EXPECT_EQ(j.reward, 1.0) << c.task << " demo " << i << ": " << demo_to_json(d).dump();
    } else {
      EXPECT_LT(j.reward, 1.0) << c.task << " demo " << i << " (" << d.kind
                               << "): " << demo_to_json(d).dump();
    }
    EXPECT_EQ(d.messages.front().role, text::Role::kSystem);
    EXPECT_EQ(d.messages.back().role, text::Role::kAssistant);
    // The chat template renders it (tools included), as `ajet sft` will.
    EXPECT_NO_THROW(render_demo(d));
  }
  // Binomial(n, 0.4): 5 standard deviations either side (a test that fails only on a real bias).
  // On a slippery lake a few "correct" demos may find no lucky seed and are relabelled honestly.
  const double sd = std::sqrt(static_cast<double>(n) * ratio * (1 - ratio));
  EXPECT_NEAR(kinds["correct"], static_cast<double>(n) * ratio, 5 * sd) << c.task;
  for (const std::string& k : kind.error_kinds())
    EXPECT_GT(kinds[k], 0) << c.task << " never made " << k;
}

INSTANTIATE_TEST_SUITE_P(
    Builtin, DemosOf,
    ::testing::Values(Case{"calc", OrderedJson::object()}, Case{"countdown", OrderedJson::object()},
                      Case{"frozenlake", OrderedJson::object()},
                      Case{"frozenlake", OrderedJson{{"slippery", true}, {"slip_prob", 0.2}}}),
    [](const auto& info) {
      return info.param.task + (info.param.params.empty() ? "" : "_slippery");
    });

TEST(Demos, ErrorMixIsFollowed) {
  // The reference's skewed mix: 30% correct, then bad_expr:bad_copy:no_tool = 1:1:12.
  const std::vector<Task> tasks = train_tasks("calc", 1500, 2);
  const std::vector<Demo> demos =
      generate_demos(builtin_task("calc"), tasks,
                     DemoOptions{.correct_ratio = 0.3, .error_mix = {1, 1, 12}, .seed = 3});
  std::map<std::string, int> kinds;
  for (const Demo& d : demos) ++kinds[d.kind];
  const double n = 1500;
  auto near = [&](const std::string& k, double p) {
    EXPECT_NEAR(kinds[k], n * p, 5 * std::sqrt(n * p * (1 - p))) << k;
  };
  near("correct", 0.3);
  near("no_tool", 0.6);
  near("bad_expr", 0.05);
  near("bad_copy", 0.05);
  // no_tool demos never call the tool; the others call it exactly once.
  for (const Demo& d : demos) {
    size_t calls = 0;
    for (const auto& m : d.messages) calls += m.tool_calls.size();
    EXPECT_EQ(calls, d.kind == "no_tool" ? 0u : 1u) << d.kind;
  }
}

TEST(Demos, DeterministicAndPrefixStable) {
  const std::vector<Task> tasks = train_tasks("countdown", 50, 4);
  const DemoOptions o{.correct_ratio = 0.5, .error_mix = {}, .seed = 9};
  const auto a = generate_demos(builtin_task("countdown"), tasks, o);
  const auto b = generate_demos(builtin_task("countdown"),
                                std::vector<Task>(tasks.begin(), tasks.begin() + 20), o);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(demo_to_json(a[i]), demo_to_json(b[i]));
}

TEST(Demos, CalcDemoShape) {
  const std::vector<Task> tasks = train_tasks("calc", 1, 6);
  Rng rng(1);
  const Demo d = builtin_task("calc").make_demo(tasks[0], "correct", rng);
  const OrderedJson j = demo_to_json(d);
  ASSERT_EQ(j["messages"].size(), 5u);
  EXPECT_EQ(j["messages"][2]["content"], nullptr);
  EXPECT_EQ(j["messages"][2]["tool_calls"][0]["function"]["name"], "calculator");
  EXPECT_EQ(j["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"expression\": \"" + tasks[0].metadata["expression"].get<std::string>() + "\"}");
  EXPECT_EQ(j["messages"][3]["role"], "tool");
  EXPECT_EQ(j["messages"][4]["content"],
            "<answer>" + tasks[0].metadata["answer"].dump() + "</answer>");
  EXPECT_EQ(j["tools"][0]["function"]["name"], "calculator");
  EXPECT_EQ(j["reward"], 1.0);
  EXPECT_EQ(j["kind"], "correct");
}

TEST(Demos, BadOptionsAreNamed) {
  const std::vector<Task> tasks = train_tasks("calc", 3, 6);
  EXPECT_THROW(generate_demos(builtin_task("calc"), tasks, DemoOptions{.correct_ratio = 1.5}),
               Error);
  try {
    generate_demos(builtin_task("calc"), tasks,
                   DemoOptions{.correct_ratio = 0.5, .error_mix = {1, 2}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 3 weights (bad_expr,bad_copy,no_tool)"),
              std::string::npos)
        << e.what();
  }
}

// Copy drills: the reply is the user's text, numbers joined by + - * within the asked bounds; the
// same seed gives the same drills and a longer run starts with a shorter one; bad options are
// named.
TEST(Drills, CopyDrillsRepeatTheUserTextWithinTheirBounds) {
  const std::vector<Demo> drills = copy_drills(
      CopyDrillOptions{.count = 300, .seed = 4, .min_terms = 2, .max_terms = 3, .max_number = 50});
  ASSERT_EQ(drills.size(), 300u);
  std::map<int, int> terms_seen;
  for (const Demo& d : drills) {
    ASSERT_EQ(d.messages.size(), 3u);
    EXPECT_EQ(d.messages[0].role, text::Role::kSystem);
    EXPECT_EQ(d.messages[1].role, text::Role::kUser);
    EXPECT_EQ(d.messages[2].role, text::Role::kAssistant);
    EXPECT_EQ(d.messages[2].content, d.messages[1].content);
    EXPECT_EQ(d.kind, "copy");
    EXPECT_EQ(d.judgement.reward, 1.0);
    const std::string& t = d.messages[1].content;
    int terms = 1;
    std::string number;
    for (char ch : t + "+") {
      if (ch >= '0' && ch <= '9') {
        number += ch;
        continue;
      }
      ASSERT_TRUE(ch == '+' || ch == '-' || ch == '*') << t;
      ASSERT_FALSE(number.empty()) << t;
      const int v = std::stoi(number);
      EXPECT_TRUE(v >= 1 && v <= 50) << t;
      number.clear();
      terms += 1;
    }
    terms -= 1;  // the sentinel
    terms_seen[terms] += 1;
  }
  EXPECT_EQ(terms_seen.size(), 2u);  // 2 and 3 numbers, nothing else
  EXPECT_GT(terms_seen[2], 100);
  EXPECT_GT(terms_seen[3], 100);

  const std::vector<Demo> shorter = copy_drills(
      CopyDrillOptions{.count = 10, .seed = 4, .min_terms = 2, .max_terms = 3, .max_number = 50});
  for (size_t i = 0; i < shorter.size(); ++i)
    EXPECT_EQ(shorter[i].messages[1].content, drills[i].messages[1].content);
  const std::vector<Demo> other = copy_drills(
      CopyDrillOptions{.count = 10, .seed = 5, .min_terms = 2, .max_terms = 3, .max_number = 50});
  int same = 0;
  for (size_t i = 0; i < other.size(); ++i)
    same += other[i].messages[1].content == drills[i].messages[1].content;
  EXPECT_LT(same, 3);

  for (const CopyDrillOptions& bad :
       {CopyDrillOptions{.count = -1}, CopyDrillOptions{.min_terms = 0},
        CopyDrillOptions{.min_terms = 3, .max_terms = 2}, CopyDrillOptions{.max_number = 0}}) {
    EXPECT_THROW(copy_drills(bad), Error);
  }
  try {
    copy_drills(CopyDrillOptions{.min_terms = 3, .max_terms = 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_terms"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ajet::tasks
