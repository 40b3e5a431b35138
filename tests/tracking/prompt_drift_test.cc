// Token-in/token-out with real tokenizers: a multi-turn conversation whose completions re-tokenize
// differently from what was generated (ids that are not the canonical BPE of their text, a turn cut
// mid-word by max_tokens, whitespace the client strips, tool-call JSON the template respaces) must
// keep every prompt an exact extension of the previous prompt + completion, and merge into one
// sample. Runs with a BPE tokenizer trained in-process (Qwen2.5 template) and with the real Qwen3
// tokenizer from the npm cache (skipped loudly when the cache is unavailable).
#include <gtest/gtest.h>

#include <thread>

#include "tracking/episode_tracker.h"
#include "tracking/merge.h"
#include "tracking_test_util.h"

namespace ajet::tracking {
namespace {

using testing::message;
using testing::serve;
using text::Role;
using Ids = std::vector<TokenId>;
using testing::char_by_char;

bool starts_with(const Ids& whole, const Ids& prefix) {
  return prefix.size() <= whole.size() && std::equal(prefix.begin(), prefix.end(), whole.begin());
}

Ids cat(const Ids& a, const Ids& b) {
  Ids out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// What a renderer without token-in/token-out produces: the template's text, tokenized.
Ids naive_prompt(const ChatFormat& f, const text::ChatRequest& request,
                 const PromptOptions& o = {}) {
  text::RenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = o.enable_thinking;
  return text::tokenize_chat(f.tok(), text::render_chat(f.family, request, ro)).ids;
}

text::OrderedJson weather_tool() {
  return text::OrderedJson::parse(
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
}

// The conversation: four calls, each completion nasty in its own way; the agent only appends.
void run_linear_conversation(const text::Tokenizer& tok, text::ChatFamily family) {
  const ChatFormat f = ChatFormat::create(tok, family);
  EpisodeTracker tracker("ep-drift", f);
  text::ChatRequest req;
  req.tools = {weather_tool()};
  req.messages = {message(Role::kSystem, "You are a helpful assistant."),
                  message(Role::kUser, "Hello agent, what is the weather in Paris?")};
  std::vector<CallRecord> calls;

  // 1. Ids that are not the canonical BPE of their text.
  const std::string t1 = "Hello world, the weather in Paris is sunny.";
  Ids c1 = char_by_char(tok, t1);
  ASSERT_NE(c1, tok.encode(t1)) << "the case must be non-canonical to mean anything";
  c1.push_back(f.end_of_turn);
  auto s1 = serve(tracker, "agent", 0, req, c1, FinishReason::kStop);
  calls.push_back(s1.call);
  EXPECT_EQ(s1.answer.content, t1);

  // 2. Cut by max_tokens in the middle of a word, split non-canonically ("s" + "un").
  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kUser, "And in London?"));
  const Ids p2 = tracker.render("agent", req).ids;
  ASSERT_TRUE(starts_with(p2, cat(s1.call.prompt_ids, c1)))
      << "prompt 2 must extend prompt 1 + completion 1";
  EXPECT_NE(p2, naive_prompt(f, req)) << "re-tokenizing the history would have drifted";
  Ids c2 = tok.encode("The weather in London is ");
  for (const Ids& part : {tok.encode("s", false), tok.encode("un", false)})
    c2.insert(c2.end(), part.begin(), part.end());
  auto s2 = serve(tracker, "agent", 1, req, c2, FinishReason::kLength);
  calls.push_back(s2.call);
  EXPECT_EQ(s2.call.prompt_ids, p2);
  EXPECT_FALSE(s2.call.ended_with_end_token);

  // 3. Whitespace the client strips before sending the history back.
  req.messages.push_back(s2.answer);
  req.messages.push_back(message(Role::kUser, "Please check with the tool."));
  const Ids p3 = tracker.render("agent", req).ids;
  ASSERT_TRUE(starts_with(p3, cat(s2.call.prompt_ids, c2)));
  // The template closes the truncated turn with its own end token.
  EXPECT_EQ(p3[s2.call.prompt_ids.size() + c2.size()], f.end_of_turn);
  const std::string t3 = "  Sure:\n\n\tI will  check \n";
  Ids c3 = tok.encode(t3);
  c3.push_back(f.end_of_turn);
  auto s3 = serve(tracker, "agent", 2, req, c3, FinishReason::kStop);
  calls.push_back(s3.call);

  // 4. A tool call whose JSON the template writes with different spacing.
  text::ChatMessage stripped = s3.answer;
  stripped.content = "Sure:\n\n\tI will  check";
  req.messages.push_back(stripped);
  req.messages.push_back(message(Role::kUser, "Go on."));
  const Ids p4 = tracker.render("agent", req).ids;
  ASSERT_TRUE(starts_with(p4, cat(s3.call.prompt_ids, c3)));
  EXPECT_NE(p4, naive_prompt(f, req));
  const std::string t4 =
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"London\"}}\n</tool_call>";
  Ids c4 = tok.encode(t4);
  c4.push_back(f.end_of_turn);
  auto s4 = serve(tracker, "agent", 3, req, c4, FinishReason::kStop);
  calls.push_back(s4.call);
  ASSERT_EQ(s4.answer.tool_calls.size(), 1u);

  // 5. The tool result comes back; the final answer.
  req.messages.push_back(s4.answer);
  text::ChatMessage result = message(Role::kTool, "{\"temperature\": 18, \"sky\": \"cloudy\"}");
  result.tool_call_id = s4.answer.tool_calls[0].id;
  req.messages.push_back(result);
  const Ids p5 = tracker.render("agent", req).ids;
  ASSERT_TRUE(starts_with(p5, cat(s4.call.prompt_ids, c4)));
  EXPECT_NE(p5, naive_prompt(f, req));
  Ids c5 = tok.encode("It is cloudy in London, 18 degrees.");
  c5.push_back(f.end_of_turn);
  auto s5 = serve(tracker, "agent", 4, req, c5, FinishReason::kStop);
  calls.push_back(s5.call);
  for (const RenderNote& n : s5.call.render_notes) {
    EXPECT_EQ(n.kind, RenderNote::Kind::kSpliced)
        << "message " << n.message_index << ": " << n.detail;
  }
  EXPECT_EQ(s5.call.render_notes.size(), 4u);

  // Merged: one sample, trained exactly on what was generated.
  MergedEpisode m = merge_episode({"ep-drift", "task", 1.0}, tracker.calls(), {});
  ASSERT_EQ(m.samples.size(), 1u) << m.diagnostics.agents[0].branches[0].reason;
  const Sample& s = m.samples[0];
  EXPECT_EQ(s.token_ids, cat(s5.call.prompt_ids, c5));
  std::vector<uint8_t> mask(s.token_ids.size(), 0);
  for (const CallRecord& c : calls) {
    for (size_t i = 0; i < c.completion_ids.size(); ++i) mask[c.prompt_ids.size() + i] = 1;
  }
  EXPECT_EQ(s.loss_mask, mask);
  EXPECT_GT(m.diagnostics.compression_ratio, 3.0);
}

TEST(PromptDrift, TrainedBpeLinearConversationIsExactAndOneSample) {
  auto tok = testing::trained_tokenizer();
  run_linear_conversation(*tok, text::ChatFamily::kQwen2_5);
}

TEST(PromptDrift, Qwen3LinearConversationIsExactAndOneSample) {
  std::string why;
  const text::Tokenizer* tok = testing::qwen3_tokenizer(why);
  if (!tok) GTEST_SKIP() << "SKIPPED (Qwen3 tokenizer unavailable): " << why;
  run_linear_conversation(*tok, text::ChatFamily::kQwen3);
}

class Qwen3Thinking : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    tok_ = testing::qwen3_tokenizer(why);
    if (!tok_) GTEST_SKIP() << "SKIPPED (Qwen3 tokenizer unavailable): " << why;
    format_ = std::make_unique<ChatFormat>(ChatFormat::create(*tok_, text::ChatFamily::kQwen3));
  }
  Ids gen(const std::string& s) {
    Ids ids = tok_->encode(s);
    ids.push_back(format_->end_of_turn);
    return ids;
  }
  const text::Tokenizer* tok_ = nullptr;
  std::unique_ptr<ChatFormat> format_;
};

TEST_F(Qwen3Thinking, TemplateDroppingThinkBeforeANewQueryMakesAnExplainedBranch) {
  for (bool keep : {false, true}) {
    EpisodeTracker tracker("ep", *format_);
    PromptOptions o;
    o.keep_generated_reasoning = keep;
    text::ChatRequest req;
    req.messages = {message(Role::kSystem, "Be brief."), message(Role::kUser, "What is 2+2?")};
    auto s1 = serve(tracker, "agent", 0, req,
                    gen("<think>\nThe user wants 2+2.\n</think>\n\nThe answer is 4."),
                    FinishReason::kStop, o);
    ASSERT_EQ(s1.answer.content, "The answer is 4.");
    ASSERT_EQ(s1.answer.reasoning_content.value_or(""), "The user wants 2+2.");
    req.messages.push_back(s1.answer);
    req.messages.push_back(message(Role::kUser, "And 3+3?"));
    auto s2 = serve(tracker, "agent", 1, req, gen("<think>\nEasy.\n</think>\n\n6."),
                    FinishReason::kStop, o);
    ASSERT_EQ(s2.call.render_notes.size(), 1u);
    MergedEpisode m = merge_episode({"ep", "t", 1.0}, tracker.calls(), {});
    if (keep) {
      EXPECT_EQ(s2.call.render_notes[0].kind, RenderNote::Kind::kKeptReasoning);
      EXPECT_TRUE(starts_with(s2.call.prompt_ids, cat(s1.call.prompt_ids, s1.call.completion_ids)));
      EXPECT_EQ(m.samples.size(), 1u);
    } else {
      EXPECT_EQ(s2.call.render_notes[0].kind, RenderNote::Kind::kRewritten)
          << s2.call.render_notes[0].detail;
      EXPECT_EQ(s2.call.prompt_ids, naive_prompt(*format_, req))
          << "not spliced: the template's rendering";
      ASSERT_EQ(m.samples.size(), 2u);
      const BranchDiagnostic& b = m.diagnostics.agents[0].branches.at(0);
      EXPECT_EQ(b.kind, "template_rewrote") << b.reason;
      EXPECT_EQ(b.call, 1);
      EXPECT_EQ(b.message_index, 2);
      EXPECT_EQ(b.role, "assistant");
      EXPECT_EQ(b.other_call, 0);
      EXPECT_EQ(b.other_part, "completion");
    }
  }
}

TEST_F(Qwen3Thinking, ToolLoopKeepsThinkingAndStaysOneSample) {
  EpisodeTracker tracker("ep", *format_);
  text::ChatRequest req;
  req.tools = {weather_tool()};
  req.messages = {message(Role::kUser, "Weather in Paris?")};
  auto s1 = serve(tracker, "agent", 0, req,
                  gen("<think>\nI need the tool.\n</think>\n\n<tool_call>\n{\"name\": "
                      "\"get_weather\", \"arguments\": "
                      "{\"city\": \"Paris\"}}\n</tool_call>"),
                  FinishReason::kStop);
  ASSERT_EQ(s1.answer.tool_calls.size(), 1u);
  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kTool, "sunny"));
  auto s2 = serve(tracker, "agent", 1, req, gen("<think>\nDone.\n</think>\n\nSunny."),
                  FinishReason::kStop);
  EXPECT_EQ(s2.call.render_notes.at(0).kind, RenderNote::Kind::kSpliced)
      << s2.call.render_notes[0].detail;
  EXPECT_TRUE(starts_with(s2.call.prompt_ids, cat(s1.call.prompt_ids, s1.call.completion_ids)));
  EXPECT_EQ(merge_episode({"ep", "t", 1.0}, tracker.calls(), {}).samples.size(), 1u);

  // A client that drops reasoning_content: the template renders no think block, so no splice.
  EpisodeTracker t2("ep2", *format_);
  text::ChatRequest r2;
  r2.tools = req.tools;
  r2.messages = {req.messages[0]};
  auto a1 = serve(t2, "agent", 0, r2, s1.call.completion_ids, FinishReason::kStop);
  a1.answer.reasoning_content.reset();
  r2.messages.push_back(a1.answer);
  r2.messages.push_back(message(Role::kTool, "sunny"));
  EXPECT_EQ(t2.render("agent", r2).notes.at(0).kind, RenderNote::Kind::kRewritten);
}

TEST_F(Qwen3Thinking, EnableThinkingFalseSplicesWithTheEmptyThinkBlock) {
  EpisodeTracker tracker("ep", *format_);
  PromptOptions o;
  o.enable_thinking = false;
  text::ChatRequest req;
  req.messages = {message(Role::kUser, "Hi")};
  auto s1 = serve(tracker, "agent", 0, req, gen("Hello  there !"), FinishReason::kStop, o);
  EXPECT_NE(format_->tok().decode(s1.call.prompt_ids).find("<think>\n\n</think>\n\n"),
            std::string::npos);
  req.messages.push_back(s1.answer);
  req.messages.push_back(message(Role::kUser, "Bye"));
  auto s2 = serve(tracker, "agent", 1, req, gen("Bye."), FinishReason::kStop, o);
  EXPECT_EQ(s2.call.render_notes.at(0).kind, RenderNote::Kind::kSpliced);
  EXPECT_TRUE(starts_with(s2.call.prompt_ids, cat(s1.call.prompt_ids, s1.call.completion_ids)));
  EXPECT_EQ(merge_episode({"ep", "t", 1.0}, tracker.calls(), {}).samples.size(), 1u);
}

TEST(PromptRender, SplicingOnlyReusesTheSameAgentsCompletions) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep", f);
  text::ChatRequest req;
  req.messages = {message(Role::kUser, "Hello agent")};
  Ids c = char_by_char(*tok, "Hello world");
  c.push_back(f.end_of_turn);
  auto s = serve(tracker, "planner", 0, req, c, FinishReason::kStop);
  req.messages.push_back(s.answer);
  req.messages.push_back(message(Role::kUser, "next"));
  EXPECT_EQ(tracker.render("planner", req).notes.at(0).kind, RenderNote::Kind::kSpliced);
  EXPECT_EQ(tracker.render("critic", req).notes.at(0).kind, RenderNote::Kind::kNoMatch);
  EXPECT_EQ(tracker.render("critic", req).ids, naive_prompt(f, req));
  PromptOptions off;
  off.splice_generated = false;
  RenderedPrompt p = tracker.render("planner", req, off);
  EXPECT_EQ(p.notes.at(0).kind, RenderNote::Kind::kSplicingDisabled);
  EXPECT_EQ(p.ids, naive_prompt(f, req));
  // Message spans tile the prompt from the end of Qwen2.5's default system preamble up to the
  // generation prompt, in order.
  RenderedPrompt q = tracker.render("planner", req);
  int32_t at = q.message_spans[0].begin;
  EXPECT_NE(tok->decode(std::span<const TokenId>(q.ids).first(static_cast<size_t>(at)))
                .find("You are Qwen"),
            std::string::npos);
  for (const MessageTokens& m : q.message_spans) {
    EXPECT_EQ(m.begin, at);
    at = m.end;
  }
  EXPECT_EQ(at, q.generation_prompt_begin);
  EXPECT_EQ(q.message_spans[1].spliced_from_call, 0);
  EXPECT_EQ(tok->decode(std::span<const TokenId>(q.ids).subspan(
                static_cast<size_t>(q.generation_prompt_begin))),
            f.assistant_header);
}

TEST(PromptRender, TrackerRestoredFromStoreRowsSplicesTheSameWay) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep", f);
  text::ChatRequest req;
  req.messages = {message(Role::kUser, "Hello agent")};
  Ids c = char_by_char(*tok, "Thank you");
  c.push_back(f.end_of_turn);
  auto s = serve(tracker, "agent", 0, req, c, FinishReason::kStop);
  std::vector<store::CallRow> rows = {to_call_row(s.call)};
  rows[0].request_json = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello agent\"}]}";
  auto restored = EpisodeTracker::restore("ep", f, rows);
  req.messages.push_back(s.answer);
  req.messages.push_back(message(Role::kUser, "more"));
  EXPECT_EQ(restored->render("agent", req).ids, tracker.render("agent", req).ids);
  EXPECT_EQ(restored->render("agent", req).notes.at(0).kind, RenderNote::Kind::kSpliced);
  EXPECT_EQ(restored->calls().at(0).completion_text, "Thank you");
  EXPECT_TRUE(restored->calls().at(0).ended_with_end_token);
}

}  // namespace
}  // namespace ajet::tracking

namespace ajet::tracking {
namespace {

TEST(PromptRender, ConcurrentAgentsRecordAndRenderSafely) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep", f);
  std::vector<std::thread> threads;
  for (int a = 0; a < 4; ++a) {
    threads.emplace_back([&, a] {
      text::ChatRequest req;
      req.messages = {message(Role::kUser, "Hello agent " + std::to_string(a))};
      for (int k = 0; k < 5; ++k) {
        Ids c = tok->encode("Thank you " + std::to_string(k));
        c.push_back(f.end_of_turn);
        auto s =
            serve(tracker, "agent-" + std::to_string(a), a * 100 + k, req, c, FinishReason::kStop);
        req.messages.push_back(s.answer);
        req.messages.push_back(message(Role::kUser, "more"));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<CallRecord> calls = tracker.calls();
  ASSERT_EQ(calls.size(), 20u);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_LT(calls[i - 1].call_index, calls[i].call_index);
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, calls, {});
  EXPECT_EQ(m.samples.size(), 4u) << "one linear conversation per agent";
  for (const Sample& s : m.samples) EXPECT_DOUBLE_EQ(s.weight, 0.25);
}

}  // namespace
}  // namespace ajet::tracking
