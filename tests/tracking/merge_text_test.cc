// Text-level merging (upstream's fallback) with a real tokenizer: a client whose history is
// re-rendered from text (no token-in/token-out) splits the token trie at every turn, while text
// level merges it into one sample that trains the exact generated ids.
#include <gtest/gtest.h>

#include "tracking/merge.h"
#include "tracking_test_util.h"

namespace ajet::tracking {
namespace {

using testing::message;
using testing::serve;
using text::Role;
using Ids = std::vector<TokenId>;
using testing::char_by_char;

struct Conversation {
  std::vector<CallRecord> calls;
  std::vector<Ids> completions;
};

// Three turns; histories re-rendered from text (splicing off), completions non-canonical.
Conversation re_rendered(EpisodeTracker& tracker, const ChatFormat& f,
                         std::vector<text::OrderedJson> tools = {}, bool vary_tools = false) {
  PromptOptions off;
  off.splice_generated = false;
  text::ChatRequest req;
  req.tools = tools;
  req.messages = {message(Role::kSystem, "You are a helpful assistant."),
                  message(Role::kUser, "Hello agent")};
  Conversation conv;
  const char* answers[] = {"Hello world", "The weather in Paris is sunny", "Thank you"};
  const char* users[] = {"And London?", "Thanks"};
  for (int k = 0; k < 3; ++k) {
    Ids c = char_by_char(f.tok(), answers[k]);
    c.push_back(f.end_of_turn);
    auto s = serve(tracker, "agent", k, req, c, FinishReason::kStop, off);
    conv.calls.push_back(s.call);
    conv.completions.push_back(c);
    if (k < 2) {
      req.messages.push_back(s.answer);
      req.messages.push_back(message(Role::kUser, users[k]));
      if (vary_tools) req.tools.push_back(req.tools.front());
    }
  }
  return conv;
}

TEST(MergeText, ReRenderedHistoryMergesAtTextLevelNotAtTokenLevel) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep", f);
  Conversation conv = re_rendered(tracker, f);

  MergedEpisode by_token = merge_episode({"ep", "t", 1.0}, conv.calls, {});
  EXPECT_EQ(by_token.samples.size(), 3u) << "re-tokenized history splits the token trie";
  for (const BranchDiagnostic& b : by_token.diagnostics.agents[0].branches) {
    EXPECT_EQ(b.kind, "template_rewrote") << b.reason;
  }

  MergeOptions text_level;
  text_level.compare_level = CompareLevel::kText;
  text_level.format = &f;
  MergedEpisode by_text = merge_episode({"ep", "t", 1.0}, conv.calls, text_level);
  ASSERT_EQ(by_text.samples.size(), 1u);
  const Sample& s = by_text.samples[0];
  // Expected: the last prompt's non-assistant messages, each earlier assistant turn replaced by its
  // generation prompt + generated ids + the footer after the end token, then the last completion.
  const CallRecord& last = conv.calls.back();
  Ids expected;
  std::vector<uint8_t> mask;
  int turn = 0;
  for (size_t m = 0; m < last.message_spans.size(); ++m) {
    const MessageTokens& span = last.message_spans[m];
    if (last.request.messages[m].role == Role::kAssistant) {
      const CallRecord& g = conv.calls[static_cast<size_t>(turn)];
      Ids gp(g.prompt_ids.begin() + g.generation_prompt_begin, g.prompt_ids.end());
      expected.insert(expected.end(), gp.begin(), gp.end());
      mask.insert(mask.end(), gp.size(), 0);
      expected.insert(expected.end(), conv.completions[static_cast<size_t>(turn)].begin(),
                      conv.completions[static_cast<size_t>(turn)].end());
      mask.insert(mask.end(), conv.completions[static_cast<size_t>(turn)].size(), 1);
      expected.insert(expected.end(), f.footer_after_end.begin(), f.footer_after_end.end());
      mask.insert(mask.end(), f.footer_after_end.size(), 0);
      ++turn;
    } else {
      expected.insert(expected.end(), last.prompt_ids.begin() + span.begin,
                      last.prompt_ids.begin() + span.end);
      mask.insert(mask.end(), static_cast<size_t>(span.end - span.begin), 0);
    }
  }
  expected.insert(expected.end(), last.prompt_ids.begin() + last.generation_prompt_begin,
                  last.prompt_ids.end());
  mask.insert(mask.end(),
              last.prompt_ids.size() - static_cast<size_t>(last.generation_prompt_begin), 0);
  expected.insert(expected.end(), conv.completions.back().begin(), conv.completions.back().end());
  mask.insert(mask.end(), conv.completions.back().size(), 1);
  EXPECT_EQ(s.token_ids, expected);
  EXPECT_EQ(s.loss_mask, mask);
  EXPECT_GT(by_text.diagnostics.compression_ratio, by_token.diagnostics.compression_ratio);
}

TEST(MergeText, ToolDefinitionsAreComparedOnlyWhenAsked) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep", f);
  const text::OrderedJson tool =
      text::OrderedJson::parse(R"({"type": "function", "function": {"name": "f"}})");
  Conversation conv = re_rendered(tracker, f, {tool}, /*vary_tools=*/true);
  MergeOptions o;
  o.compare_level = CompareLevel::kText;
  o.format = &f;
  EXPECT_EQ(merge_episode({"ep", "t", 1.0}, conv.calls, o).samples.size(), 1u);
  o.ignore_tools = false;
  EXPECT_EQ(merge_episode({"ep", "t", 1.0}, conv.calls, o).samples.size(), 3u);
}

TEST(MergeText, RetriesStillBranch) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::create(*tok, text::ChatFamily::kQwen2_5);
  EpisodeTracker tracker("ep", f);
  text::ChatRequest req;
  req.messages = {message(Role::kUser, "Hello agent")};
  Ids a = tok->encode("Hello world");
  a.push_back(f.end_of_turn);
  Ids b = tok->encode("Thank you");
  b.push_back(f.end_of_turn);
  serve(tracker, "agent", 0, req, a, FinishReason::kStop);
  serve(tracker, "agent", 1, req, b, FinishReason::kStop);
  MergeOptions o;
  o.compare_level = CompareLevel::kText;
  o.format = &f;
  MergedEpisode m = merge_episode({"ep", "t", 1.0}, tracker.calls(), o);
  ASSERT_EQ(m.samples.size(), 2u);
  EXPECT_EQ(m.diagnostics.agents[0].branches.at(0).kind, "retry");
}

}  // namespace
}  // namespace ajet::tracking
