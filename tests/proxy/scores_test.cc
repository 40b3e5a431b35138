// The judge's words into rewards (src/proxy/scores.h), against hand-computed values.
#include "proxy/scores.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"

namespace ajet::proxy {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ListwiseRewardsTest, RanksAreEvenlySpacedFromOneToMinusOne) {
  // Ranking best first: answer 2, then 0, then 1.
  EXPECT_THAT(listwise_rewards({2, 0, 1}, 3), ElementsAre(0.0, -1.0, 1.0));
  // n = 4: 1, 1/3, -1/3, -1.
  EXPECT_THAT(listwise_rewards({3, 1, 0, 2}, 4),
              ElementsAre(DoubleNear(-1.0 / 3, 1e-12), DoubleNear(1.0 / 3, 1e-12), -1.0, 1.0));
  EXPECT_THAT(listwise_rewards({0}, 1), ElementsAre(0.0));
}

TEST(ListwiseRewardsTest, RefusesAnythingButAPermutation) {
  EXPECT_THROW(listwise_rewards({0, 0, 1}, 3), Error);
  EXPECT_THROW(listwise_rewards({0, 1}, 3), Error);
  EXPECT_THROW(listwise_rewards({0, 1, 3}, 3), Error);
  EXPECT_THROW(listwise_rewards({-1, 0, 1}, 3), Error);
}

TEST(RankNormalisedTest, TiesShareTheirMeanRank) {
  // Scores 3, 1, 3, 0: answers 0 and 2 share ranks 0 and 1 (mean 0.5): 1 - 2 * 0.5 / 3 = 2/3;
  // answer 1 rank 2: -1/3; answer 3 rank 3: -1.
  EXPECT_THAT(rank_normalised({3, 1, 3, 0}),
              ElementsAre(DoubleNear(2.0 / 3, 1e-12), DoubleNear(-1.0 / 3, 1e-12),
                          DoubleNear(2.0 / 3, 1e-12), -1.0));
  EXPECT_THAT(rank_normalised({5, 5, 5}), ElementsAre(0.0, 0.0, 0.0));
  EXPECT_THAT(rank_normalised({0.2, 0.9}), ElementsAre(-1.0, 1.0));
  EXPECT_THAT(rank_normalised({7}), ElementsAre(0.0));
}

TEST(PointwiseScoreTest, ReadsTheNumberAfterTheLastScore) {
  EXPECT_DOUBLE_EQ(parse_pointwise_score("The answer is right.\nScore: 7"), 7);
  EXPECT_DOUBLE_EQ(parse_pointwise_score("{\"score\": 0.5}"), 0.5);
  EXPECT_DOUBLE_EQ(parse_pointwise_score("<score>3</score>"), 3);
  EXPECT_DOUBLE_EQ(parse_pointwise_score("**Score**: -2"), -2);
  EXPECT_DOUBLE_EQ(parse_pointwise_score("The score is unclear at first. SCORE = 8/10"), 8);
  EXPECT_DOUBLE_EQ(parse_pointwise_score("  4.5 \n"), 4.5);
}

TEST(PointwiseScoreTest, RefusesARepliesWithoutAFiniteScore) {
  EXPECT_THAT([] { parse_pointwise_score("I cannot grade this."); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no score")));
  EXPECT_THROW(parse_pointwise_score("Score: nan"), Error);
  EXPECT_THROW(parse_pointwise_score("Score: 1e999"), Error);
  EXPECT_THROW(parse_pointwise_score("7 out of 10"), Error);
  EXPECT_THROW(parse_pointwise_score(""), Error);
}

TEST(RankingTest, ReadsTheLastListOfAnswerNumbers) {
  EXPECT_THAT(parse_ranking("Answer 2 is best. Ranking: [2, 1, 3]", 3), ElementsAre(1, 0, 2));
  EXPECT_THAT(parse_ranking("[x] ignored; final: [3,1,2]", 3), ElementsAre(2, 0, 1));
  EXPECT_THAT(parse_ranking("[3,1,2] then prose [not a list]", 3), ElementsAre(2, 0, 1));
}

TEST(RankingTest, RefusesIncompleteOrRepeatedRankings) {
  EXPECT_THROW(parse_ranking("[1, 1, 2]", 3), Error);
  EXPECT_THROW(parse_ranking("[2, 1]", 3), Error);
  EXPECT_THROW(parse_ranking("[0, 1, 2]", 3), Error);  // answer numbers are 1-based
  EXPECT_THAT([] { parse_ranking("the second one", 3); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no ranking")));
}

TEST(CommandOutputTest, ReadsTheLastJsonObjectLine) {
  EXPECT_THAT(parse_command_output("judging...\n{\"scores\": [1, 0]}\n", 2, JudgeMode::kPointwise),
              ElementsAre(1.0, 0.0));
  EXPECT_THAT(parse_command_output("{\"scores\": [0]}\n{\"scores\": [0.25, 0.75]}", 2,
                                   JudgeMode::kPointwise),
              ElementsAre(0.25, 0.75));
  // Listwise scores are ranked and normalised; a ranking is normalised.
  EXPECT_THAT(parse_command_output("{\"scores\": [0.1, 0.9, 0.5]}", 3, JudgeMode::kListwise),
              ElementsAre(-1.0, 1.0, 0.0));
  EXPECT_THAT(parse_command_output("{\"ranking\": [1, 2, 0]}", 3, JudgeMode::kListwise),
              ElementsAre(-1.0, 1.0, 0.0));
}

TEST(CommandOutputTest, RefusesWhatIsNotNRewards) {
  EXPECT_THROW(parse_command_output("", 2, JudgeMode::kPointwise), Error);
  EXPECT_THROW(parse_command_output("0.5 0.5", 2, JudgeMode::kPointwise), Error);
  EXPECT_THROW(parse_command_output("{\"scores\": [1]}", 2, JudgeMode::kPointwise), Error);
  EXPECT_THROW(parse_command_output("{\"scores\": [1, \"x\"]}", 2, JudgeMode::kPointwise), Error);
  EXPECT_THROW(parse_command_output("{\"ranking\": [1, 0]}", 2, JudgeMode::kPointwise), Error);
  EXPECT_THROW(parse_command_output("{\"ranking\": [0, 0]}", 2, JudgeMode::kListwise), Error);
  EXPECT_THROW(parse_command_output("{\"reward\": 1}", 2, JudgeMode::kPointwise), Error);
}

TEST(TemplateTest, FillsKnownPlaceholdersAndKeepsOthers) {
  EXPECT_EQ(fill_template("Q: {{question}}\nA: {{ answer }} {{other}}",
                          {{"question", "2+2?"}, {"answer", "4"}}),
            "Q: 2+2?\nA: 4 {{other}}");
  EXPECT_EQ(numbered_answers({"a", "b"}), "Answer 1:\na\n\nAnswer 2:\nb");
  EXPECT_NO_THROW(check_template(default_template(JudgeMode::kPointwise), JudgeMode::kPointwise));
  EXPECT_NO_THROW(check_template(default_template(JudgeMode::kListwise), JudgeMode::kListwise));
}

TEST(TemplateTest, NamesAnUnknownOrMissingPlaceholder) {
  EXPECT_THAT([] { check_template("{{question}} {{answers}}", JudgeMode::kPointwise); },
              ::testing::ThrowsMessage<Error>(HasSubstr("{{answers}}")));
  EXPECT_THAT([] { check_template("{{question}} only", JudgeMode::kListwise); },
              ::testing::ThrowsMessage<Error>(HasSubstr("must contain {{answers}}")));
}

}  // namespace
}  // namespace ajet::proxy
