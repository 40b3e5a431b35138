// Built-in generators: deterministic per seed, disjoint train/validation splits whatever the seeds,
// distinct problems, params checked by name, and every generated problem solvable.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "tasks/builtin.h"
#include "tasks/expression.h"
#include "tasks/frozenlake.h"
#include "tasks/generator.h"

namespace ajet::tasks {
namespace {

std::vector<Task> gen(const std::string& name, Split split, int64_t n, uint64_t seed,
                      OrderedJson params = OrderedJson::object()) {
  return builtin_task(name).generate(
      GenerateOptions{.split = split, .count = n, .seed = seed, .params = params});
}

std::string problem_of(const Task& t) {
  if (t.env_type == "calc") return t.metadata["expression"].get<std::string>();
  if (t.env_type == "countdown") {
    std::vector<int64_t> n = t.metadata["numbers"].get<std::vector<int64_t>>();
    std::sort(n.begin(), n.end());
    return OrderedJson(n).dump() + "=" + t.metadata["target"].dump();
  }
  return t.metadata["map"].dump();
}

class EveryTask : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryTask, SameSeedSameTasksOtherSeedOtherTasks) {
  const std::string name = GetParam();
  std::vector<Task> a = gen(name, Split::kTrain, 40, 3);
  std::vector<Task> b = gen(name, Split::kTrain, 40, 3);
  std::vector<Task> c = gen(name, Split::kTrain, 40, 4);
  ASSERT_EQ(a.size(), 40u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(task_to_json(a[i]), task_to_json(b[i]));
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].task_id == c[i].task_id ? 1 : 0;
  EXPECT_LT(same, 10u);
  // A shorter run is a prefix of a longer one (the draw loop does not depend on the count).
  std::vector<Task> shorter = gen(name, Split::kTrain, 10, 3);
  for (size_t i = 0; i < shorter.size(); ++i) EXPECT_EQ(shorter[i].task_id, a[i].task_id);
}

TEST_P(EveryTask, SplitsAreDisjointAcrossSeedsAndIdsFollowProblems) {
  const std::string name = GetParam();
  std::set<std::string> train_problems;
  std::set<std::string> train_ids;
  for (uint64_t seed : {1, 2, 3}) {
    for (const Task& t : gen(name, Split::kTrain, 150, seed)) {
      train_problems.insert(problem_of(t));
      train_ids.insert(t.task_id);
      EXPECT_EQ(t.metadata["split"], "train");
      EXPECT_EQ(t.env_type, name);
    }
  }
  size_t val_count = 0;
  for (uint64_t seed : {1, 9}) {
    std::vector<Task> val = gen(name, Split::kValidation, 60, seed);
    std::set<std::string> distinct;
    for (const Task& t : val) {
      EXPECT_FALSE(train_problems.contains(problem_of(t))) << t.task_id << " is in both splits";
      EXPECT_FALSE(train_ids.contains(t.task_id));
      EXPECT_EQ(t.metadata["split"], "validation");
      distinct.insert(t.task_id);
      ++val_count;
    }
    EXPECT_EQ(distinct.size(), val.size()) << "duplicate problems within one split";
  }
  EXPECT_EQ(val_count, 120u);
  // The same problem gets the same id under any seed.
  std::vector<Task> one = gen(name, Split::kTrain, 150, 1);
  std::vector<Task> again = gen(name, Split::kTrain, 150, 1);
  EXPECT_EQ(one.front().task_id, again.front().task_id);
}

TEST_P(EveryTask, EveryTaskRoundTripsThroughJsonAndIsSolvable) {
  const std::string name = GetParam();
  const BuiltinTask& kind = builtin_task(name);
  for (const Task& t : gen(name, Split::kTrain, 60, 11)) {
    Task back = task_from_json(task_to_json(t), "roundtrip");
    EXPECT_EQ(task_to_json(back), task_to_json(t));
    ASSERT_EQ(t.init_messages.size(), 2u);
    EXPECT_EQ(t.init_messages[1]["content"], t.main_query);
    ASSERT_TRUE(t.metadata.contains("difficulty"));
    if (name == "calc") {
      EXPECT_EQ(calculator(t.metadata["expression"].get<std::string>()),
                t.metadata["answer"].dump());
      EXPECT_EQ(kind.judge_answer(t, "<answer>" + t.metadata["answer"].dump() + "</answer>").reward,
                1.0);
    } else if (name == "countdown") {
      const std::string sol = t.metadata["solution"].get<std::string>();
      EXPECT_EQ(kind.judge_answer(t, "<answer>" + sol + "</answer>").reward, 1.0) << sol;
    } else {
      LakeMap map = parse_lake_map(t.metadata["map"], "test");
      ASSERT_TRUE(shortest_path_length(map).has_value());
      EXPECT_EQ(*shortest_path_length(map), t.metadata["shortest_path"].get<int>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, EveryTask, ::testing::Values("calc", "countdown", "frozenlake"));

TEST(Generators, CalcRespectsItsParams) {
  OrderedJson params = {{"min_operand", 5},  {"max_operand", 9}, {"min_operands", 3},
                        {"max_operands", 3}, {"operators", "*"}, {"word_problem_ratio", 0.0}};
  for (const Task& t : gen("calc", Split::kTrain, 50, 2, params)) {
    const std::string e = t.metadata["expression"].get<std::string>();
    ASSERT_EQ(e.size(), 5u) << e;
    EXPECT_EQ(e[1], '*');
    EXPECT_EQ(e[3], '*');
    EXPECT_EQ(t.main_query, e + "=?");
    EXPECT_EQ(t.metadata["difficulty"], 3);
  }
  std::set<std::string> styles;
  for (const Task& t : gen("calc", Split::kTrain, 300, 2, {{"word_problem_ratio", 0.6}}))
    styles.insert(t.metadata["style"].get<std::string>());
  EXPECT_EQ(styles, (std::set<std::string>{"symbolic", "story", "verbal"}));
}

TEST(Generators, BadParamsAreNamed) {
  try {
    gen("calc", Split::kTrain, 5, 1, {{"max_operandz", 5}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown calc param 'max_operandz'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(gen("calc", Split::kTrain, 5, 1, {{"operators", "+/"}}), Error);
  EXPECT_THROW(gen("frozenlake", Split::kTrain, 5, 1, {{"size", "big"}}), Error);
  EXPECT_THROW(gen("countdown", Split::kTrain, 5, 1, {{"min_numbers", 9}}), Error);
  EXPECT_THROW(builtin_task("sudoku"), Error);
}

TEST(Generators, ASmallProblemSpaceRunsOutWithAClearError) {
  // 1..2 with one operator: only 2*2 = 4 distinct problems exist.
  OrderedJson params = {{"min_operand", 1},
                        {"max_operand", 2},
                        {"max_operands", 2},
                        {"operators", "+"},
                        {"holdout_fraction", 0.5}};
  try {
    gen("calc", Split::kTrain, 10, 1, params);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("distinct train problems of 10 requested"),
              std::string::npos)
        << e.what();
  }
}

TEST(Generators, HoldoutShareIsAboutTheRequestedFraction) {
  int val = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i)
    val += in_validation_split("calc:" + std::to_string(i) + "+1", 0.1) ? 1 : 0;
  // Binomial(20000, 0.1): sd = 42; 6 sd either side.
  EXPECT_NEAR(val, 2000, 260);
}

TEST(Generators, FrozenLakeMapsAreSolvableAndShaped) {
  for (const Task& t : gen("frozenlake", Split::kTrain, 40, 5,
                           {{"size", 6}, {"hole_fraction", 0.35}, {"slippery", true}})) {
    LakeMap map = parse_lake_map(t.metadata["map"], "test");
    EXPECT_EQ(map.size(), 6);
    EXPECT_EQ(map.at(0, 0), 'S');
    EXPECT_EQ(map.at(5, 5), 'G');
    EXPECT_TRUE(shortest_path_length(map).has_value());
    EXPECT_EQ(t.metadata["slippery"], true);
    EXPECT_NEAR(t.metadata["slip_prob"].get<double>(), 2.0 / 3.0, 1e-12);
    EXPECT_EQ(t.metadata["max_steps"], 24);
  }
}

}  // namespace
}  // namespace ajet::tasks
