// The cocktail's schedule (hand-computed shares at given steps), the split of a batch by shares
// (largest remainder, sums to the batch) and loading several task sources.
#include "tasks/cocktail.h"

#include <gtest/gtest.h>

#include <numeric>

#include "common/error.h"
#include "tasks/rng.h"

namespace ajet::tasks {
namespace {

config::CocktailConfig two_tasks(const std::string& type,
                                 std::optional<double> start = std::nullopt,
                                 std::optional<double> end = std::nullopt,
                                 std::optional<int64_t> end_step = std::nullopt) {
  config::CocktailConfig c;
  c.tasks.resize(2);
  c.tasks[0].source.builtin.generator = "calc";
  c.tasks[1].source.builtin.generator = "countdown";
  c.schedule = {type, start, end, end_step};
  return c;
}

TEST(CocktailSchedule, FixedSharesFollowTheWeights) {
  config::CocktailConfig c = two_tasks("fixed");
  c.tasks[1].weight = 3;
  for (int64_t step : {1, 7, 1000}) {
    EXPECT_DOUBLE_EQ(first_task_share(c, step), 0.25);
    EXPECT_EQ(split_by_shares(cocktail_shares(c, step), 16), (std::vector<int64_t>{4, 12}));
  }
}

TEST(CocktailSchedule, ConstantLinearAndCosAtGivenSteps) {
  const config::CocktailConfig constant = two_tasks("constant", 0.3);
  for (int64_t step : {1, 5, 99}) EXPECT_DOUBLE_EQ(first_task_share(constant, step), 0.3);
  EXPECT_EQ(split_by_shares(cocktail_shares(constant, 1), 10), (std::vector<int64_t>{3, 7}));

  // linear 1 -> 0 over 4 steps: t = (step - 1) / 4.
  const config::CocktailConfig linear = two_tasks("linear", 1.0, 0.0, 4);
  const std::vector<double> linear_expected = {1.0, 0.75, 0.5, 0.25, 0.0, 0.0, 0.0};
  for (size_t i = 0; i < linear_expected.size(); ++i) {
    EXPECT_NEAR(first_task_share(linear, int64_t(i) + 1), linear_expected[i], 1e-12)
        << "step " << i + 1;
  }
  EXPECT_EQ(split_by_shares(cocktail_shares(linear, 2), 8), (std::vector<int64_t>{6, 2}));

  // cos 0.75 -> 0.25 over 4 steps: end + (start - end) (1 + cos(pi t)) / 2.
  const config::CocktailConfig cos = two_tasks("cos", 0.75, 0.25, 4);
  EXPECT_DOUBLE_EQ(first_task_share(cos, 1), 0.75);
  EXPECT_NEAR(first_task_share(cos, 2), 0.25 + 0.5 * (1 + std::cos(M_PI / 4)) / 2,
              1e-12);  // 0.6768
  EXPECT_NEAR(first_task_share(cos, 3), 0.5, 1e-12);
  EXPECT_NEAR(first_task_share(cos, 4), 0.25 + 0.5 * (1 + std::cos(3 * M_PI / 4)) / 2,
              1e-12);  // 0.3232
  EXPECT_NEAR(first_task_share(cos, 5), 0.25, 1e-12);
  EXPECT_NEAR(first_task_share(cos, 50), 0.25, 1e-12);
  // 16 tasks a step: round(16 r) for the first task.
  std::vector<int64_t> first_counts;
  for (int64_t step = 1; step <= 5; ++step) {
    first_counts.push_back(split_by_shares(cocktail_shares(cos, step), 16)[0]);
  }
  EXPECT_EQ(first_counts, (std::vector<int64_t>{12, 11, 8, 5, 4}));
}

TEST(CocktailSchedule, TheOtherTasksShareTheRestByWeight) {
  config::CocktailConfig c = two_tasks("constant", 0.5);
  c.tasks.resize(3);
  c.tasks[1].weight = 1;
  c.tasks[2].weight = 3;
  const std::vector<double> shares = cocktail_shares(c, 1);
  EXPECT_DOUBLE_EQ(shares[0], 0.5);
  EXPECT_DOUBLE_EQ(shares[1], 0.125);
  EXPECT_DOUBLE_EQ(shares[2], 0.375);
  EXPECT_EQ(split_by_shares(shares, 16), (std::vector<int64_t>{8, 2, 6}));
  EXPECT_EQ(split_by_shares(shares, 8), (std::vector<int64_t>{4, 1, 3}));
}

TEST(CocktailSplit, LargestRemainderSumsToTheBatchAndStaysWithinOne) {
  EXPECT_EQ(split_by_shares({0.5, 0.5}, 3),
            (std::vector<int64_t>{2, 1}));  // a tie goes to the earlier task
  EXPECT_EQ(split_by_shares({1.0 / 3, 1.0 / 3, 1.0 / 3}, 16), (std::vector<int64_t>{6, 5, 5}));
  EXPECT_EQ(split_by_shares({0.3, 0.7}, 10),
            (std::vector<int64_t>{3, 7}));  // 0.3 * 10 is 3, not 2.999…
  EXPECT_EQ(split_by_shares({1.0, 0.0}, 5), (std::vector<int64_t>{5, 0}));
  EXPECT_EQ(split_by_shares({0.0, 1.0}, 5), (std::vector<int64_t>{0, 5}));
  Rng rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t n = size_t(rng.uniform_int(1, 6));
    std::vector<double> shares(n);
    for (double& s : shares) s = rng.uniform01();
    shares[0] += 1e-3;  // never all 0
    const double sum = std::accumulate(shares.begin(), shares.end(), 0.0);
    const int64_t total = rng.uniform_int(1, 64);
    const std::vector<int64_t> counts = split_by_shares(shares, total);
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), total);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_LT(std::fabs(double(counts[i]) - double(total) * shares[i] / sum), 1.0);
    }
  }
  EXPECT_THROW(split_by_shares({0.0, 0.0}, 4), Error);
}

TEST(CocktailLoad, EachTaskHasItsOwnSetsAndSharedIdsAreRefused) {
  config::CocktailConfig c = two_tasks("fixed");
  c.tasks[0].source.builtin.num_training_tasks = 30;
  c.tasks[0].source.builtin.num_validation_tasks = 5;
  c.tasks[1].source.builtin.num_training_tasks = 20;
  c.tasks[1].source.builtin.num_validation_tasks = 4;
  const std::vector<CocktailSource> sources = load_cocktail(c);
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].name, "calc");
  EXPECT_EQ(sources[0].sets.training.size(), 30u);
  EXPECT_EQ(sources[0].sets.validation.size(), 5u);
  EXPECT_EQ(sources[1].name, "countdown");
  EXPECT_EQ(sources[1].sets.training.size(), 20u);
  for (const Task& t : sources[1].sets.training) EXPECT_EQ(t.env_type, "countdown");

  // Two calc sources drawing the same problems would merge their GRPO groups at the front.
  c.tasks[1].name = "calc2";
  c.tasks[1].source.builtin.generator = "calc";
  try {
    load_cocktail(c);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "ajet.task_reader.cocktail.tasks[1] (calc2) and "
                  "ajet.task_reader.cocktail.tasks[0] (calc) share the training task id"),
              std::string::npos)
        << e.what();
  }
  // A source's own error names the task.
  c.tasks[1].source.builtin.generator = "chess";
  try {
    load_cocktail(c);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ajet.task_reader.cocktail.tasks[1] (calc2): "),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ajet::tasks
