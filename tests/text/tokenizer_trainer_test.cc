// The BPE trainer: deterministic output, a vocabulary of the requested size that round-trips text,
// ChatML special tokens and template, and files that the JS and HF reference tokenizers load and
// encode exactly as we do.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_test_util.h"

namespace ajet::text {
namespace {

using ::testing::HasSubstr;

// A real, varied corpus from the repository: the tokenizer sources (English comments and C++) and
// the cross-implementation corpus (many scripts, emoji, whitespace, special-token text).
std::string training_corpus() {
  std::string corpus;
  for (const char* rel : {"src/text/tokenizer.cc", "src/text/bpe_trainer.cc",
                          "src/text/pretokenizer.cc", "tests/text/data/tokenizer_corpus.jsonl"}) {
    corpus += read_file(tok_testing::source_dir() / rel);
    corpus += "\n";
  }
  return corpus;
}

std::vector<std::string> corpus_lines() {
  std::vector<std::string> out;
  std::string text =
      read_file(tok_testing::source_dir() / "tests/text/data/tokenizer_corpus.jsonl");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty() || line.rfind("//", 0) == 0) continue;
    out.push_back(parse_json(line, "corpus line").get<std::string>());
  }
  return out;
}

class Trained : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    BpeTrainerOptions opts;
    opts.vocab_size = 600;
    trained_ = new TrainedBpe(train_bpe(training_corpus(), opts));
  }
  static void TearDownTestSuite() {
    delete trained_;
    trained_ = nullptr;
  }
  static Tokenizer load() {
    return Tokenizer::from_json(
        trained_->tokenizer_json, "trained/tokenizer.json",
        parse_tokenizer_config(trained_->tokenizer_config_json, "trained/tokenizer_config.json"));
  }
  static inline TrainedBpe* trained_ = nullptr;
};

TEST_F(Trained, IsDeterministic) {
  BpeTrainerOptions opts;
  opts.vocab_size = 600;
  TrainedBpe again = train_bpe(training_corpus(), opts);
  EXPECT_EQ(again.tokenizer_json, trained_->tokenizer_json);
  EXPECT_EQ(again.tokenizer_config_json, trained_->tokenizer_config_json);
}

TEST_F(Trained, HasTheRequestedSizeAndAddedTokens) {
  EXPECT_EQ(trained_->vocab_size, 600u);
  EXPECT_EQ(trained_->merges, 600u - 256u - 7u);
  Tokenizer t = load();
  EXPECT_EQ(t.vocab_size(), 600u);
  for (TokenId id = 0; id < 600; ++id) EXPECT_TRUE(t.valid_id(id)) << id;
  // The byte alphabet first, in GPT-2 order, like Qwen's vocabulary.
  EXPECT_EQ(t.piece(0), "!");
  EXPECT_EQ(t.piece(188), "\xC4\x80");  // byte 0
  // Specials, then the non-special tool markers, at the end.
  EXPECT_EQ(t.piece(593), "<|endoftext|>");
  EXPECT_EQ(t.piece(594), "<|im_start|>");
  EXPECT_EQ(t.piece(595), "<|im_end|>");
  EXPECT_EQ(t.piece(596), "<tool_call>");
  EXPECT_TRUE(t.is_special(595));
  EXPECT_FALSE(t.is_special(596));
  EXPECT_EQ(t.eos_id(), std::optional<TokenId>(595));
  EXPECT_EQ(t.pad_id(), std::optional<TokenId>(593));
  EXPECT_EQ(t.config().chat_template, kChatMlTemplate);
  EXPECT_EQ(t.encode("<|im_start|>user\nhi<|im_end|>").front(), 594);
  EXPECT_EQ(t.encode("<tool_call>{}</tool_call>").front(), 596);
}

TEST_F(Trained, RoundTripsAndCompresses) {
  Tokenizer t = load();
  size_t bytes = 0;
  size_t tokens = 0;
  for (const std::string& line : corpus_lines()) {
    auto ids = t.encode(line);
    EXPECT_EQ(t.decode(ids), nfc_reference(line)) << Json(line).dump();
    bytes += line.size();
    tokens += ids.size();
  }
  std::string code = read_file(tok_testing::source_dir() / "src/text/tokenizer.cc");
  auto ids = t.encode(code);
  EXPECT_EQ(t.decode(ids), code);
  // 337 learned merges on this corpus must buy something on text from it.
  EXPECT_LT(static_cast<double>(ids.size()), 0.6 * static_cast<double>(code.size()));
  EXPECT_LT(tokens, bytes);
}

TEST_F(Trained, TemplateIsRecognisedAsVerifiedQwen25) {
  // The chat-template renderer must recognise the template we write, byte for byte, as one it
  // verifies against a real Jinja engine.
  TemplateDetection d = detect_chat_family(load().config().chat_template);
  EXPECT_EQ(d.family, ChatFamily::kQwen2_5);
  EXPECT_TRUE(d.verified);
}

TEST_F(Trained, WritesLoadableFiles) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ajet_trained_" + std::to_string(::getpid()));
  write_trained_bpe(*trained_, dir);
  Tokenizer t = Tokenizer::load(dir);
  EXPECT_EQ(t.vocab_size(), 600u);
  EXPECT_EQ(t.config().eos_token.value_or(""), "<|im_end|>");
  std::filesystem::remove_all(dir);
}

TEST(Trainer, RejectsImpossibleOptions) {
  BpeTrainerOptions opts;
  opts.vocab_size = 260;
  EXPECT_THAT(
      [&] {
        try {
          train_bpe("abc", opts);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("below the minimum 263"));
  opts.vocab_size = 400;
  opts.added_tokens.push_back("<|im_end|>");
  EXPECT_THROW(train_bpe("abc", opts), Error);
}

TEST(Trainer, StopsEarlyOnATinyCorpus) {
  BpeTrainerOptions opts;
  opts.vocab_size = 4096;
  TrainedBpe t = train_bpe("abab abab abab", opts);
  EXPECT_LT(t.vocab_size, 300u);
  Tokenizer tok = Tokenizer::from_json(t.tokenizer_json, "tiny.json");
  EXPECT_EQ(tok.vocab_size(), t.vocab_size);
  EXPECT_EQ(tok.encode(" abab").size(), 1u);  // the most frequent word became one token
}

TEST_F(Trained, ReferenceImplementationsAgree) {
  std::string why;
  auto modules = tok_testing::npm_modules(why);
  if (!modules || !tok_testing::have_node()) {
    std::fprintf(stderr, "\n*** SKIPPING the trained-tokenizer JS cross-check: %s ***\n\n",
                 modules ? "node is not installed" : why.c_str());
    GTEST_SKIP() << "trained-tokenizer cross-check NOT RUN: " << (modules ? "no node" : why);
  }
  auto dir =
      std::filesystem::temp_directory_path() / ("ajet_trained_js_" + std::to_string(::getpid()));
  write_trained_bpe(*trained_, dir);
  std::string script = (tok_testing::source_dir() / "tests/js/tokenizer_compare.mjs").string();
  std::string corpus =
      (tok_testing::source_dir() / "tests/text/data/tokenizer_corpus.jsonl").string();
  auto r = tok_testing::run_capture("node " + tok_testing::shell_quote(script) + " " +
                                    tok_testing::shell_quote(modules->string()) + " " +
                                    tok_testing::shell_quote(dir.string()) + " " +
                                    tok_testing::shell_quote(corpus));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0);
  Json j = parse_json(r.out, "tokenizer_compare.mjs output");
  Tokenizer t = load();
  const Json& lines = j.at("lines");
  ASSERT_GT(lines.size(), 300u);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string text = lines[i].at("text").get<std::string>();
    auto ours = t.encode(text);
    EXPECT_EQ(ours, lines[i].at("js").get<std::vector<TokenId>>())
        << "entry " << i << ": " << Json(text).dump();
    EXPECT_EQ(t.decode(ours), lines[i].at("js_decoded").get<std::string>()) << "entry " << i;
    if (j.at("hf_available").get<bool>()) {
      EXPECT_EQ(ours, lines[i].at("hf").get<std::vector<TokenId>>())
          << "entry " << i << ": " << Json(text).dump();
    }
  }
}

}  // namespace
}  // namespace ajet::text
