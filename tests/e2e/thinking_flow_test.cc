// Thinking through the real front (ajet-swarm with ajet-echo-engine, which "generates" the last
// user message): a model whose template opens the think block in the generation prompt
// (qwen3-thinking), two user queries, and ajet.context_tracker.keep_earlier_thinking off and on.
// The answer splits reasoning from content although the model never wrote "<think>", and the
// episode's samples are exactly the engine's prompts and completions, trained on the completions
// only: one sample when earlier thinking is kept, one per query when the template drops it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "e2e_util.h"

namespace ajet::e2e {
namespace {

// A stand-in with the markers detection looks for (the front renders with its C++ rules, never
// with Jinja); the Jinja agreement of those rules is tests/text/chat_template_jinja_test.cc.
const char* kThinkingTemplate =
    "{#- stand-in for Qwen3-Thinking-2507: <tool_call> <think> last_query_index -#}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";

class ThinkingFlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_ / "model";
    fs::copy(fixture(false).tokenizer, model_, fs::copy_options::recursive);
    Json config = Json::parse(read_file(model_ / "tokenizer_config.json"));
    config["chat_template"] = kThinkingTemplate;
    write_file_atomic(model_ / "tokenizer_config.json", config.dump(2));
  }
  void boot(bool keep) {
    swarm_ = std::make_unique<SwarmProcess>(SwarmProcess::Options{
        dir_ / ("server-" + std::to_string(keep)), bin("ajet-echo-engine"), "", {}});
    api_ = std::make_unique<Api>(swarm_->url());
    api_->boot(config_yaml(model_, std::string("  context_tracker:\n    keep_earlier_thinking: ") +
                                       (keep ? "true" : "false") + "\n"));
  }
  ScratchDir dir_;
  fs::path model_;
  std::unique_ptr<SwarmProcess> swarm_;
  std::unique_ptr<Api> api_;
};

std::vector<int64_t> ints(const Json& a) {
  return a.is_array() ? a.get<std::vector<int64_t>>() : std::vector<int64_t>{};
}

TEST_F(ThinkingFlowTest, ForcedThinkPromptAndEarlierThinkingKeptOrDropped) {
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "keep_earlier_thinking: true" : "keep_earlier_thinking: false");
    boot(keep);
    Json claim = api_->claim("client-a");
    const std::string key = claim["openai_api_key"], uuid = claim["episode_uuid"];

    // The echo engine "generates" the user's text: reasoning, then "</think>", then the answer.
    Json messages = Json::array({{{"role", "user"}, {"content", "Count\n</think>\n\nOne"}}});
    auto r1 = api_->chat(key, {{"model", "agentjet"}, {"messages", messages}});
    ASSERT_EQ(r1.status, 200) << r1.body;
    const Json m1 = r1.json()["choices"][0]["message"];
    EXPECT_EQ(m1["content"], "One") << m1.dump();
    // (Without tools the front keeps the newline before "</think>"; the template strips it.)
    EXPECT_THAT(m1["reasoning_content"].get<std::string>(), ::testing::StartsWith("Count"))
        << m1.dump();

    messages.push_back(m1);
    messages.push_back({{"role", "user"}, {"content", "Again\n</think>\n\nTwo"}});
    auto r2 = api_->chat(key, {{"model", "agentjet"}, {"messages", messages}});
    ASSERT_EQ(r2.status, 200) << r2.body;
    EXPECT_EQ(r2.json()["choices"][0]["message"]["content"], "Two");

    auto got = api_->get("/episodes/" + uuid);
    ASSERT_EQ(got.status, 200) << got.body;
    Json ep = got.json();  // not const: a missing key reads as null and fails an expectation
    ASSERT_EQ(ep["calls"].size(), 2u);
    Json& c1 = ep["calls"][0];
    Json& c2 = ep["calls"][1];
    // Both generation prompts end in "<think>\n": prompt, never trained.
    for (Json* c : {&c1, &c2}) {
      const auto prompt = ints((*c)["prompt_ids"]);
      const auto gp = (*c)["generation_prompt_begin"].get<size_t>();
      std::string tail;
      for (const Json& piece : (*c)["prompt_pieces"]) tail += piece.get<std::string>();
      EXPECT_THAT(tail, ::testing::EndsWith("<|im_start|>assistant\n<think>\n"));
      EXPECT_LT(gp, prompt.size());
    }

    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> streams;  // prompt, gen
    for (Json* c : {&c1, &c2})
      streams.emplace_back(ints((*c)["prompt_ids"]), ints((*c)["completion_ids"]));
    auto stream_of = [&](size_t k) {
      std::vector<int64_t> s = streams[k].first;
      s.insert(s.end(), streams[k].second.begin(), streams[k].second.end());
      return s;
    };
    auto mask_of = [&](size_t size, std::vector<size_t> trained) {
      std::vector<int64_t> mask(size, 0);
      for (size_t k : trained) {
        for (size_t i = 0; i < streams[k].second.size(); ++i)
          mask.at(streams[k].first.size() + i) = 1;
      }
      return mask;
    };
    Json& samples = ep["samples"];
    if (keep) {
      ASSERT_EQ(samples.size(), 1u) << ep["diagnostics"].dump();
      EXPECT_EQ(ints(samples[0]["token_ids"]), stream_of(1));
      EXPECT_EQ(ints(samples[0]["loss_mask"]), mask_of(stream_of(1).size(), {0, 1}));
    } else {
      ASSERT_EQ(samples.size(), 2u) << ep["diagnostics"].dump();
      for (size_t k = 0; k < 2; ++k) {
        EXPECT_EQ(ints(samples[k]["token_ids"]), stream_of(k));
        EXPECT_EQ(ints(samples[k]["loss_mask"]), mask_of(stream_of(k).size(), {k}));
      }
      Json& branch = ep["diagnostics"]["agents"][0]["branches"][0];
      // Read back from the store (no render notes), the branch is still the template's doing.
      EXPECT_EQ(branch["kind"], "template_rewrote") << branch.dump();
      EXPECT_EQ(branch["other_part"], "generation_prompt") << branch.dump();
    }
    ASSERT_EQ(api_->end("client-a", uuid, "task-1", 1.0).status, 200);
    swarm_.reset();
  }
}

}  // namespace
}  // namespace ajet::e2e
