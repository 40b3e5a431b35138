// The madness detectors (src/batching/madness.h), token by token, on hand-written id sequences:
// each fires exactly when its threshold is reached, not before, and never on text that only looks
// close to degenerate.
#include "batching/madness.h"

#include <gtest/gtest.h>

#include <cmath>

#include "batching/sampler.h"
#include "common/error.h"

namespace ajet::batching {
namespace {

// How many tokens of `ids` the detector takes before it fires (ids.size() + 1: never), and why.
std::pair<size_t, std::optional<FinishReason>> run(const MadnessLimits& limits,
                                                   const std::vector<int32_t>& ids,
                                                   const std::vector<int32_t>& prompt = {}) {
  MadnessDetector d(limits, prompt);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (auto r = d.push(ids[i])) return {i + 1, r};
  }
  return {ids.size() + 1, std::nullopt};
}

TEST(Madness, OffByDefault) {
  std::vector<int32_t> loop(100, 5);
  EXPECT_FALSE(run(MadnessLimits{}, loop).second);
}

TEST(Madness, RepetitionFiresWhenTheLoopSpansRepeatTokens) {
  MadnessLimits l;
  l.repeat_tokens = 12;
  l.max_period = 4;
  // "a b c" then the loop "x y z" x 5: the loop is seen at its 12th token (after 3 lead-in).
  std::vector<int32_t> ids = {1, 2, 3};
  for (int r = 0; r < 5; ++r) ids.insert(ids.end(), {10, 11, 12});
  auto [at, why] = run(l, ids);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, FinishReason::kRepetition);
  EXPECT_EQ(at, 3u + 12u);
}

TEST(Madness, RepetitionIgnoresPeriodsLongerThanMaxPeriodAndShortRuns) {
  MadnessLimits l;
  l.repeat_tokens = 12;
  l.max_period = 4;
  std::vector<int32_t> five;  // period 5 > max_period
  for (int r = 0; r < 6; ++r) five.insert(five.end(), {1, 2, 3, 4, 5});
  EXPECT_FALSE(run(l, five).second);
  // "= = = = = = = = = = =" (11 tokens) is one short of 12.
  EXPECT_FALSE(run(l, std::vector<int32_t>(11, 9)).second);
  EXPECT_EQ(run(l, std::vector<int32_t>(12, 9)).first, 12u);
}

TEST(Madness, LowEntropyCatchesAnUnorderedLoopOverFewTokens) {
  MadnessLimits l;
  l.entropy_window = 16;
  l.min_entropy_bits = 1.5;
  // Two tokens in no fixed order: at most 1 bit over any window.
  std::vector<int32_t> ids = {1, 2, 2, 1, 2, 1, 1, 2, 1, 1, 2, 2, 2, 1, 2, 1, 1, 2};
  auto [at, why] = run(l, ids);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, FinishReason::kLowEntropy);
  EXPECT_EQ(at, 16u);  // the first full window
  // 16 distinct tokens: 4 bits.
  std::vector<int32_t> varied;
  for (int i = 0; i < 40; ++i) varied.push_back(100 + i);
  EXPECT_FALSE(run(l, varied).second);
}

std::shared_ptr<const std::vector<TokenClass>> classes() {
  // ids 0-9 neutral, 10-19 Latin, 20-29 CJK, 30-39 Cyrillic, 40-49 garbage.
  auto t = std::make_shared<std::vector<TokenClass>>(50, TokenClass::kNeutral);
  for (int i = 10; i < 20; ++i) (*t)[size_t(i)] = TokenClass::kLatin;
  for (int i = 20; i < 30; ++i) (*t)[size_t(i)] = TokenClass::kCjk;
  for (int i = 30; i < 40; ++i) (*t)[size_t(i)] = TokenClass::kCyrillic;
  for (int i = 40; i < 50; ++i) (*t)[size_t(i)] = TokenClass::kGarbage;
  return t;
}

TEST(Madness, GarbageRunCountsConsecutiveGarbageThroughNeutralTokens) {
  MadnessLimits l;
  l.garbage_run = 4;
  l.token_classes = classes();
  EXPECT_FALSE(run(l, {40, 41, 12, 42, 43, 44}).second);  // a Latin token breaks the run
  auto [at, why] = run(l, {10, 40, 1, 41, 42, 2, 43});
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, FinishReason::kGarbage);
  EXPECT_EQ(at, 7u);
}

TEST(Madness, LanguageSwitchAgainstThePromptsScript) {
  MadnessLimits l;
  l.switch_run = 3;
  l.token_classes = classes();
  const std::vector<int32_t> latin_prompt = {10, 11, 1, 12, 13};
  // Two CJK tokens (a quoted name) then back to Latin: fine; three in a row: a switch.
  EXPECT_FALSE(run(l, {10, 20, 21, 11, 12}, latin_prompt).second);
  auto [at, why] = run(l, {10, 20, 1, 21, 22, 11}, latin_prompt);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, FinishReason::kLanguageSwitch);
  EXPECT_EQ(at, 5u);
  // A CJK prompt answered in CJK is fine; without a prompt script the reply's first one counts.
  EXPECT_FALSE(run(l, {20, 21, 22, 23}, {20, 21}).second);
  EXPECT_TRUE(run(l, {30, 31, 10, 11, 12}).second);
}

TEST(Madness, BadLimitsAreRefusedByName) {
  MadnessLimits l;
  l.repeat_tokens = 4;
  l.max_period = 8;
  try {
    validate_madness_limits(l);
    FAIL() << "accepted repeat_tokens <= max_period";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeat_tokens"), std::string::npos);
  }
  MadnessLimits w;
  w.entropy_window = 1;
  EXPECT_THROW(validate_madness_limits(w), Error);
  MadnessLimits g;
  g.garbage_run = -1;
  EXPECT_THROW(validate_madness_limits(g), Error);
}

TEST(ScoreToken, LogprobRankAndTopAlternatives) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const PromptLogprob p = score_token(logits.data(), 4, 2, 2);
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  EXPECT_NEAR(p.logprob, 2.0 - std::log(z), 1e-5);
  EXPECT_EQ(p.rank, 3);  // two ids have a larger logit
  ASSERT_EQ(p.top_logprobs.size(), 2u);
  EXPECT_EQ(p.top_logprobs[0].id, 1);  // ties: lower id first
  EXPECT_EQ(p.top_logprobs[1].id, 3);
  EXPECT_NEAR(p.top_logprobs[0].logprob, 3.0 - std::log(z), 1e-5);
}

}  // namespace
}  // namespace ajet::batching
