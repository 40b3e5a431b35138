// `ajet generate` end to end: the real `ajet` binary forwarding to `ajet-engine generate`,
// in-process and through a running engine (--engine), printing streamed text, JSON with logprobs,
// and chat messages rendered with the model's chat template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine_process.h"
#include "text/tokenizer.h"

namespace ajet::engine {
namespace {

using namespace testing;

struct Output {
  int exit_code = -1;
  std::string out;  // stdout only
  std::string err;
};

// Runs `ajet generate ARGS` with `input` on stdin, stdout and stderr apart.
Output ajet_generate(const std::string& args, const std::string& input = "") {
  static int counter = 0;
  const fs::path in = process_dir() / ("in" + std::to_string(counter)),
                 err = process_dir() / ("err" + std::to_string(counter));
  ++counter;
  model::testing::write_text(in, input);
  // run_command appends 2>&1; the subshell keeps the command's own stderr in `err`.
  auto r = run_command("(" + kAjet + " generate " + args + " < " + quote(in) + " 2> " + quote(err) +
                       ")");
  return Output{r.exit_code, r.out, run_command("cat " + quote(err)).out};
}

const std::string& base_args() {
  static const std::string args =
      "--model " + quote(tiny_model_dir()) + " --threads 1 --kv-cache-mb 16";
  return args;
}

nlohmann::json parse_json(const Output& o) {
  try {
    return nlohmann::json::parse(o.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\nstdout: " << o.out << "\nstderr: " << o.err;
    return nlohmann::json::object();
  }
}

// What streaming prints for these ids: the incremental decoder's pieces, then its flush.
std::string streamed_text(const std::vector<int32_t>& ids) {
  const text::Tokenizer tokenizer = text::Tokenizer::load(tiny_model_dir());
  text::IncrementalDecoder decoder(tokenizer);
  std::string out;
  for (int32_t id : ids) out += decoder.push(id);
  return out + decoder.flush();
}

TEST(GenerateCli, TextAndLogprobsJson) {
  const std::string args = base_args() + " --max-tokens 6 --temperature 0 --ignore-eos";
  const Output json = ajet_generate(args + " --logprobs", "Hello");
  ASSERT_EQ(json.exit_code, 0) << json.out << json.err;
  const auto j = parse_json(json);
  EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int32_t>>(),
            (std::vector<int32_t>{72, 101, 108, 108, 111}));  // byte ids of "Hello"
  EXPECT_EQ(j["prompt_tokens"], 5);
  EXPECT_EQ(j["completion_tokens"], 6);
  ASSERT_EQ(j["samples"].size(), 1u);
  const auto& s = j["samples"][0];
  EXPECT_EQ(s["finish_reason"], "length");
  const auto ids = s["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 6u);
  ASSERT_EQ(s["logprobs"].size(), 6u);
  ASSERT_EQ(s["raw_logprobs"].size(), 6u);
  for (size_t t = 0; t < ids.size(); ++t) {
    EXPECT_GE(ids[t], 0);
    EXPECT_LT(ids[t], kVocab);
    EXPECT_LE(s["raw_logprobs"][t].get<double>(), 0.0);
    EXPECT_EQ(s["logprobs"][t].get<double>(), 0.0);  // greedy: the chosen token has probability 1
    EXPECT_EQ(s["policy_versions"][t], 0);
  }
  const text::Tokenizer tokenizer = text::Tokenizer::load(tiny_model_dir());
  EXPECT_EQ(s["text"], tokenizer.decode(ids));

  // Text mode streams the same greedy tokens, the prompt from --prompt this time.
  const Output text = ajet_generate(args + " --prompt Hello");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, streamed_text(ids) + "\n");
  EXPECT_NE(text.err.find("[length, 6 tokens]"), std::string::npos) << text.err;
}

TEST(GenerateCli, SeededSamplesAreReproducible) {
  const std::string args =
      base_args() + " --max-tokens 5 --temperature 1 --seed 4 --n 2 --ignore-eos --logprobs";
  const Output a = ajet_generate(args, "abc"), b = ajet_generate(args, "abc");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto ja = parse_json(a), jb = parse_json(b);
  ASSERT_EQ(ja["samples"].size(), 2u);
  EXPECT_EQ(ja["samples"], jb["samples"]);
  for (const auto& s : ja["samples"]) {
    ASSERT_EQ(s["token_ids"].size(), 5u);
    for (size_t t = 0; t < 5; ++t)
      EXPECT_NEAR(s["logprobs"][t].get<double>(), s["raw_logprobs"][t].get<double>(), 1e-5);
  }
  // Plain text with n > 1: one block per sample.
  const Output text = ajet_generate(base_args() + " --max-tokens 3 --seed 4 --n 2", "abc");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("=== sample 0 ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("=== sample 1 ("), std::string::npos) << text.out;
}

TEST(GenerateCli, ThroughARunningEngine) {
  EngineProcess engine;
  const std::string address = engine.wait_ready();
  const std::string sampling = " --max-tokens 7 --temperature 0 --ignore-eos --logprobs";
  const Output local = ajet_generate(base_args() + sampling, "The quick brown fox");
  // No --model: the engine's status names its model directory, whose tokenizer is used.
  const Output remote = ajet_generate("--engine " + address + sampling, "The quick brown fox");
  ASSERT_EQ(local.exit_code, 0) << local.err;
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  const auto jl = parse_json(local), jr = parse_json(remote);
  EXPECT_EQ(jr["prompt_token_ids"], jl["prompt_token_ids"]);
  EXPECT_EQ(jr["samples"][0]["token_ids"], jl["samples"][0]["token_ids"]);
  EXPECT_EQ(jr["samples"][0]["finish_reason"], "length");
  // An engine-side rejection comes back as the command's error.
  const Output too_long =
      ajet_generate("--engine " + address + " --max-tokens 3", std::string(3000, 'x'));
  EXPECT_NE(too_long.exit_code, 0);
  EXPECT_NE(too_long.err.find("context of 2048 tokens"), std::string::npos) << too_long.err;
}

TEST(GenerateCli, ThroughATcpEngineWithAToken) {
  const std::string token = "generate-cli-token-42";
  const fs::path file = process_dir() / "cli.token";
  model::testing::write_text(file, token + "\n");
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  EngineProcess engine({"--token-file", file.string()}, tiny_model_dir(), "tcp:127.0.0.1:0");
  const std::string address = engine.wait_ready();
  const std::string sampling = " --max-tokens 3 --temperature 0 --ignore-eos --logprobs";
  const Output by_file =
      ajet_generate("--engine " + address + " --token-file " + quote(file) + sampling, "abc");
  ASSERT_EQ(by_file.exit_code, 0) << by_file.err;
  EXPECT_EQ(parse_json(by_file)["samples"][0]["token_ids"].size(), 3u);
  ::setenv("AJET_ENGINE_TOKEN", token.c_str(), 1);
  const Output by_env = ajet_generate("--engine " + address + sampling, "abc");
  ::setenv("AJET_ENGINE_TOKEN", "wrong", 1);
  const Output wrong = ajet_generate("--engine " + address + sampling, "abc");
  ::unsetenv("AJET_ENGINE_TOKEN");
  const Output none = ajet_generate("--engine " + address + sampling, "abc");
  ASSERT_EQ(by_env.exit_code, 0) << by_env.err;
  EXPECT_EQ(parse_json(by_env)["samples"], parse_json(by_file)["samples"]);
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("wrong engine token"), std::string::npos) << wrong.err;
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("requires a token"), std::string::npos) << none.err;
}

TEST(GenerateCli, ChatRendersTheTemplateAndPrintsMessages) {
  const std::string request = R"({"messages": [{"role": "user", "content": "hi"}]})";
  const Output json = ajet_generate(
      base_args() + " --chat --max-tokens 4 --temperature 0 --ignore-eos --logprobs", request);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = parse_json(json);
  // "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" in the byte tokenizer's ids.
  std::vector<int32_t> expected = {kImStart};
  for (char c : std::string("user\nhi")) expected.push_back(static_cast<unsigned char>(c));
  expected.push_back(kImEnd);
  expected.push_back('\n');
  expected.push_back(kImStart);
  for (char c : std::string("assistant\n")) expected.push_back(static_cast<unsigned char>(c));
  EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int32_t>>(), expected);
  const auto& message = j["samples"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_TRUE(message.contains("content")) << message.dump();

  // Without --logprobs: one OpenAI assistant message per line.
  const Output plain =
      ajet_generate(base_args() + " --chat --max-tokens 4 --temperature 0 --ignore-eos", request);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto m = parse_json(plain);
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m, message);
}

TEST(GenerateCli, BadInputGivesClearErrors) {
  struct Case {
    std::string args;
    std::string input;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--model " + quote(process_dir() / "missing"), "x", "not a directory"},
      {"--max-tokens 3", "x", "--model is required"},
      {base_args() + " --temperature -1", "x", "temperature"},
      {base_args() + " --max-tokens 0", "x", "max_tokens"},
      {base_args() + " --chat", "{not json", "stdin"},
      {base_args() + " --chat", R"({"messages": []})", "messages"},
      {base_args(), "", "prompt is empty"},
      {"--engine unix:" + (process_dir() / "nobody.sock").string() +
           " --connect-timeout 0.2 --max-tokens 2",
       "x", "nobody.sock"},
  };
  for (const Case& c : cases) {
    const Output o = ajet_generate(c.args, c.input);
    EXPECT_NE(o.exit_code, 0) << c.args;
    EXPECT_NE(o.err.find(c.message), std::string::npos) << c.args << "\n" << o.err;
  }
}

}  // namespace
}  // namespace ajet::engine
