// `ajet render-chat` end to end: the built binary reads a request on stdin and prints what the
// library renders (text, or ids with --ids); bad input gives an error naming the problem and a
// nonzero exit code.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "chat_test_util.h"
#include "common/fs.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ajet::text {
namespace {

using testing::CommandResult;
using testing::data_dir;
using testing::run_command;
using testing::shell_quote;

class RenderChatCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ajet_ = std::filesystem::path(AJET_BINARY_DIR) / "bin" / "ajet";
    ASSERT_TRUE(std::filesystem::exists(ajet_))
        << ajet_ << " is missing: build the `ajet` target before running this test";
    dir_ = std::filesystem::temp_directory_path() /
           ("ajet_render_chat_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs `ajet render-chat ARGS` with `input` on stdin; stderr is merged into the output when
  // asked.
  CommandResult render(const std::string& args, const std::string& input,
                       bool with_stderr = false) {
    write_file_atomic(dir_ / "stdin.json", input);
    return run_command(shell_quote(ajet_.string()) + " render-chat " + args + " < " +
                       shell_quote((dir_ / "stdin.json").string()) +
                       (with_stderr ? " 2>&1" : " 2>/dev/null"));
  }

  std::filesystem::path ajet_;
  std::filesystem::path dir_;
};

const char* kRequest = R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Zürich?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "12°C"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}}}}]})";

TEST_F(RenderChatCli, PrintsTheRenderedText) {
  const std::string tokenizer_dir = (data_dir() / "chat_templates" / "qwen2_5").string();
  const ChatRequest req = parse_chat_request(kRequest, "test");
  for (bool prompt : {false, true}) {
    const CommandResult r =
        render("--tokenizer " + shell_quote(tokenizer_dir) + (prompt ? " --generation-prompt" : ""),
               kRequest);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out, render_chat(ChatFamily::kQwen2_5, req,
                                 {.add_generation_prompt = prompt, .enable_thinking = std::nullopt})
                         .text);
  }
}

TEST_F(RenderChatCli, PrintsIdsWithATrainedTokenizer) {
  BpeTrainerOptions options;
  options.vocab_size = 400;
  write_trained_bpe(
      train_bpe(std::string(kRequest) + " The weather is fine today, thanks.", options), dir_);
  const CommandResult r =
      render("--tokenizer " + shell_quote(dir_.string()) + " --generation-prompt --ids", kRequest);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Tokenizer tok = Tokenizer::load(dir_);
  const RenderedChat rendered =
      render_chat(ChatFamily::kQwen2_5, parse_chat_request(kRequest, "test"),
                  {.add_generation_prompt = true, .enable_thinking = std::nullopt});
  EXPECT_EQ(OrderedJson::parse(r.out).get<std::vector<TokenId>>(), tok.encode(rendered.text));

  const CommandResult spans =
      render("--tokenizer " + shell_quote(dir_.string()) + " --ids --spans", kRequest);
  ASSERT_EQ(spans.exit_code, 0) << spans.out;
  const OrderedJson j = OrderedJson::parse(spans.out);
  EXPECT_EQ(j["family"], "qwen2.5");
  ASSERT_EQ(j["spans"].size(), 4u);
  EXPECT_EQ(j["spans"][2]["header"], "<|im_start|>assistant\n");
  EXPECT_EQ(j["spans"][2]["footer"], "<|im_end|>\n");
}

TEST_F(RenderChatCli, FamilyOverrideAndThinking) {
  const std::string req = R"({"messages": [{"role": "user", "content": "hi"}]})";
  const CommandResult r =
      render("--tokenizer /nonexistent --family qwen3 --generation-prompt --no-thinking", req);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_F(RenderChatCli, BadInputFailsWithAReason) {
  const std::string tokenizer =
      "--tokenizer " + shell_quote((data_dir() / "chat_templates" / "qwen2_5").string());
  struct Case {
    std::string args;
    std::string input;
    std::string expected;
  };
  const Case cases[] = {
      {tokenizer, R"({"messages": [)", "stdin: invalid JSON"},
      {tokenizer, R"({"messages": [{"role": "user"}]})", "messages[0].content is required"},
      {tokenizer,
       R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]})",
       "messages[0].tool_calls[0].function.arguments must be a string"},
      {"--tokenizer " + shell_quote(dir_.string()),
       R"({"messages": [{"role": "user", "content": "x"}]})", "no chat template in"},
      {tokenizer + " --family llama", R"({"messages": [{"role": "user", "content": "x"}]})",
       "--family must be"},
      {"--family chatml --tokenizer x",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "no tool format"},
  };
  for (const Case& c : cases) {
    const CommandResult r = render(c.args, c.input, /*with_stderr=*/true);
    EXPECT_NE(r.exit_code, 0) << c.input;
    EXPECT_NE(r.out.find(c.expected), std::string::npos)
        << "input: " << c.input << "\noutput: " << r.out;
  }
  EXPECT_NE(render("", "{}", true).exit_code, 0) << "--tokenizer is required";
}

}  // namespace
}  // namespace ajet::text
