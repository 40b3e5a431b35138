// Merged vs unmerged gradients (issues 5 and 6) on real episodes: agents converse through the
// front's EpisodeTracker with a real BPE tokenizer and the Qwen2.5 chat template (system prompt,
// tool call, tool result, follow-up questions), token-in/token-out splicing on. Each episode merges
// into one sample; the same calls as one sample per call (prompt as context, completion trained)
// give the same loss and gradients under the conditions of trainer.h "Merging invariance":
// token-mean aggregation, advantages per episode, and per-call samples weighted 1 like the merged
// linear episode. Tolerance: max |a - b| / max |b| < 1e-5 over all gradients (float summation order
// differs), loss within 1e-5 relative.
#include <gtest/gtest.h>

#include "tracking/merge.h"
#include "tracking/tracking_test_util.h"
#include "train_test_util.h"

namespace ajet::train {
namespace {

using text::Role;
using tracking::testing::message;
using tracking::testing::serve;

// One agent's episode of four calls: it asks a tool, reads the result, answers, then answers a
// follow-up. `variant` changes the wording so the episodes of a group differ.
std::vector<tracking::CallRecord> converse(const text::Tokenizer& tok,
                                           const tracking::ChatFormat& f, const std::string& uuid,
                                           int variant) {
  tracking::EpisodeTracker tracker(uuid, f);
  text::ChatRequest req;
  req.tools = {text::OrderedJson::parse(
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})")};
  const std::string city = variant % 2 == 0 ? "Paris" : "London";
  req.messages = {message(Role::kSystem, "You are a helpful assistant."),
                  message(Role::kUser, "Hello agent, what is the weather in " + city + "?")};
  auto ids = [&](const std::string& text) {
    auto v = tok.encode(text, false);
    v.push_back(f.end_of_turn);
    return v;
  };
  int64_t index = 0;
  auto s1 = serve(tracker, "agent", index++, req,
                  ids("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"" +
                      city + "\"}}\n</tool_call>"),
                  tracking::FinishReason::kStop);
  EXPECT_EQ(s1.answer.tool_calls.size(), 1u);
  req.messages.push_back(s1.answer);
  text::ChatMessage result = message(
      Role::kTool, "{\"sky\": \"sunny\", \"degrees\": " + std::to_string(18 + variant) + "}");
  if (!s1.answer.tool_calls.empty()) result.tool_call_id = s1.answer.tool_calls[0].id;
  req.messages.push_back(result);
  auto s2 = serve(tracker, "agent", index++, req,
                  ids("The weather in " + city + " is sunny, twenty degrees."),
                  tracking::FinishReason::kStop);
  req.messages.push_back(s2.answer);
  req.messages.push_back(
      message(Role::kUser, variant == 2 ? "And the answer?" : "Thank you. And London?"));
  auto s3 = serve(tracker, "agent", index++, req,
                  ids(variant == 2 ? "The answer is forty two." : "Please call the weather tool."),
                  tracking::FinishReason::kStop);
  req.messages.push_back(s3.answer);
  req.messages.push_back(message(Role::kUser, "Hello world"));
  serve(tracker, "agent", index++, req, ids("Hello, the quick brown fox jumps over the lazy dog."),
        tracking::FinishReason::kStop);
  return tracker.calls();
}

TEST(MergeEquality, TrackedEpisodesMergedEqualOneSamplePerCall) {
  auto tok = tracking::testing::trained_tokenizer();
  const auto f = tracking::ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  auto config = testing::qwen2_config();
  config.vocab_size = static_cast<int64_t>(tok->vocab_size());
  config.max_position_embeddings =
      4096;  // the tools block of the template alone is longer than the test config's 64
  auto base = testing::random_model(config, 51);

  train_data::Batch merged, per_call;
  for (int g = 0; g < 2; ++g) {
    for (int e = 0; e < 3; ++e) {
      const std::string uuid = "ep-" + std::to_string(g) + "-" + std::to_string(e);
      const std::string task = "task-" + std::to_string(g);
      const double reward = static_cast<double>((e * 5 + g) % 3) - 0.7;
      const auto calls = converse(*tok, f, uuid, e + g);
      ASSERT_EQ(calls.size(), 4u);
      tracking::MergedEpisode m = tracking::merge_episode({uuid, task, reward}, calls, {});
      ASSERT_EQ(m.samples.size(), 1u) << "a linear tracked conversation merges into one sample";
      merged.samples.push_back(train_data::batch_from_samples(m.samples).samples.at(0));
      for (const auto& call : calls) {
        train_data::TrainSample s;
        s.episode_uuid = uuid;
        s.task_id = task;
        s.reward = reward;
        s.weight = 1;  // a linear episode: one branch, like its merged sample
        s.token_ids = call.prompt_ids;
        s.token_ids.insert(s.token_ids.end(), call.completion_ids.begin(),
                           call.completion_ids.end());
        s.loss_mask.assign(call.prompt_ids.size(), 0);
        s.loss_mask.insert(s.loss_mask.end(), call.completion_ids.size(), 1);
        s.logprobs.assign(call.prompt_ids.size(), 0.0f);
        s.logprobs.insert(s.logprobs.end(), call.logprobs.begin(), call.logprobs.end());
        per_call.samples.push_back(std::move(s));
      }
    }
  }
  EXPECT_DOUBLE_EQ(merged.samples[0].weight, 1.0);
  ASSERT_EQ(merged.trained_tokens(), per_call.trained_tokens());
  EXPECT_LT(merged.tokens() * 2, per_call.tokens()) << "merging must save the repeated prefixes";

  train_data::TrainerOptions o = testing::test_options();
  o.aggregation = train_data::LossAggregation::kTokenMean;
  o.episode_weighting = true;
  o.loss.use_kl = true;
  o.loss.kl_coef = 0.1;
  o.loss.entropy_coef = 0.01;
  for (auto packing : {train_data::Packing::kPlain, train_data::Packing::kTree}) {
    for (bool recompute : {true, false}) {
      o.packing = packing;
      o.recompute_old_logprobs = recompute;
      const std::string what = std::string(train_data::packing_name(packing)) +
                               (recompute ? " recompute" : " rollout logprobs");
      Trainer a(testing::clone_model(base), o), b(testing::clone_model(base), o);
      train_data::TrainMetrics ma, mb;
      auto ga = testing::step_gradients(a, merged, &ma);
      auto gb = testing::step_gradients(b, per_call, &mb);
      ASSERT_EQ(ga.size(), 1u);
      ASSERT_EQ(gb.size(), 1u);
      EXPECT_LT(testing::relative_difference(ga[0], gb[0]), 1e-5) << what;
      double largest = 0;
      for (const auto& t : gb[0]) largest = std::max(largest, t.abs().max().item<double>());
      EXPECT_GT(largest, 1e-4) << what << ": the comparison needs gradients that are not zero";
      EXPECT_NEAR(ma.loss, mb.loss, 1e-5 * std::max(1.0, std::abs(mb.loss))) << what;
      EXPECT_NEAR(ma.pg_loss, mb.pg_loss, 1e-5 * std::max(1.0, std::abs(mb.pg_loss))) << what;
      EXPECT_NEAR(ma.kl, mb.kl, 1e-6) << what;
      EXPECT_NEAR(ma.entropy, mb.entropy, 1e-5) << what;
      EXPECT_EQ(ma.trained_tokens, mb.trained_tokens) << what;
      // Plain packing computes every repeated prefix again; tree packing shares them (the trie
      // again).
      if (packing == train_data::Packing::kPlain) {
        EXPECT_LT(ma.packed_tokens * 2, mb.packed_tokens) << what;
      } else {
        EXPECT_LE(ma.packed_tokens, mb.packed_tokens) << what;
      }
    }
  }
}

}  // namespace
}  // namespace ajet::train
