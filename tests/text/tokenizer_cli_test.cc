// `ajet tokenize`, `ajet detokenize` and `ajet tokenizer train` end to end: the built binary on a
// tokenizer it trains itself (always) and on the Qwen3 tokenizer from the npm cache (when there).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include "common/fs.h"
#include "common/json.h"
#include "text/tokenizer.h"
#include "text/tokenizer_test_util.h"

namespace ajet::text {
namespace {

using ::testing::HasSubstr;
namespace tt = tok_testing;

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ajet_ = tt::binary_dir() / "bin" / "ajet";
    ASSERT_TRUE(std::filesystem::exists(ajet_))
        << ajet_ << " is missing: build the `ajet` target first";
    dir_ = std::filesystem::temp_directory_path() /
           ("ajet_tokenize_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `ajet ARGS < input`; stderr goes to dir_/stderr.txt.
  tt::ProcessResult ajet(const std::string& args, const std::string& input = "") {
    write_file_atomic(dir_ / "stdin.txt", input);
    return tt::run_capture(tt::shell_quote(ajet_.string()) + " " + args + " < " +
                           tt::shell_quote((dir_ / "stdin.txt").string()) + " 2> " +
                           tt::shell_quote((dir_ / "stderr.txt").string()));
  }
  std::string stderr_text() { return read_file(dir_ / "stderr.txt"); }

  // Trains a 400-id tokenizer with the CLI on the repository's tokenizer corpus.
  std::filesystem::path train() {
    auto out = dir_ / "tok";
    auto r = ajet(
        "tokenizer train --corpus " +
        tt::shell_quote((tt::source_dir() / "tests/text/data/tokenizer_corpus.jsonl").string()) +
        " --vocab-size 400 --out " + tt::shell_quote(out.string()));
    EXPECT_EQ(r.exit_code, 0) << stderr_text();
    EXPECT_THAT(r.out, HasSubstr("400 ids"));
    return out;
  }

  static std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t nl = s.find('\n', pos);
      if (nl == std::string::npos) nl = s.size();
      out.push_back(s.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return out;
  }

  std::filesystem::path ajet_;
  std::filesystem::path dir_;
};

const std::vector<std::string> kLines = {"Hello, world!",
                                         "<|im_start|>user",
                                         "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80",
                                         "",
                                         "    indented\tcode();",
                                         "<tool_call>{\"a\": 1}</tool_call>"};

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST_F(TokenizeCli, TrainThenTokenizeAndDetokenizeRoundTrip) {
  auto dir = train();
  Tokenizer lib = Tokenizer::load(dir);
  EXPECT_EQ(lib.vocab_size(), 400u);

  auto enc = ajet("tokenize --tokenizer " + tt::shell_quote(dir.string()), joined(kLines));
  ASSERT_EQ(enc.exit_code, 0) << stderr_text();
  auto out = lines_of(enc.out);
  ASSERT_EQ(out.size(), kLines.size());
  for (size_t i = 0; i < kLines.size(); ++i) {
    EXPECT_EQ(parse_json(out[i], "output").get<std::vector<TokenId>>(), lib.encode(kLines[i]))
        << kLines[i];
  }

  auto dec = ajet("detokenize --tokenizer " + tt::shell_quote(dir.string()), enc.out);
  ASSERT_EQ(dec.exit_code, 0) << stderr_text();
  EXPECT_EQ(lines_of(dec.out), kLines);

  auto skip =
      ajet("detokenize --skip-special --tokenizer " + tt::shell_quote(dir.string()), out[1] + "\n");
  EXPECT_EQ(skip.out, "user\n");
}

TEST_F(TokenizeCli, PiecesAndJsonModes) {
  auto dir = train();
  Tokenizer lib = Tokenizer::load(dir);
  auto r = ajet("tokenize --pieces --json --tokenizer " + tt::shell_quote(dir.string()),
                "\"a\\nb c\"\n");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  Json j = parse_json(r.out, "output");
  auto ids = j.at("ids").get<std::vector<TokenId>>();
  EXPECT_EQ(ids, lib.encode("a\nb c"));
  ASSERT_EQ(j.at("pieces").size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(j.at("pieces")[i].get<std::string>(), lib.piece(ids[i]));

  auto d = ajet("detokenize --json --tokenizer " + tt::shell_quote(dir.string()),
                Json(ids).dump() + "\n");
  EXPECT_EQ(parse_json(d.out, "output").get<std::string>(), "a\nb c");
}

TEST_F(TokenizeCli, BadDetokenizeLinesAreNamedAndSkipped) {
  auto dir = train();
  auto r = ajet("detokenize --tokenizer " + tt::shell_quote(dir.string()),
                "[72]\nnot json\n[99999]\n[\"x\"]\n[73]\n");
  EXPECT_EQ(r.exit_code, 1);
  Tokenizer lib = Tokenizer::load(dir);
  EXPECT_EQ(lines_of(r.out), (std::vector<std::string>{lib.decode(std::vector<TokenId>{72}), "", "",
                                                       "", lib.decode(std::vector<TokenId>{73})}));
  std::string err = stderr_text();
  EXPECT_THAT(err, HasSubstr("line 2: invalid JSON"));
  EXPECT_THAT(err, HasSubstr("line 3: element 0 (99999)"));
  EXPECT_THAT(err, HasSubstr("line 4: element 0 (\"x\")"));
  EXPECT_THAT(err, HasSubstr("3 of 5 input lines were bad"));
}

TEST_F(TokenizeCli, BadTokenizerDirectoryFailsWithItsName) {
  auto r = ajet("tokenize --tokenizer " + tt::shell_quote((dir_ / "missing").string()), "x\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(stderr_text(), HasSubstr((dir_ / "missing").string() + ": does not exist"));
  auto t = ajet("tokenizer train --corpus " + tt::shell_quote((dir_ / "none.txt").string()) +
                " --vocab-size 300 --out " + tt::shell_quote((dir_ / "o").string()));
  EXPECT_NE(t.exit_code, 0);
  EXPECT_THAT(stderr_text(), HasSubstr("none.txt"));
}

TEST_F(TokenizeCli, Qwen3FromTheNpmCache) {
  std::string why;
  auto qwen = tt::qwen3_dir(why);
  if (!qwen) {
    std::fprintf(stderr, "\n*** SKIPPING the Qwen3 CLI check: %s ***\n\n", why.c_str());
    GTEST_SKIP() << "Qwen3 CLI check NOT RUN: " << why;
  }
  auto enc = ajet("tokenize --tokenizer " + tt::shell_quote(qwen->string()), joined(kLines));
  ASSERT_EQ(enc.exit_code, 0) << stderr_text();
  auto out = lines_of(enc.out);
  ASSERT_EQ(out.size(), kLines.size());
  // Ids independently known from the Qwen vocabulary: "<|im_start|>" is 151644, "user" 872.
  EXPECT_EQ(parse_json(out[1], "output").get<std::vector<TokenId>>(),
            (std::vector<TokenId>{151644, 872}));
  auto dec = ajet("detokenize --tokenizer " + tt::shell_quote(qwen->string()), enc.out);
  ASSERT_EQ(dec.exit_code, 0) << stderr_text();
  EXPECT_EQ(lines_of(dec.out), kLines);
}

}  // namespace
}  // namespace ajet::text
