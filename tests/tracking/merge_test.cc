// Timeline merging on hand-built episodes whose right answer is known: linear conversations, length
// truncation, retries, identical generations, edited history, weights, diagnostics, config mapping.
#include <gtest/gtest.h>

#include "common/error.h"
#include "config/config.h"
#include "tracking/merge.h"
#include "tracking/synthetic.h"

namespace ajet::tracking {
namespace {

using Ids = std::vector<TokenId>;
constexpr TokenId kEnd = synthetic::kEndOfTurn;

// A call whose prompt is `prompt` (messages split at the given boundaries), generating
// `completion`.
CallRecord call(int64_t index, Ids prompt, Ids completion, std::vector<int32_t> message_ends = {},
                const std::string& agent = "agent") {
  CallRecord c;
  c.episode_uuid = "ep";
  c.agent_name = agent;
  c.call_index = index;
  c.prompt_ids = std::move(prompt);
  if (message_ends.empty()) message_ends = {static_cast<int32_t>(c.prompt_ids.size())};
  int32_t b = 0;
  for (int32_t e : message_ends) {
    c.message_spans.push_back({b, e, -1});
    text::ChatMessage m;
    m.role = c.request.messages.empty() ? text::Role::kSystem : text::Role::kUser;
    c.request.messages.push_back(m);
    b = e;
  }
  c.generation_prompt_begin = b;
  c.completion_ids = std::move(completion);
  for (size_t i = 0; i < c.completion_ids.size(); ++i) {
    c.logprobs.push_back(-0.01f * static_cast<float>(index * 100 + static_cast<int64_t>(i) + 1));
    c.policy_versions.push_back(static_cast<int32_t>(index));
  }
  c.ended_with_end_token = !c.completion_ids.empty() && c.completion_ids.back() == kEnd;
  c.finish_reason = c.ended_with_end_token ? FinishReason::kStop : FinishReason::kLength;
  return c;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(Merge, LinearConversationIsOneSampleTrainingExactlyTheCompletions) {
  for (int turns : {1, 2, 5, 10, 20}) {
    synthetic::AgentShape shape;
    shape.turns = turns;
    auto group = synthetic::grpo_group(shape, 1, 7);
    const std::vector<CallRecord>& calls = group[0];
    MergedEpisode m = merge_episode({"ep", "task-1", 0.75}, calls, {});
    ASSERT_EQ(m.samples.size(), 1u) << turns << " turns";
    const Sample& s = m.samples[0];
    const CallRecord& last = calls.back();
    EXPECT_EQ(s.token_ids, cat({last.prompt_ids, last.completion_ids}));
    // Mask 1 exactly where some call generated, with that call's logprob.
    std::vector<uint8_t> expected_mask(s.token_ids.size(), 0);
    std::vector<float> expected_lp(s.token_ids.size(), 0.0f);
    for (const CallRecord& c : calls) {
      for (size_t i = 0; i < c.completion_ids.size(); ++i) {
        expected_mask[c.prompt_ids.size() + i] = 1;
        expected_lp[c.prompt_ids.size() + i] = c.logprobs[i];
      }
    }
    EXPECT_EQ(s.loss_mask, expected_mask);
    EXPECT_EQ(s.logprobs, expected_lp);
    EXPECT_EQ(s.weight, 1.0);
    EXPECT_EQ(s.reward, 0.75);
    EXPECT_EQ(s.task_id, "task-1");
    EXPECT_EQ(s.calls.size(), calls.size());
    const auto& d = m.diagnostics;
    int64_t before = 0;
    for (const CallRecord& c : calls) before += static_cast<int64_t>(c.stream_size());
    EXPECT_EQ(d.tokens_before, before);
    EXPECT_EQ(d.tokens_after, static_cast<int64_t>(s.token_ids.size()));
    EXPECT_DOUBLE_EQ(d.compression_ratio,
                     static_cast<double>(before) / static_cast<double>(s.token_ids.size()));
    EXPECT_TRUE(d.agents[0].branches.empty());
  }
}

TEST(Merge, TemplateEndTokenAfterTruncationIsNotTrained) {
  const Ids sys = {1, 3, 20, 21, 22};
  const Ids gen = {1, 5};
  CallRecord a = call(0, cat({sys, gen}), {30, 31, 32}, {5});  // length: no end token
  // The next prompt: the template closes the truncated turn with its own end token, then a user
  // turn.
  CallRecord b =
      call(1, cat({sys, gen, {30, 31, 32}, {kEnd}, {1, 4, 40}, gen}), {50, kEnd}, {5, 11, 14});
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a, b}, {});
  ASSERT_EQ(m.samples.size(), 1u);
  const Sample& s = m.samples[0];
  ASSERT_EQ(s.token_ids[10], kEnd);
  EXPECT_EQ(s.loss_mask[10], 0) << "the end token the template added after a truncated completion";
  EXPECT_EQ(s.policy_versions[10], -1);
  EXPECT_EQ(s.loss_mask[7], 1);
  EXPECT_EQ(s.loss_mask[9], 1);
  EXPECT_EQ(s.loss_mask.back(), 1) << "the generated end token is trained";
}

TEST(Merge, RetryBranchesAtTheCompletionAndSharesIdenticalGeneratedTokens) {
  const Ids prompt = {1, 3, 20, 21, 1, 5};
  CallRecord a = call(0, prompt, {30, 31, kEnd});
  CallRecord b = call(1, prompt, {30, 33, 34, kEnd});  // same first token, then different
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a, b}, {});
  ASSERT_EQ(m.samples.size(), 2u);
  EXPECT_EQ(m.samples[0].token_ids, cat({prompt, {30, 31, kEnd}}));
  EXPECT_EQ(m.samples[1].token_ids, cat({prompt, {30, 33, 34, kEnd}}));
  // Token 30 after `prompt`: one node generated twice, trained once (in the first sample) with the
  // first generation's logprob; context in the second sample.
  EXPECT_EQ(m.samples[0].loss_mask[6], 1);
  EXPECT_EQ(m.samples[1].loss_mask[6], 0);
  EXPECT_EQ(m.samples[1].logprobs[6], a.logprobs[0]);
  EXPECT_EQ(m.samples[1].loss_mask[7], 1);
  const auto& d = m.diagnostics.agents[0];
  EXPECT_EQ(d.duplicate_generated_tokens, 1);
  EXPECT_EQ(d.unique_generated_tokens, 6);
  EXPECT_EQ(d.trained_tokens, 6);
  ASSERT_EQ(d.branches.size(), 1u);
  EXPECT_EQ(d.branches[0].kind, "retry");
  EXPECT_EQ(d.branches[0].position, 7);
  EXPECT_EQ(d.branches[0].from_sample, 0);
  EXPECT_EQ(d.branches[0].call, 1);
  EXPECT_EQ(d.branches[0].other_call, 0);
  EXPECT_EQ(d.branches[0].token, 33);
  EXPECT_EQ(d.branches[0].other_token, 31);
  for (const Sample& s : m.samples) EXPECT_DOUBLE_EQ(s.weight, 0.5);
}

TEST(Merge, EditedCompletionAndTemplateRewriteAreExplained) {
  const Ids sys = {1, 3, 20, 21};
  const Ids user = {1, 4, 22};
  const Ids gen = {1, 5};
  CallRecord a = call(0, cat({sys, user, gen}), {30, 31, kEnd}, {4, 7});
  // Call 1's history has the assistant turn with different ids (re-rendered text), then a user
  // turn.
  CallRecord b =
      call(1, cat({sys, user, gen, {30, 39, kEnd}, {1, 4, 23}, gen}), {50, kEnd}, {4, 7, 12, 15});
  b.request.messages[2].role = text::Role::kAssistant;
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a, b}, {});
  ASSERT_EQ(m.samples.size(), 2u);
  ASSERT_EQ(m.diagnostics.agents[0].branches.size(), 1u);
  BranchDiagnostic br = m.diagnostics.agents[0].branches[0];
  EXPECT_EQ(br.kind, "edited_completion");
  EXPECT_EQ(br.position, 10);
  EXPECT_EQ(br.message_index, 2);
  EXPECT_EQ(br.role, "assistant");
  EXPECT_EQ(br.other_part, "completion");
  EXPECT_NE(br.reason.find("call 1 message 2 (assistant)"), std::string::npos) << br.reason;

  b.render_notes.push_back({RenderNote::Kind::kRewritten, 2, 0, "the template dropped <think>"});
  m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a, b}, {});
  br = m.diagnostics.agents[0].branches[0];
  EXPECT_EQ(br.kind, "template_rewrote");
  EXPECT_NE(br.reason.find("dropped <think>"), std::string::npos) << br.reason;

  // A different user message in an otherwise shared history.
  CallRecord c = call(2, cat({sys, {1, 4, 24}, gen}), {60, kEnd}, {4, 7});
  m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a, c}, {});
  br = m.diagnostics.agents[0].branches[0];
  EXPECT_EQ(br.kind, "history_differs");
  EXPECT_EQ(br.position, 6);
  EXPECT_EQ(br.message_index, 1);
  EXPECT_EQ(br.other_message_index, 1);
}

TEST(Merge, CallsWithoutGeneratedTokensMakeNoSample) {
  const Ids prompt = {1, 3, 20, 1, 5};
  CallRecord a = call(0, prompt, {});  // aborted before its first token
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a}, {});
  EXPECT_TRUE(m.samples.empty());
  CallRecord b = call(1, prompt, {30, kEnd});
  CallRecord c = call(2, cat({prompt, {30, kEnd}, {1, 4, 21}, {1, 5}}), {});  // aborted later
  m = merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{a, b, c}, {});
  ASSERT_EQ(m.samples.size(), 1u);
  EXPECT_EQ(m.samples[0].token_ids, cat({prompt, {30, kEnd}}));
  EXPECT_EQ(m.samples[0].calls,
            (std::vector<int64_t>{0, 1, 2}));  // call 0's prompt is a prefix too
}

TEST(Merge, NonTrainableAgentsAreShownNotTrainedAndDoNotDiluteWeights) {
  const Ids p = {1, 3, 20, 1, 5};
  std::vector<CallRecord> calls = {call(0, p, {30, kEnd}, {}, "solver"),
                                   call(1, p, {30, kEnd}, {}, "judge"),
                                   call(2, p, {31, kEnd}, {}, "solver")};
  MergeOptions o;
  o.trainable_agents = {"solver"};
  MergedEpisode m = merge_episode({"ep", "t", 2.0}, calls, o);
  ASSERT_EQ(m.samples.size(), 3u);
  EXPECT_EQ(m.samples[0].agent_name, "solver");
  EXPECT_EQ(m.samples[1].agent_name, "solver");
  EXPECT_EQ(m.samples[2].agent_name, "judge");
  EXPECT_DOUBLE_EQ(m.samples[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(m.samples[2].weight, 0.0);
  EXPECT_FALSE(m.samples[2].trainable);
  EXPECT_EQ(m.samples[2].trained_tokens(), 0u);
  EXPECT_EQ(m.diagnostics.trainable_samples, 2);
  ASSERT_EQ(m.diagnostics.agents.size(), 2u);
  EXPECT_EQ(m.diagnostics.agents[1].agent_name, "judge");
  EXPECT_FALSE(m.diagnostics.agents[1].trainable);
}

// One agent's calls on two LoRA adapters are two policies' calls: never merged into one sample,
// even where one call's stream extends the other's; each sample names the adapter it trains.
TEST(Merge, CallsOnDifferentAdaptersAreSeparateSamples) {
  const Ids p = {1, 3, 20, 1, 5};
  std::vector<CallRecord> calls = {call(0, p, {30, kEnd}),
                                   call(1, cat({p, {30, kEnd, 1, 5}}), {31, kEnd}),
                                   call(2, p, {30, kEnd})};
  MergedEpisode same = merge_episode({"ep", "t", 1.0}, calls, {});
  EXPECT_EQ(same.samples.size(), 1u);  // one policy: the calls merge
  calls[1].adapter = "solver";
  calls[2].adapter = "solver";
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, calls, {});
  ASSERT_EQ(m.samples.size(), 2u);
  EXPECT_EQ(m.samples[0].adapter, "");
  EXPECT_EQ(m.samples[1].adapter, "solver");
  EXPECT_EQ(m.samples[0].token_ids, cat({p, {30, kEnd}}));
  EXPECT_EQ(m.samples[1].token_ids, cat({p, {30, kEnd, 1, 5, 31, kEnd}}));
}

TEST(Merge, BadInputIsAnErrorNamingTheField) {
  CallRecord c = call(0, {1, 2, 3}, {4, 5});
  c.logprobs.pop_back();
  try {
    merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{c}, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("logprobs"), std::string::npos) << e.what();
  }
  MergeOptions text;
  text.compare_level = CompareLevel::kText;
  EXPECT_THROW(merge_episode({"ep", "t", 1.0}, std::vector<CallRecord>{call(0, {1}, {2})}, text),
               Error);
  EXPECT_THROW(compare_level_from_name("tokens"), Error);
}

TEST(Merge, OptionsComeFromTheConfig) {
  config::Config cfg;
  cfg.context_tracker.timeline_compare_level = "token";
  cfg.context_tracker.trainable_agents = {"a"};
  cfg.rollout.multi_turn.max_sample_per_task = 7;
  MergeOptions o = MergeOptions::from_config(cfg, nullptr);
  EXPECT_EQ(o.compare_level, CompareLevel::kToken);
  EXPECT_EQ(o.max_samples_per_episode, 7);
  EXPECT_TRUE(o.is_trainable("a"));
  EXPECT_FALSE(o.is_trainable("b"));
  cfg.context_tracker.timeline_compare_level = "text";
  EXPECT_EQ(MergeOptions::from_config(cfg, nullptr).compare_level, CompareLevel::kText);
}

}  // namespace
}  // namespace ajet::tracking
