// Madness detection through the real front and engine (docs/training.md "Madness"): with a
// low-entropy detector whose threshold no 8-token window can pass (8 tokens hold at most 3 bits),
// every generation is "degenerate" at exactly its 8th token: the call ends there with the
// detector's name as finish_reason (OpenAI chat and completions) or end_turn (Anthropic), and the
// engine's stop count shows on /metrics. Both calls are deterministic (a seed; greedy for
// Anthropic, which has no seed): the random fixture model could otherwise end its turn before the
// 8th token.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

TEST(MadnessTest, ADegenerateGenerationStopsAtItsWindowWithTheDetectorsFinishReason) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", {}, "", {}});
  Api api(swarm.url());
  std::string yaml = config_yaml(model);
  yaml.replace(yaml.find("    temperature: 1.0\n"), std::string("    temperature: 1.0\n").size(),
               "    temperature: 1.0\n    madness:\n      entropy_window: 8\n"
               "      min_entropy_bits: 3.1\n");
  api.boot(yaml);

  Json e = api.claim("client-m");
  auto r =
      api.chat(e["openai_api_key"], user_chat("Go on and on", {{"max_tokens", 40}, {"seed", 1}}));
  ASSERT_EQ(r.status, 200) << r.body;
  Json answer = r.json();
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "low_entropy") << r.body;
  EXPECT_EQ(answer["usage"]["completion_tokens"], 8) << r.body;

  http::Headers key;
  key.add("x-api-key", e["openai_api_key"].get<std::string>());
  key.add("anthropic-version", "2023-06-01");
  // Messages have no seed, and the random fixture model sometimes ends its turn before its 8th
  // token (seen under a full parallel ctest run): every call must stop by the 8th token, and at
  // least one of a few prompts must reach it (a broken detector would let them run to 40).
  int cut_at_window = 0;
  for (const char* prompt : {"More", "Keep going", "And then?", "Tell me more", "Continue"}) {
    auto m =
        api.raw_post("/v1/messages",
                     Json{{"model", "agentjet"},
                          {"max_tokens", 40},
                          {"metadata", Json::object()},
                          {"messages", Json::array({{{"role", "user"}, {"content", prompt}}})}},
                     key);
    ASSERT_EQ(m.status, 200) << m.body;
    EXPECT_EQ(m.json()["stop_reason"], "end_turn") << m.body;
    EXPECT_LE(m.json()["usage"]["output_tokens"].get<int64_t>(), 8) << m.body;
    if (m.json()["usage"]["output_tokens"] == 8) ++cut_at_window;
  }
  EXPECT_GE(cut_at_window, 1);
  ASSERT_EQ(api.end("client-m", e["episode_uuid"], "t", 1.0).status, 200);

  // The stored calls keep the detector's name.
  Json doc = api.get("/episodes/" + e["episode_uuid"].get<std::string>()).json();
  EXPECT_THAT(doc.dump(), HasSubstr("\"finish_reason\":\"low_entropy\"")) << doc.dump();

  std::string metrics;
  ASSERT_TRUE(eventually([&] {
    metrics = api.get("/metrics").body;
    return sample_value(metrics, "ajet_engine_madness_stops_total") >= 1 + cut_at_window;
  })) << metrics;
}

}  // namespace
}  // namespace ajet::e2e
