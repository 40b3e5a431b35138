#include "rpc/messages.h"

#include <gtest/gtest.h>

namespace ajet::rpc {
namespace {

// Sends a frame through the wire format, as the transport does.
Frame over_the_wire(Frame f, FrameKind kind = FrameKind::kRequest) {
  f.kind = kind;
  f.id = 5;
  return decode_frame_bytes(flatten(encode_frame(std::move(f), {})), {});
}

void expect_invalid(const std::function<void()>& fn, std::string_view needle) {
  try {
    fn();
    ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

GenerateRequest sample_request() {
  GenerateRequest r;
  r.prompt = {151644, 872, 198, 9707};
  r.n = 4;
  r.max_tokens = 128;
  r.temperature = 0.7;
  r.top_p = 0.95;
  r.top_k = 40;
  r.seed = -17;
  r.stop_token_ids = {151645, 151643};
  r.top_logprobs = 5;
  r.tag = "ep-9f2c/call-3";
  return r;
}

TEST(Messages, GenerateRequestRoundTrips) {
  GenerateRequest r = sample_request();
  Frame f = over_the_wire(encode_generate_request(r));
  EXPECT_EQ(f.method, "generate");
  GenerateRequest g = decode_generate_request(f);
  EXPECT_EQ(g.prompt, r.prompt);
  EXPECT_EQ(g.n, r.n);
  EXPECT_EQ(g.max_tokens, r.max_tokens);
  EXPECT_DOUBLE_EQ(g.temperature, r.temperature);
  EXPECT_DOUBLE_EQ(g.top_p, r.top_p);
  EXPECT_EQ(g.top_k, r.top_k);
  EXPECT_EQ(g.seed, r.seed);
  EXPECT_EQ(g.stop_token_ids, r.stop_token_ids);
  EXPECT_EQ(g.top_logprobs, r.top_logprobs);
  EXPECT_EQ(g.tag, r.tag);
  // Token ids travel as binary, not as JSON text.
  EXPECT_FALSE(f.body.contains("prompt"));
  EXPECT_EQ(f.find_array("prompt")->dtype, DType::kI32);
}

TEST(Messages, GenerateRequestDefaultsAndOptionalFields) {
  Frame f;
  f.method = "generate";
  f.body = {{"max_tokens", 3}};
  f.add_array("prompt", std::vector<int32_t>{1});
  GenerateRequest g = decode_generate_request(over_the_wire(f));
  EXPECT_EQ(g.n, 1);
  EXPECT_DOUBLE_EQ(g.temperature, 1.0);
  EXPECT_DOUBLE_EQ(g.top_p, 1.0);
  EXPECT_EQ(g.top_k, 0);
  EXPECT_FALSE(g.seed.has_value());
  EXPECT_TRUE(g.stop_token_ids.empty());
  EXPECT_EQ(g.top_logprobs, 0);
}

TEST(Messages, GenerateRequestValidationNamesTheField) {
  auto with = [](auto mutate) {
    return [mutate] {
      GenerateRequest r = sample_request();
      mutate(r);
      decode_generate_request(over_the_wire(encode_generate_request(r)));
    };
  };
  expect_invalid(with([](GenerateRequest& r) { r.prompt.clear(); }), "'prompt' is empty");
  expect_invalid(with([](GenerateRequest& r) { r.prompt[2] = -3; }),
                 "prompt[2] = -3 is not a valid token id");
  expect_invalid(with([](GenerateRequest& r) { r.stop_token_ids = {-1}; }),
                 "stop_token_ids[0] = -1");
  expect_invalid(with([](GenerateRequest& r) { r.n = 0; }), "'n' must be in [1, 64], got 0");
  expect_invalid(with([](GenerateRequest& r) { r.max_tokens = 0; }), "'max_tokens' must be in");
  expect_invalid(with([](GenerateRequest& r) { r.temperature = -0.1; }),
                 "'temperature' must be a finite number >= 0");
  expect_invalid(with([](GenerateRequest& r) { r.top_p = 0; }), "'top_p' must be in (0, 1]");
  expect_invalid(with([](GenerateRequest& r) { r.top_p = 1.5; }), "'top_p' must be in (0, 1]");
  expect_invalid(with([](GenerateRequest& r) { r.top_k = -1; }), "'top_k' must be in");
  expect_invalid(with([](GenerateRequest& r) { r.top_logprobs = 21; }),
                 "'top_logprobs' must be in [0, 20], got 21");
  expect_invalid(
      [] {
        Frame f;
        f.method = "generate";
        f.body = {{"max_tokens", 3}};
        f.add_array("prompt", std::vector<int64_t>{1});
        decode_generate_request(over_the_wire(f));
      },
      "array 'prompt' must be i32, got i64");
  expect_invalid(
      [] {
        Frame f;
        f.method = "generate";
        f.body = {{"max_tokens", "many"}};
        f.add_array("prompt", std::vector<int32_t>{1});
        decode_generate_request(over_the_wire(f));
      },
      "field 'max_tokens' must be an integer, got string");
}

TEST(Messages, TokensEventRoundTripsWithTopLogprobsAndFinish) {
  TokensEvent e;
  e.sample = 2;
  e.token_ids = {11, 12};
  e.logprobs = {-0.5f, -0.25f};
  e.raw_logprobs = {-0.75f, -0.125f};
  e.policy_versions = {6, 7};
  e.top_k = 3;
  e.top_ids = {11, 1, 2, 12, 3, 4};
  e.top_logprobs = {-0.5f, -1.f, -2.f, -0.25f, -3.f, -4.f};
  e.finish_reason = FinishReason::kLength;
  e.prompt_tokens = 9;
  e.completion_tokens = 40;
  TokensEvent d = decode_tokens_event(over_the_wire(encode_tokens_event(e), FrameKind::kReply));
  EXPECT_EQ(d.sample, 2);
  EXPECT_EQ(d.token_ids, e.token_ids);
  EXPECT_EQ(d.logprobs, e.logprobs);
  EXPECT_EQ(d.raw_logprobs, e.raw_logprobs);
  EXPECT_EQ(d.policy_versions, e.policy_versions);
  EXPECT_EQ(d.top_k, 3);
  EXPECT_EQ(d.top_ids, e.top_ids);
  EXPECT_EQ(d.top_logprobs, e.top_logprobs);
  EXPECT_EQ(d.finish_reason, FinishReason::kLength);
  EXPECT_EQ(d.prompt_tokens, 9);
  EXPECT_EQ(d.completion_tokens, 40);

  TokensEvent plain;  // a mid-stream event: no top logprobs, no finish
  plain.token_ids = {5};
  plain.logprobs = {-1.f};
  plain.raw_logprobs = {-1.f};
  plain.policy_versions = {1};
  TokensEvent p = decode_tokens_event(over_the_wire(encode_tokens_event(plain), FrameKind::kReply));
  EXPECT_FALSE(p.finish_reason.has_value());
  EXPECT_EQ(p.top_k, 0);
  EXPECT_TRUE(p.top_ids.empty());
}

TEST(Messages, PromptLogprobsAndMadnessFinishesRoundTrip) {
  TokensEvent e;
  e.token_ids = {7};
  e.logprobs = {-0.5f};
  e.raw_logprobs = {-0.5f};
  e.policy_versions = {3};
  e.prompt_top_k = 2;
  e.prompt_ids = {4, 5};
  e.prompt_logprobs = {-1.5f, -0.25f};
  e.prompt_ranks = {3, 1};
  e.prompt_top_ids = {9, 8, 5, 6};
  e.prompt_top_logprobs = {-0.5f, -1.f, -0.25f, -2.f};
  e.finish_reason = FinishReason::kRepetition;
  TokensEvent d = decode_tokens_event(over_the_wire(encode_tokens_event(e), FrameKind::kReply));
  EXPECT_EQ(d.prompt_top_k, 2);
  EXPECT_EQ(d.prompt_ids, e.prompt_ids);
  EXPECT_EQ(d.prompt_logprobs, e.prompt_logprobs);
  EXPECT_EQ(d.prompt_ranks, e.prompt_ranks);
  EXPECT_EQ(d.prompt_top_ids, e.prompt_top_ids);
  EXPECT_EQ(d.prompt_top_logprobs, e.prompt_top_logprobs);
  EXPECT_EQ(d.finish_reason, FinishReason::kRepetition);
  EXPECT_TRUE(is_madness(*d.finish_reason));
  e.prompt_ranks = {1};
  expect_invalid([&] { encode_tokens_event(e); }, "prompt_ranks");

  GenerateRequest g;
  g.prompt = {1, 2, 3};
  g.prompt_logprobs = 0;
  EXPECT_EQ(decode_generate_request(over_the_wire(encode_generate_request(g), FrameKind::kRequest))
                .prompt_logprobs,
            0);
  g.prompt_logprobs = -1;
  EXPECT_EQ(decode_generate_request(over_the_wire(encode_generate_request(g), FrameKind::kRequest))
                .prompt_logprobs,
            -1);
}

TEST(Messages, TokensEventShapesAreChecked) {
  TokensEvent e;
  e.token_ids = {1, 2};
  e.logprobs = {-1.f};
  e.raw_logprobs = {-1.f, -1.f};
  e.policy_versions = {1, 1};
  expect_invalid([&] { encode_tokens_event(e); }, "array 'logprobs' has 1 entries, expected 2");
  // The decoder checks what a peer sent, independently of our encoder.
  Frame f;
  f.body = {{"event", "tokens"}, {"sample", 0}, {"top_k", 2}};
  f.add_array("token_ids", std::vector<int32_t>{1});
  f.add_array("logprobs", std::vector<float>{-1.f});
  f.add_array("raw_logprobs", std::vector<float>{-1.f});
  f.add_array("policy_versions", std::vector<int64_t>{1});
  f.add_array("top_ids", std::vector<int32_t>{1});
  f.add_array("top_logprobs", std::vector<float>{-1.f, -2.f});
  expect_invalid([&] { decode_tokens_event(over_the_wire(f, FrameKind::kReply)); },
                 "array 'top_ids' has 1 entries, expected 2");
  Frame r = encode_tokens_event(TokensEvent{});
  r.body["finish_reason"] = "tired";
  expect_invalid([&] { decode_tokens_event(over_the_wire(r, FrameKind::kReply)); },
                 "unknown finish_reason 'tired'");
}

TEST(Messages, GenerateDoneAndStatus) {
  GenerateDone d =
      decode_generate_done(over_the_wire(encode_generate_done({12, 34}), FrameKind::kDone));
  EXPECT_EQ(d.prompt_tokens, 12);
  EXPECT_EQ(d.completion_tokens, 34);
  Frame s = over_the_wire(make_status_request());
  EXPECT_EQ(s.method, "status");
}

TEST(Messages, TrainBatchRoundTripsAndValidates) {
  TrainBatch b;
  b.sample_offsets = {0, 3, 3, 5};
  b.token_ids = {1, 2, 3, 4, 5};
  b.loss_mask = {0, 1, 1, 0, 1};
  b.logprobs = {0, -0.1f, -0.2f, 0, -0.3f};
  b.advantages = {0.5f, 0.5f, 0.5f, -1.f, -1.f};
  b.meta = {{"step", 4}, {"task_ids", {"a", "b", "c"}}};
  Frame f = over_the_wire(encode_train_batch(b));
  EXPECT_EQ(f.method, "train_step");
  TrainBatch d = decode_train_batch(f);
  EXPECT_EQ(d.sample_offsets, b.sample_offsets);
  EXPECT_EQ(d.token_ids, b.token_ids);
  EXPECT_EQ(d.loss_mask, b.loss_mask);
  EXPECT_EQ(d.logprobs, b.logprobs);
  EXPECT_EQ(d.advantages, b.advantages);
  EXPECT_EQ(d.meta, b.meta);

  auto with = [&](auto mutate) {
    return [&, mutate] {
      TrainBatch c = b;
      mutate(c);
      decode_train_batch(over_the_wire(encode_train_batch(c)));
    };
  };
  expect_invalid(with([](TrainBatch& c) {
                   c.sample_offsets = {0, 4, 3, 5};
                 }),
                 "'sample_offsets' decreases at index 2");
  expect_invalid(with([](TrainBatch& c) {
                   c.sample_offsets = {0, 3, 6};
                 }),
                 "must start at 0 and end at the token count 5");
  expect_invalid(with([](TrainBatch& c) { c.loss_mask.pop_back(); }),
                 "array 'loss_mask' has 4 entries, expected 5");
  expect_invalid(with([](TrainBatch& c) { c.loss_mask[1] = 2; }), "loss_mask[1] = 2 is not 0 or 1");
  expect_invalid(with([](TrainBatch& c) { c.token_ids[0] = -1; }), "token_ids[0] = -1");
}

}  // namespace
}  // namespace ajet::rpc
