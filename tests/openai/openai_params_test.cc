// OpenAI request parameters: validation names the field; train episodes sample with the server's
// settings (the request may only shorten the turn), eval episodes with the request's; context
// overflow.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "openai/openai_params.h"

namespace ajet::openai {
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
  OpenAiParams d =
      parse_chat_params(OrderedJson::parse(R"({"stop": "x", "tool_choice": "none", "n": null})"));
  EXPECT_EQ(d.n, 1);
  EXPECT_EQ(d.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(d.tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(d.max_tokens);
}

TEST(OpenAiParams, ErrorsNameTheField) {
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"n": 0})")), HasSubstr("'n'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"n": 1.5})")), HasSubstr("'n' must be an integer"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"temperature": 3})")), HasSubstr("'temperature'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"temperature": "warm"})")),
              HasSubstr("number, got string"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"top_p": 0})")), HasSubstr("'top_p'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"max_tokens": 0})")), HasSubstr("'max_tokens'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"stop": [""]})")), HasSubstr("'stop[0]'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"stop": 5})")), HasSubstr("'stop'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"top_logprobs": 2})")),
              HasSubstr("\"logprobs\": true"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"logprobs": true, "top_logprobs": 21})")),
              HasSubstr("'top_logprobs'"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"tool_choice": "maybe"})")),
              HasSubstr("'tool_choice'"));
  // A type that is not a string was a JSON type error, answered 500 "internal error".
  for (const char* type : {"1", "null", "[\"function\"]", "{}", "true"}) {
    EXPECT_THAT(error_of(OrderedJson::parse(std::string(R"({"tool_choice": {"type": )") + type +
                                            R"(, "function": {"name": "f"}}})")),
                HasSubstr("'tool_choice'"))
        << type;
  }
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"top_k": 4294967297})")),
              HasSubstr("'top_k'"));  // was 1: greedy
  EXPECT_THAT(error_of(OrderedJson::parse("{\"stop\": [\"ok\", \"" +
                                          std::string(kMaxStopBytes + 1, 'x') + "\"]}")),
              HasSubstr("'stop[1]' is 257 bytes long"));
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"stream_options": []})")),
              HasSubstr("'stream_options'"));
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
  EXPECT_EQ(parse_completion_prompt(OrderedJson::parse(R"({"prompt": [[4, 5]]})")).ids,
            (std::vector<int32_t>{4, 5}));
  EXPECT_THROW(parse_completion_prompt(OrderedJson::parse(R"({"prompt": ["a", "b"]})")), Error);
  EXPECT_THROW(parse_completion_prompt(OrderedJson::parse(R"({"prompt": [-1]})")), Error);
  EXPECT_THROW(parse_completion_prompt(OrderedJson::parse(R"({})")), Error);
}

TEST(OpenAiParams, TrainEpisodesSampleWithTheServersSettingsEvalWithTheRequests) {
  episodes::SamplingRules rules;
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
  episodes::SamplingRules rules;
  rules.max_tokens_per_turn = 100;
  rules.max_model_len = 64;
  OpenAiParams bare;
  EXPECT_EQ(resolve_generation(bare, rules, false, 60).max_tokens,
            4);  // no max_tokens: what is left
  try {
    resolve_generation(bare, rules, false, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("This model's maximum context length is"));
    EXPECT_THAT(e.what(), HasSubstr("64"));
    EXPECT_NE(dynamic_cast<const ContextLengthExceeded*>(&e), nullptr);
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

// Before: the front accepted n up to 128 while the engine decodes at most 64 (and at most
// ajet.rollout.max_num_seqs) samples of a request, so 65..128 went to the engine and failed there.
TEST(OpenAiParams, NIsAtMost64AndAtMostTheEnginesMaxNumSeqs) {
  EXPECT_EQ(kMaxChoices, 64);
  EXPECT_EQ(kMaxChoices, rpc::kMaxSamplesPerRequest);
  EXPECT_EQ(parse_chat_params(OrderedJson::parse(R"({"n": 64})")).n, 64);
  EXPECT_THAT(error_of(OrderedJson::parse(R"({"n": 65})")),
              HasSubstr("'n' must be between 1 and 64, got 65"));
  episodes::SamplingRules rules;
  rules.max_num_seqs = 8;
  OpenAiParams p;
  p.n = 9;
  try {
    resolve_generation(p, rules, false, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'n' is 9"));
    EXPECT_THAT(e.what(), HasSubstr("ajet.rollout.max_num_seqs"));
  }
  p.n = 8;
  EXPECT_EQ(resolve_generation(p, rules, false, 10).n, 8);
}

// Before: nothing bounded n × max_tokens × top_logprobs; one n=64 call with logprobs took the front
// past 6 GB.
TEST(OpenAiParams, TokenEntriesOfOneAnswerAreBoundedNamingTheFields) {
  episodes::SamplingRules rules;
  rules.max_tokens_per_turn = 1000;
  rules.max_model_len = 100000;
  OpenAiParams p =
      parse_chat_params(OrderedJson::parse(R"({"n": 16, "max_tokens": 1000, "logprobs": true,
                                                            "top_logprobs": 20})"));
  const rpc::GenerateRequest g = resolve_generation(p, rules, false, 10);
  check_token_entries(p, g, 16 * 1000 * 21);  // at the limit: fine
  check_token_entries(p, g, 0);               // 0: no limit
  try {
    check_token_entries(p, g, 100000);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(),
                HasSubstr("n (16) × max_tokens (1000) × (1 + top_logprobs (20)) = 336000"));
    EXPECT_THAT(e.what(), HasSubstr("limit of 100000"));
    EXPECT_THAT(e.what(), HasSubstr("--max-request-token-entries"));
  }
  // The names the client used: max_completion_tokens, a default, /v1/completions' logprobs.
  OpenAiParams completion =
      parse_completion_params(OrderedJson::parse(R"({"n": 4, "logprobs": 5})"));
  try {
    check_token_entries(completion, resolve_generation(completion, rules, false, 10), 1000);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("n (4) × max_tokens (1000, the default) × (1 + logprobs (5))"));
  }
  OpenAiParams chat =
      parse_chat_params(OrderedJson::parse(R"({"n": 4, "max_completion_tokens": 500})"));
  try {
    check_token_entries(chat, resolve_generation(chat, rules, false, 10), 1000);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("max_completion_tokens (500)"));
  }
  EXPECT_EQ(kDefaultMaxTokenEntries, 524288);
}

// Before: errors of /v1/messages and /v1/responses named the chat fields their bodies became
// ('stop', 'max_tokens') instead of what the client sent.
TEST(OpenAiParams, ErrorsNameTheFieldsOfTheClientsApi) {
  const FieldNames messages{.stop = "stop_sequences", .max_tokens = "max_tokens"};
  const FieldNames responses{.stop = "stop", .max_tokens = "max_output_tokens"};
  auto error_with = [](const char* body, const FieldNames& names) -> std::string {
    try {
      parse_chat_params(OrderedJson::parse(body), names);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error_with(R"({"stop": [""]})", messages),
              HasSubstr("'stop_sequences[0]' must not be empty"));
  EXPECT_THAT(error_with(R"({"stop": 5})", messages), HasSubstr("'stop_sequences' must be"));
  EXPECT_THAT(error_with(R"({"max_tokens": 0})", responses),
              HasSubstr("'max_output_tokens' must be at least 1"));
  EXPECT_THAT(error_with(R"({"max_tokens": "x"})", responses),
              HasSubstr("'max_output_tokens' must be an integer"));
  episodes::SamplingRules rules;
  rules.max_model_len = 64;
  OpenAiParams p = parse_chat_params(OrderedJson::parse(R"({"max_tokens": 10})"), responses);
  try {
    resolve_generation(p, rules, false, 60);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("max_output_tokens (10)"));
    EXPECT_THAT(e.what(), HasSubstr("lower max_output_tokens to at most 4"));
  }
}

// Before: a tool message answering no tool call of the request was rendered as if it did.
TEST(OpenAiParams, ToolResultsMustAnswerAnEarlierToolCall) {
  auto request =
      [](const char* tool_call_id) {
        return text::parse_chat_request(OrderedJson::parse(std::string(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": )") + tool_call_id + R"(, "content": "sunny"}]})"));
      };
  check_tool_results(request(R"("call_1")"));
  check_tool_results(request("null"));  // no id: nothing to match (lenient, as before)
  try {
    check_tool_results(request(R"("call_9")"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'messages[2].tool_call_id' 'call_9' answers no tool call"));
  }
}

}  // namespace
}  // namespace ajet::openai
