// OpenAI request parameters: validation names the field; train episodes sample with the server's
// settings (the request may only shorten the turn), eval episodes with the request's; context overflow.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "openai/openai_params.h"

namespace ajet::swarm {
namespace {

using ::testing::HasSubstr;
using text::OrderedJson;

std::string error_of(const OrderedJson& body) {
  try {
    parse_chat_params(body);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(OpenAiParams, ReadsEveryField) {
  OpenAiParams p = parse_chat_params(OrderedJson::parse(R"({
    "model": "planner", "n": 3, "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9,
    "seed": 11, "stop": ["\n\n", "END"], "logprobs": true, "top_logprobs": 4, "stream": true,
    "stream_options": {"include_usage": true}, "tool_choice": {"type": "function", "function": {"name": "f"}},
    "chat_template_kwargs": {"enable_thinking": false}, "messages": []})"));
  EXPECT_EQ(p.model, "planner");
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(p.temperature, 0.5);
  EXPECT_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.seed, 11);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 4);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(p.tool_choice_name, "f");
  EXPECT_EQ(p.enable_thinking, false);
  OpenAiParams d = parse_chat_params(OrderedJson::parse(R"({"stop": "x", "tool_choice": "none", "n": null})"));
  EXPECT_EQ(d.n, 1);
  EXPECT_EQ(d.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(d.tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(d.max_tokens);
}

TEST(OpenAiParams, ErrorsNameTheField) {
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"n": 0})")), HasSubstr("'n'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"n": 1.5})")), HasSubstr("'n' must be an integer"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"temperature": 3})")), HasSubstr("'temperature'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"temperature": "warm"})")), HasSubstr("number, got string"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"top_p": 0})")), HasSubstr("'top_p'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"max_tokens": 0})")), HasSubstr("'max_tokens'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"stop": [""]})")), HasSubstr("'stop[0]'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"stop": 5})")), HasSubstr("'stop'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"top_logprobs": 2})")), HasSubstr("\"logprobs\": true"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"logprobs": true, "top_logprobs": 21})")), HasSubstr("'top_logprobs'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"tool_choice": "maybe"})")), HasSubstr("'tool_choice'"));
  // A type that is not a string was a JSON type error, answered 500 "internal error".
  for (const char* type : {"1", "null", "[\"function\"]", "{}", "true"}) {
    EXPECT_THAT(error_of(OrderedJson::parse(std::string(R"({"tool_choice": {"type": )") + type +
                                            R"(, "function": {"name": "f"}}})")),
                HasSubstr("'tool_choice'"))
        << type;
  }
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"top_k": 4294967297})")), HasSubstr("'top_k'"));  // was 1: greedy
  EXPECT_THAT(error_of(OrderedJson::parse("{\"stop\": [\"ok\", \"" + std::string(kMaxStopBytes + 1, 'x') + "\"]}")),
              HasSubstr("'stop[1]' is 257 bytes long"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"stream_options": []})")), HasSubstr("'stream_options'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"model": 7})")), HasSubstr("'model'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"([1, 2])")), HasSubstr("JSON object"));
}

TEST(OpenAiParams, CompletionsPromptAndLogprobs) {
  OpenAiParams p = parse_completion_params(OrderedJson::parse(R"({"logprobs": 2})"));
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 2);
  EXPECT_THROW(parse_completion_params(OrderedJson::parse(R"({"echo": true})")), Error);
  EXPECT_EQ(parse_completion_prompt(OrderedJson::parse(R"({"prompt": "hi"})")).text, "hi");
  EXPECT_EQ(parse_completion_prompt(OrderedJson::parse(R"({"prompt": ["hi"]})")).text, "hi");
  EXPECT_EQ(parse_completion_prompt(OrderedJson::parse(R"({"prompt": [1, 2, 3]})")).ids,
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_completion_prompt(OrderedJson::parse(R"({"prompt": [[4, 5]]})")).ids, (std::vector<int32_t>{4, 5}));
  EXPECT_THROW(parse_completion_prompt(OrderedJson::parse(R"({"prompt": ["a", "b"]})")), Error);
  EXPECT_THROW(parse_completion_prompt(OrderedJson::parse(R"({"prompt": [-1]})")), Error);
  EXPECT_THROW(parse_completion_prompt(OrderedJson::parse(R"({})")), Error);
}

TEST(OpenAiParams, TrainEpisodesSampleWithTheServersSettingsEvalWithTheRequests) {
  SamplingRules rules;
  rules.train_temperature = 0.9;
  rules.train_top_p = 0.95;
  rules.train_top_k = 50;
  rules.eval_temperature = 0.0;
  rules.max_tokens_per_turn = 100;
  rules.max_model_len = 1000;
  OpenAiParams p = parse_chat_params(OrderedJson::parse(
      R"({"temperature": 0.1, "top_p": 0.5, "top_k": 3, "max_tokens": 500, "n": 2, "seed": 4, "logprobs": true,
          "top_logprobs": 2})"));
  rpc::GenerateRequest train = resolve_generation(p, rules, /*train=*/true, 10);
  EXPECT_EQ(train.temperature, 0.9);
  EXPECT_EQ(train.top_p, 0.95);
  EXPECT_EQ(train.top_k, 50);
  EXPECT_EQ(train.max_tokens, 100);  // the request may not lengthen a train turn
  EXPECT_EQ(train.n, 2);
  EXPECT_EQ(train.seed, 4);
  EXPECT_EQ(train.top_logprobs, 2);
  p.max_tokens = 20;
  EXPECT_EQ(resolve_generation(p, rules, true, 10).max_tokens, 20);  // ... but may shorten it

  rpc::GenerateRequest eval = resolve_generation(p, rules, /*train=*/false, 10);
  EXPECT_EQ(eval.temperature, 0.1);
  EXPECT_EQ(eval.top_p, 0.5);
  EXPECT_EQ(eval.top_k, 3);
  EXPECT_EQ(eval.max_tokens, 20);
  OpenAiParams bare;
  rpc::GenerateRequest eval_default = resolve_generation(bare, rules, false, 10);
  EXPECT_EQ(eval_default.temperature, 0.0);  // ajet.rollout.val_kwargs
  EXPECT_EQ(eval_default.max_tokens, 100);
}

TEST(OpenAiParams, ContextOverflowIsAClearError) {
  SamplingRules rules;
  rules.max_tokens_per_turn = 100;
  rules.max_model_len = 64;
  OpenAiParams bare;
  EXPECT_EQ(resolve_generation(bare, rules, false, 60).max_tokens, 4);  // no max_tokens: what is left
  try {
    resolve_generation(bare, rules, false, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("context overflow"));
    EXPECT_THAT(e.what(), HasSubstr("64"));
  }
  OpenAiParams asks;
  asks.max_tokens = 10;
  try {
    resolve_generation(asks, rules, false, 60);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("at most 4"));
  }
}

}  // namespace
}  // namespace ajet::swarm
