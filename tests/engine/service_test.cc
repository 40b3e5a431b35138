// The engine service in-process (its router behind a real rpc::Server in this process: the way
// further methods are added and tested), the RPC <-> engine event bridge, and greedy output through
// a real `ajet-engine serve` process against the same model run on an in-process InferenceEngine.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "engine/bridge.h"
#include "engine/runtime.h"
#include "engine/service.h"
#include "engine_process.h"
#include "infer/engine.h"
#include "rpc/server.h"

namespace ajet::engine {
namespace testing {
bool torch_has_cuda() { return torch::cuda::is_available(); }
}  // namespace testing

namespace {

using namespace testing;

EngineOptions tiny_options() {
  EngineOptions o;
  o.model_dir = tiny_model_dir();
  o.threads = 1;
  o.kv_cache_mb = 32;
  return o;
}

TEST(EngineBridge, BuildsTokensEventsAndTotals) {
  TokensEventBuilder builder(/*prompt_tokens=*/5, /*samples=*/2, /*top_logprobs=*/2);
  batching::GenerateEvent a;
  a.sample_index = 1;
  batching::GeneratedToken t{
      7, -0.5f, -0.7f, 3, {{7, -0.5f}}};  // one alternative where two are asked for
  a.tokens = {t, t};
  rpc::TokensEvent e = builder.next(a);
  EXPECT_EQ(e.sample, 1);
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(e.policy_versions, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(e.top_k, 2);
  EXPECT_EQ(e.top_ids, (std::vector<int32_t>{7, -1, 7, -1}));  // padded to the fixed row width
  EXPECT_TRUE(std::isinf(e.top_logprobs[1]));
  EXPECT_FALSE(e.finish_reason);
  batching::GenerateEvent end;
  end.sample_index = 1;
  end.tokens = {t};
  end.finish = batching::FinishReason::kStop;
  e = builder.next(end);
  EXPECT_EQ(e.finish_reason, rpc::FinishReason::kStop);
  EXPECT_EQ(e.prompt_tokens, 5);
  EXPECT_EQ(e.completion_tokens, 3);
  batching::GenerateEvent other;
  other.sample_index = 0;
  other.finish = batching::FinishReason::kAbort;
  e = builder.next(other);
  EXPECT_EQ(e.finish_reason, rpc::FinishReason::kAbort);
  EXPECT_EQ(e.completion_tokens, 0);
  EXPECT_EQ(builder.done().completion_tokens, 3);
  // The wire format accepts what the builder makes.
  EXPECT_EQ(rpc::decode_tokens_event(rpc::encode_tokens_event(e)).finish_reason,
            rpc::FinishReason::kAbort);
}

TEST(EngineService, GreedyThroughTheEngineProcessEqualsInProcess) {
  EngineProcess process;
  rpc::Client client(process.wait_ready());
  client.connect();
  EngineRuntime local = start_engine(tiny_options());
  for (int salt = 0; salt < 3; ++salt) {
    batching::GenerateRequest r;
    r.id = "local-" + std::to_string(salt);
    r.prompt = prompt_of(5 + 7 * salt, salt);
    r.max_tokens = 12;
    r.temperature = 0.0;
    const infer::GenerateResult want = local.engine->generate(r).get();
    ASSERT_FALSE(want.error);
    const GenerateOutcome got = generate(client, greedy(r.prompt, 12));
    ASSERT_TRUE(got.done) << (got.error ? got.error->what() : "");
    std::vector<int32_t> want_ids;
    for (const auto& t : want.samples[0].tokens) want_ids.push_back(t.id);
    EXPECT_EQ(got.ids(), want_ids) << "prompt " << salt;
    const auto raw = got.logprobs(0, true);
    for (size_t t = 0; t < raw.size() && t < want_ids.size(); ++t) {
      EXPECT_NEAR(raw[t], want.samples[0].tokens[t].raw_logprob, 1e-5)
          << "prompt " << salt << " token " << t;
    }
  }
}

TEST(EngineService, InProcessServiceTakesControlMethods) {
  EngineRuntime runtime = start_engine(tiny_options());
  EngineService service(*runtime.engine, runtime.model, runtime.compute);
  // A method added the way the trainer's will be: weights change on the engine thread between
  // steps, the version moves, the reply follows.
  service.add_control_method("bump_version", [&service](const rpc::Frame& request) {
    const int64_t times = get_int(request.body, "times", "bump_version");
    for (int64_t i = 0; i < times; ++i) {
      service.engine().run_exclusive([](model::Qwen2Model&) {}, /*bump_version=*/true).get();
    }
    rpc::Frame reply;
    reply.body = {{"policy_version", service.engine().policy_version()}};
    return reply;
  });
  service.add_control_method("refuse", [](const rpc::Frame&) -> rpc::Frame {
    fail(ErrorCode::kFailedPrecondition, "refuse: not now");
  });
  rpc::Server server(service.router());
  server.listen("unix:" + (process_dir() / "inproc.sock").string());
  service.set_address(server.address());

  rpc::Client client(server.address());
  client.connect();
  rpc::Frame bump;
  bump.method = "bump_version";
  bump.body = {{"times", 2}};
  EXPECT_EQ(client.call(bump, std::chrono::seconds(60)).done.body["policy_version"], 2);
  const GenerateOutcome o = generate(client, greedy(prompt_of(4, 1), 3));
  ASSERT_TRUE(o.done);
  for (const auto& e : o.events) {
    for (int64_t v : e.policy_versions) EXPECT_EQ(v, 2);
  }
  rpc::Frame refuse;
  refuse.method = "refuse";
  try {
    client.call(refuse, std::chrono::seconds(60));
    ADD_FAILURE() << "refuse answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("not now"), std::string::npos) << e.what();
  }
  const Json status = service.status();
  EXPECT_EQ(status["policy_version"], 2);
  EXPECT_EQ(status["rpc"]["address"], server.address());
  EXPECT_EQ(status["rpc"]["generate_requests"], 1);

  // After stop, control calls are refused with `unavailable`; generate still reaches the engine.
  service.stop();
  try {
    client.call(bump, std::chrono::seconds(60));
    ADD_FAILURE() << "bump after stop answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
  }
  runtime.engine->stop();
  const GenerateOutcome late = generate(client, greedy(prompt_of(4, 1), 3));
  ASSERT_TRUE(late.error);
  EXPECT_EQ(late.error->code(), ErrorCode::kUnavailable);
  server.stop();
}

TEST(EngineRuntime, StartEngineNamesBadSettings) {
  EngineOptions o = tiny_options();
  o.dtype = "int8";
  EXPECT_THROW(start_engine(o), Error);
  o = tiny_options();
  o.max_batch_tokens = 0;
  try {
    start_engine(o);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-batch-tokens"), std::string::npos) << e.what();
  }
  o = tiny_options();
  o.policy_version = 9;
  o.dtype = "bfloat16";
  EngineRuntime rt = start_engine(o);
  EXPECT_EQ(rt.engine->policy_version(), 9);
  EXPECT_EQ(rt.model.dtype, "bfloat16");
  EXPECT_EQ(rt.compute.threads, 1);
  batching::GenerateRequest r;
  r.id = "bf16";
  r.prompt = prompt_of(6, 2);
  r.max_tokens = 4;
  const infer::GenerateResult result = rt.engine->generate(r).get();
  ASSERT_FALSE(result.error);
  EXPECT_EQ(result.samples[0].tokens.size(), 4u);
  EXPECT_EQ(result.samples[0].tokens[0].policy_version, 9);
}

}  // namespace
}  // namespace ajet::engine
