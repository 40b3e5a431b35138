// The sampler against hand-computed distributions: logits log(1), log(2), log(3), log(4) give raw
// probabilities 0.1, 0.2, 0.3, 0.4, and every truncation below is worked out by hand in the
// comments.
#include "batching/sampler.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

namespace ajet::batching {
namespace {

const std::array<float, 4> kLogits = {std::log(1.0f), std::log(2.0f), std::log(3.0f),
                                      std::log(4.0f)};
constexpr double kTol = 1e-5;

SamplingParams params(double temperature, double top_p = 1.0, int64_t top_k = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  return p;
}

// Draws `draws` tokens and returns how often each id came up, checking both logprobs on every draw
// against `expected` (the sampled-from distribution) and the raw 0.1..0.4.
std::map<int32_t, double> frequencies(const SamplingParams& p,
                                      const std::map<int32_t, double>& expected,
                                      int draws = 20000) {
  SampleRng rng(1234, 0);
  std::map<int32_t, double> freq;
  for (int i = 0; i < draws; ++i) {
    GeneratedToken t = sample_token(kLogits.data(), 4, p, rng);
    EXPECT_TRUE(expected.count(t.id)) << "sampled id " << t.id << " outside the kept set";
    if (!expected.count(t.id)) break;
    EXPECT_NEAR(t.logprob, std::log(expected.at(t.id)), kTol);
    EXPECT_NEAR(t.raw_logprob, std::log(0.1 * (t.id + 1)), kTol);
    freq[t.id] += 1.0 / draws;
  }
  return freq;
}

void expect_frequencies(const SamplingParams& p, const std::map<int32_t, double>& expected) {
  std::map<int32_t, double> freq = frequencies(p, expected);
  for (const auto& [id, prob] : expected) EXPECT_NEAR(freq[id], prob, 0.015) << "id " << id;
}

TEST(Sampler, GreedyPicksArgmaxWithLogprobZero) {
  SampleRng rng(1, 0);
  GeneratedToken t = sample_token(kLogits.data(), 4, params(0), rng);
  EXPECT_EQ(t.id, 3);
  EXPECT_FLOAT_EQ(t.logprob, 0.0f);  // a point mass
  EXPECT_NEAR(t.raw_logprob, std::log(0.4), kTol);
  // Ties go to the lowest id.
  std::array<float, 3> tie = {1.0f, 2.0f, 2.0f};
  EXPECT_EQ(sample_token(tie.data(), 3, params(0), rng).id, 1);
}

TEST(Sampler, TemperatureOneSamplesTheRawDistribution) {
  expect_frequencies(params(1.0), {{0, 0.1}, {1, 0.2}, {2, 0.3}, {3, 0.4}});
}

TEST(Sampler, TemperatureSharpens) {
  // T = 0.5: p^2 / sum p^2 = 1, 4, 9, 16 over 30.
  expect_frequencies(params(0.5), {{0, 1 / 30.0}, {1, 4 / 30.0}, {2, 9 / 30.0}, {3, 16 / 30.0}});
  // T = 2: sqrt(p) renormalised.
  const double z = 1 + std::sqrt(2.0) + std::sqrt(3.0) + 2;
  expect_frequencies(params(2.0),
                     {{0, 1 / z}, {1, std::sqrt(2.0) / z}, {2, std::sqrt(3.0) / z}, {3, 2 / z}});
}

TEST(Sampler, TopKKeepsTheBestK) {
  expect_frequencies(params(1.0, 1.0, 2), {{2, 3 / 7.0}, {3, 4 / 7.0}});
  expect_frequencies(params(1.0, 1.0, 1), {{3, 1.0}});
  expect_frequencies(params(1.0, 1.0, 10),
                     {{0, 0.1}, {1, 0.2}, {2, 0.3}, {3, 0.4}});  // k > vocab: no-op
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  expect_frequencies(params(1.0, 0.35), {{3, 1.0}});                   // 0.4 >= 0.35
  expect_frequencies(params(1.0, 0.5), {{3, 4 / 7.0}, {2, 3 / 7.0}});  // 0.4 + 0.3
  expect_frequencies(params(1.0, 0.75), {{3, 0.4 / 0.9}, {2, 0.3 / 0.9}, {1, 0.2 / 0.9}});
}

TEST(Sampler, TemperatureThenTopKThenTopP) {
  // T = 0.5 → 1, 4, 9, 16; top-k 3 → 4, 9, 16 (sum 29: 0.138, 0.310, 0.552);
  // top-p 0.6 → 16, 9 (0.862 >= 0.6) → 16/25, 9/25.
  expect_frequencies(params(0.5, 0.6, 3), {{3, 16 / 25.0}, {2, 9 / 25.0}});
}

TEST(Sampler, TopPOverALargeVocabularySortsOnlyWhatItNeeds) {
  // 5000 ids: one dominant id holds about half the mass, the rest share it evenly; top_p 0.9 must
  // reach deep into the tail (past the first 64-id prefix), and the kept set is renormalised.
  std::vector<float> logits(5000, 0.0f);
  logits[4321] = std::log(4999.0f);  // weight 4999 vs 4999 * 1
  SamplingParams p = params(1.0, 0.9);
  SampleRng rng(7, 0);
  int dominant = 0;
  for (int i = 0; i < 2000; ++i) {
    GeneratedToken t = sample_token(logits.data(), 5000, p, rng);
    // Kept: the dominant id (0.5) plus the lowest ids of the tail until 0.9: 0.4 * 9998 = 3999.2 →
    // 4000 tail ids (ties keep lower ids first), so the kept mass is 4999 + 4000 = 8999.
    if (t.id == 4321) {
      ++dominant;
      EXPECT_NEAR(t.logprob, std::log(4999.0 / 8999.0), 1e-4);
    } else {
      EXPECT_LT(t.id, 4000);
      EXPECT_NEAR(t.logprob, std::log(1.0 / 8999.0), 1e-4);
    }
    EXPECT_NEAR(t.raw_logprob, t.id == 4321 ? std::log(0.5) : std::log(1.0 / 9998.0), 1e-4);
  }
  EXPECT_NEAR(dominant / 2000.0, 4999.0 / 8999.0, 0.04);
}

TEST(Sampler, TopLogprobsAreRawBestFirst) {
  SamplingParams p = params(0.7, 0.5, 3);
  p.top_logprobs = 3;
  SampleRng rng(3, 0);
  GeneratedToken t = sample_token(kLogits.data(), 4, p, rng);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(t.top_logprobs[j].id, 3 - j);
    EXPECT_NEAR(t.top_logprobs[j].logprob, std::log(0.1 * (4 - j)),
                kTol);  // raw, not the truncated ones
  }
  std::array<float, 4> tie = {0.5f, 1.0f, 0.5f, 1.0f};
  p.top_logprobs = 4;
  GeneratedToken u = sample_token(tie.data(), 4, p, rng);
  ASSERT_EQ(u.top_logprobs.size(), 4u);
  EXPECT_EQ(u.top_logprobs[0].id, 1);
  EXPECT_EQ(u.top_logprobs[1].id, 3);
  EXPECT_EQ(u.top_logprobs[2].id, 0);
  EXPECT_EQ(u.top_logprobs[3].id, 2);
}

TEST(Sampler, SameSeedAndStreamSameTokens) {
  std::vector<float> logits(300);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 3;
  auto run = [&](uint64_t seed, uint64_t stream) {
    SampleRng rng(seed, stream);
    std::vector<int32_t> ids;
    for (int i = 0; i < 50; ++i)
      ids.push_back(sample_token(logits.data(), 300, params(1.0, 0.9, 50), rng).id);
    return ids;
  };
  EXPECT_EQ(run(42, 0), run(42, 0));
  EXPECT_NE(run(42, 0), run(42, 1));
  EXPECT_NE(run(42, 0), run(43, 0));
}

TEST(Sampler, RngIsUniform) {
  SampleRng rng(5, 2);
  double sum = 0, lo = 1, hi = 0;
  for (int i = 0; i < 100000; ++i) {
    double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.999);
}

TEST(Sampler, BadParametersNameTheField) {
  auto message = [](const SamplingParams& p) {
    try {
      validate_sampling_params(p);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(params(-0.1)).find("temperature"), std::string::npos);
  EXPECT_NE(message(params(NAN)).find("temperature"), std::string::npos);
  EXPECT_NE(message(params(1.0, 0.0)).find("top_p"), std::string::npos);
  EXPECT_NE(message(params(1.0, 1.5)).find("top_p"), std::string::npos);
  EXPECT_NE(message(params(1.0, 1.0, -1)).find("top_k"), std::string::npos);
  EXPECT_EQ(message(params(0.0, 1.0, 0)), "accepted");
}

}  // namespace
}  // namespace ajet::batching
