// One choice of a streamed completion: deltas concatenate to the answer, whole UTF-8 characters
// only, stop strings cut the text (also across tokens) and end the choice, held-back <tool_call>
// and <think> blocks, and the final parse.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "openai/openai_choice.h"
#include "text/bpe_trainer.h"

namespace ajet::openai {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const text::Tokenizer& tokenizer() {
  static const text::Tokenizer tok = [] {
    std::string corpus;
    for (int i = 0; i < 30; ++i) {
      corpus +=
          "The weather in Paris is sunny. one two three four. <think>hmm</think> caf\xC3\xA9 "
          "\xE4\xBD\xA0\xE5\xA5\xBD\n";
      corpus += "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n";
    }
    text::BpeTrainerOptions o;
    o.vocab_size = 600;
    text::TrainedBpe t = text::train_bpe(corpus, o);
    return text::Tokenizer::from_json(t.tokenizer_json, "t",
                                      text::parse_tokenizer_config(t.tokenizer_config_json, "c"));
  }();
  return tok;
}

struct Fed {
  std::string reasoning;
  std::string content;
  size_t tokens_reported = 0;
};

// Feeds `text`'s tokens one per event (the last event carries `finish`), collecting every delta.
Fed feed(ChoiceState& c, const std::string& text,
         rpc::FinishReason finish = rpc::FinishReason::kStop) {
  Fed out;
  std::vector<int32_t> ids = tokenizer().encode(text);
  for (size_t i = 0; i < ids.size(); ++i) {
    rpc::TokensEvent e;
    e.token_ids = {ids[i]};
    e.logprobs = {-0.5f};
    e.raw_logprobs = {-0.7f};
    e.policy_versions = {2};
    if (i + 1 == ids.size()) e.finish_reason = finish;
    c.add(e);
    ChoiceDelta d = c.take_delta(false);
    out.reasoning += d.reasoning;
    out.content += d.content;
    out.tokens_reported += d.token_end - d.token_begin;
    if (c.stopped_by_string()) break;
  }
  ChoiceDelta d = c.take_delta(true);
  out.reasoning += d.reasoning;
  out.content += d.content;
  out.tokens_reported += d.token_end - d.token_begin;
  return out;
}

ChoiceOptions options(std::vector<std::string> stop = {}, bool tools = false) {
  ChoiceOptions o;
  o.tokenizer = &tokenizer();
  o.stop = std::move(stop);
  o.parse_tools = tools;
  return o;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(ChoiceState, DeltasConcatenateToTheAnswerInWholeCharacters) {
  const std::string text =
      "The weather in Paris is sunny: caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80!";
  ChoiceState c(options());
  std::vector<int32_t> ids = tokenizer().encode(text);
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    rpc::TokensEvent e;
    e.token_ids = {ids[i]};
    e.logprobs = {-0.5f};
    e.raw_logprobs = {-0.7f};
    e.policy_versions = {2};
    if (i + 1 == ids.size()) e.finish_reason = rpc::FinishReason::kStop;
    c.add(e);
    ChoiceDelta d = c.take_delta(false);
    EXPECT_TRUE(valid_utf8(d.content)) << i;
    joined += d.content;
  }
  joined += c.take_delta(true).content;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(c.final_output().content, text);
  EXPECT_EQ(c.finish_reason(false), "stop");
  EXPECT_EQ(c.ids(), ids);
  EXPECT_EQ(c.logprobs().size(), ids.size());
  EXPECT_EQ(c.policy_versions(), std::vector<int32_t>(ids.size(), 2));
}

TEST(ChoiceState, StopStringsCutTheTextAndEndTheChoice) {
  ChoiceState c(options({"three", "four"}));
  Fed f = feed(c, "one two three four");
  EXPECT_EQ(f.content, "one two ");
  EXPECT_TRUE(c.stopped_by_string());
  EXPECT_TRUE(c.finished());
  EXPECT_EQ(c.final_output().content, "one two ");
  EXPECT_EQ(c.finish_reason(false), "stop");
  EXPECT_EQ(c.tracking_finish(), tracking::FinishReason::kStop);
  // The ids end with the token that completed the stop string; later events are ignored.
  size_t n = c.tokens();
  rpc::TokensEvent more;
  more.token_ids = {5};
  more.logprobs = {-1};
  more.raw_logprobs = {-1};
  more.policy_versions = {0};
  c.add(more);
  EXPECT_EQ(c.tokens(), n);

  // A prefix of a stop string is held back until it is known not to be one.
  ChoiceState held(options({"Paris is cloudy"}));
  Fed h = feed(held, "The weather in Paris is sunny.");
  EXPECT_EQ(h.content, "The weather in Paris is sunny.");
  EXPECT_FALSE(held.stopped_by_string());
}

TEST(ChoiceState, ToolCallsAreHeldBackAndParsedAtTheEnd) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  ChoiceState c(options({}, /*tools=*/true));
  Fed f = feed(c, text);
  EXPECT_THAT(f.content, Not(HasSubstr("<tool")));
  EXPECT_THAT(f.content, HasSubstr("Let me look."));
  text::ParsedOutput out = c.final_output();
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_THAT(out.tool_calls[0].id, ::testing::StartsWith("call_"));
  EXPECT_EQ(out.content, "Let me look.");
  EXPECT_EQ(c.finish_reason(true), "tool_calls");

  // Without tool parsing the same text is plain content.
  ChoiceState plain(options());
  EXPECT_EQ(feed(plain, text).content, text);
  EXPECT_TRUE(plain.final_output().tool_calls.empty());
}

TEST(ChoiceState, ALeadingThinkBlockStreamsAsReasoning) {
  ChoiceState c(options());
  Fed f = feed(c, "<think>hmm, sunny</think>\n\nThe weather in Paris is sunny.");
  EXPECT_EQ(f.reasoning, "hmm, sunny");
  EXPECT_EQ(f.content, "The weather in Paris is sunny.");
  text::ParsedOutput out = c.final_output();
  EXPECT_EQ(out.reasoning_content, "hmm, sunny");
  EXPECT_EQ(out.content, "The weather in Paris is sunny.");

  // A generation prompt that opened the block: everything up to </think> is reasoning.
  ChoiceOptions o = options();
  o.generation_prompt_tail = "<think>\n";
  ChoiceState opened(o);
  Fed g = feed(opened, "hmm</think>one two");
  EXPECT_EQ(g.reasoning, "hmm");
  EXPECT_EQ(g.content, "one two");
}

TEST(ChoiceState, LengthAndAbortFinishReasons) {
  ChoiceState c(options());
  feed(c, "one two", rpc::FinishReason::kLength);
  EXPECT_EQ(c.finish_reason(false), "length");
  EXPECT_EQ(c.tracking_finish(), tracking::FinishReason::kLength);
  ChoiceState a(options());
  feed(a, "one", rpc::FinishReason::kAbort);
  EXPECT_EQ(a.finish_reason(false), "abort");
}

TEST(ChoiceState, CompletionsAreTextOnly) {
  ChoiceOptions o = options();
  o.chat = false;
  ChoiceState c(o);
  Fed f = feed(c, "<think>kept</think> as text");
  EXPECT_EQ(f.content, "<think>kept</think> as text");
  EXPECT_EQ(f.reasoning, "");
}

}  // namespace
}  // namespace ajet::openai
