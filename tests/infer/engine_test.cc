// The engine end to end on a tiny random model. Every generated token's raw logprob is checked
// against the no-cache forward over the same tokens (tolerance 1e-4 in float32), which covers the
// paged cache, chunked prefill, batching, copy-on-write and preemption together. Manual stepping
// (no engine thread) keeps batch composition deterministic; the threaded tests wait on futures
// only, never on time.
#include <gtest/gtest.h>

#include <set>

#include "engine_test_util.h"

namespace ajet::infer {
namespace {

using namespace testing;
constexpr double kTol = 1e-4;

// Every token's raw logprob (and greedy choice, when greedy) against the full recompute.
void expect_matches_reference(model::Qwen2Model& m, const std::vector<int32_t>& prompt,
                              const SampleOutput& s, bool greedy) {
  std::vector<int32_t> seq = prompt;
  for (const batching::GeneratedToken& t : s.tokens) seq.push_back(t.id);
  torch::Tensor ref = reference_logprobs(m, seq);  // (T, V)
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const int64_t row = static_cast<int64_t>(prompt.size() + i) - 1;
    EXPECT_NEAR(s.tokens[i].raw_logprob, ref[row][s.tokens[i].id].item<double>(), kTol)
        << "token " << i;
    if (greedy) {
      EXPECT_EQ(s.tokens[i].id, ref[row].argmax().item<int64_t>()) << "token " << i;
    }
  }
}

// Each request on a fresh manual engine by itself, one after the other.
std::vector<GenerateResult> each_alone(model::Qwen2Model& m,
                                       const std::vector<batching::GenerateRequest>& requests) {
  std::vector<GenerateResult> alone;
  InferenceEngine engine(m, manual_config());
  for (const batching::GenerateRequest& r : requests) {
    auto f = engine.generate(r);
    drain(engine);
    alone.push_back(f.get());
  }
  return alone;
}

TEST(ForwardCached, LogitsMatchFullForwardInOneChunkAndInSeveral) {
  model::Qwen2Model m = tiny_model();
  const std::vector<int32_t> tokens = prompt_of(37, 3);
  torch::Tensor ref = reference_logprobs(m, tokens).exp();  // (T, V) probabilities
  const hf::ModelConfig& c = m->config();
  for (int64_t chunk : {37, 16, 5, 1}) {
    for (AttentionImpl impl : {AttentionImpl::kCpuKernel, AttentionImpl::kTorchOps}) {
      KvCache cache({c.num_hidden_layers, c.num_key_value_heads, c.head_dim, 4}, 16, m->options());
      std::vector<int32_t> table = {9, 3, 14, 0, 7, 1, 12, 5, 2, 11};  // 40 positions, scattered
      std::vector<torch::Tensor> rows;
      for (int64_t start = 0; start < 37; start += chunk) {
        const int64_t len = std::min<int64_t>(chunk, 37 - start);
        AttentionBatch batch({{0, len, start, 0, 10}}, table, 4, torch::kCPU);
        std::vector<int64_t> ids(tokens.begin() + start, tokens.begin() + start + len);
        std::vector<int64_t> all_rows(static_cast<size_t>(len));
        std::iota(all_rows.begin(), all_rows.end(), 0);
        rows.push_back(forward_cached(m, cache, batch, ids, all_rows, impl));
      }
      torch::Tensor got = torch::softmax(torch::cat(rows).to(torch::kDouble), -1);
      EXPECT_LT((got - ref).abs().max().item<double>(), kTol) << "chunk " << chunk;
      torch::Tensor logits_err =
          (torch::cat(rows).to(torch::kDouble).log_softmax(-1) - ref.log()).abs().max();
      EXPECT_LT(logits_err.item<double>(), kTol) << "chunk " << chunk;
    }
  }
}

// A bfloat16 cache under the float32 model (InferenceEngineOptions::cache_dtype): twice the blocks
// for the same bytes; the CPU kernel and the torch-op path agree (to 5e-3, not 1e-4: their float32
// sums differ in the last bits, and a key that lands on the other side of a bfloat16 rounding step
// moves by 2^-9), and both stay within bfloat16's rounding of the float32 recompute (this random
// model's largest difference is ~0.03; a misread cache gives differences of whole nats).
// attention_test checks the kernel over a bfloat16 cache bit for bit.
TEST(Engine, BFloat16CacheHoldsTwiceTheBlocksAndStaysCloseToFloat32) {
  model::Qwen2Model m = tiny_model();
  const std::vector<int32_t> prompt = prompt_of(30, 1);
  int64_t float_blocks = 0;
  {
    InferenceEngine engine(m, manual_config());
    float_blocks = engine.stats().total_blocks;
    EXPECT_EQ(engine.cache_dtype(), torch::kFloat);
  }
  std::vector<std::vector<batching::GeneratedToken>> runs;
  for (AttentionImpl impl : {AttentionImpl::kAuto, AttentionImpl::kTorchOps}) {
    InferenceEngineOptions config = manual_config();
    config.cache_dtype = torch::kBFloat16;
    config.attention = impl;
    config.max_batch_tokens =
        7;  // chunked prefill: later chunks read the rounded keys of earlier ones
    config.max_running = 4;
    InferenceEngine engine(m, config);
    EXPECT_EQ(engine.cache_dtype(), torch::kBFloat16);
    EXPECT_EQ(engine.stats().total_blocks, 2 * float_blocks);
    auto future = engine.generate(request("a", prompt, 12));
    drain(engine);
    GenerateResult r = future.get();
    ASSERT_FALSE(r.error);
    ASSERT_EQ(r.samples[0].tokens.size(), 12u);
    runs.push_back(r.samples[0].tokens);
  }
  std::vector<int32_t> seq = prompt;
  for (const batching::GeneratedToken& t : runs[0]) seq.push_back(t.id);
  torch::Tensor ref = reference_logprobs(m, seq);
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(runs[1][i].id, runs[0][i].id) << "token " << i;
    EXPECT_NEAR(runs[1][i].raw_logprob, runs[0][i].raw_logprob, 5e-3) << "token " << i;
    const double want =
        ref[static_cast<int64_t>(prompt.size() + i) - 1][runs[0][i].id].item<double>();
    EXPECT_NEAR(runs[0][i].raw_logprob, want, 0.1) << "token " << i;
  }
}

TEST(Engine, GreedyDecodingMatchesFullRecomputeWithChunkedPrefill) {
  model::Qwen2Model m = tiny_model();
  // Whole prompt in one step, or in chunks of at most 7; the CPU kernel, and the torch-op path that
  // other devices use.
  for (auto [budget, impl] :
       {std::pair{64, AttentionImpl::kAuto}, std::pair{7, AttentionImpl::kAuto},
        std::pair{7, AttentionImpl::kTorchOps}}) {
    InferenceEngineOptions config = manual_config();
    config.max_batch_tokens = budget;
    config.attention = impl;
    config.max_running = 4;
    InferenceEngine engine(m, config);
    const std::vector<int32_t> prompt = prompt_of(30, 1);
    auto future = engine.generate(request("a", prompt, 12));
    drain(engine);
    GenerateResult r = future.get();
    ASSERT_FALSE(r.error);
    ASSERT_EQ(r.samples[0].tokens.size(), 12u);
    EXPECT_EQ(r.samples[0].finish, batching::FinishReason::kLength);
    for (const batching::GeneratedToken& t : r.samples[0].tokens)
      EXPECT_EQ(t.logprob, 0.0f);  // greedy: a point mass
    expect_matches_reference(m, prompt, r.samples[0], /*greedy=*/true);
  }
}

TEST(Engine, BatchOfDifferentLengthsMatchesEachAlone) {
  model::Qwen2Model m = tiny_model(2);
  std::vector<batching::GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    batching::GenerateRequest r = request("r" + std::to_string(i), prompt_of(3 + 7 * i, i), 8 + i);
    if (i % 2 == 1) {  // seeded sampling on half of them
      r.temperature = 0.9;
      r.top_p = 0.95;
      r.top_k = 50;
      r.seed = 1000 + i;
    }
    requests.push_back(r);
  }
  const std::vector<GenerateResult> alone = each_alone(m, requests);
  InferenceEngine engine(m, manual_config());
  std::vector<std::future<GenerateResult>> futures;
  for (const batching::GenerateRequest& r : requests) futures.push_back(engine.generate(r));
  drain(engine);
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerateResult together = futures[i].get();
    ASSERT_FALSE(together.error);
    EXPECT_EQ(ids_of(together.samples[0]), ids_of(alone[i].samples[0])) << "request " << i;
    ASSERT_EQ(together.samples[0].tokens.size(), alone[i].samples[0].tokens.size());
    for (size_t t = 0; t < together.samples[0].tokens.size(); ++t) {
      EXPECT_NEAR(together.samples[0].tokens[t].raw_logprob,
                  alone[i].samples[0].tokens[t].raw_logprob, kTol);
      EXPECT_NEAR(together.samples[0].tokens[t].logprob, alone[i].samples[0].tokens[t].logprob,
                  kTol);
    }
    expect_matches_reference(m, requests[i].prompt, together.samples[0],
                             requests[i].temperature == 0);
  }
  EXPECT_GT(engine.stats().steps, 0);
  EXPECT_GT(engine.stats().busy_seconds, 0.0);
}

// Batch-invariant mode (model::set_batch_invariant, what ajet.deterministic turns on): a request's
// tokens and logprobs are the same bits alone, next to other requests, with its prefill cut into
// other chunks, and over a cached prefix. Without it they agree to ~1e-6 only (the test above):
// OpenBLAS's GEMV (one row) and GEMM (many) round differently.
TEST(Engine, BatchInvariantModeGivesTheSameBitsWhateverShareTheStep) {
  struct Invariant {
    Invariant() { model::set_batch_invariant(true); }
    ~Invariant() { model::set_batch_invariant(false); }
  } invariant;
  model::Qwen2Model m = tiny_model(4);
  std::vector<batching::GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) {
    batching::GenerateRequest r =
        request("r" + std::to_string(i), prompt_of(5 + 19 * i, i), 10 + i, i % 2 ? 1.0 : 0.0);
    r.seed = 500 + i;
    requests.push_back(r);
  }
  auto expect_same = [](const GenerateResult& a, const GenerateResult& b, const std::string& what) {
    ASSERT_FALSE(a.error);
    ASSERT_FALSE(b.error);
    ASSERT_EQ(ids_of(a.samples[0]), ids_of(b.samples[0])) << what;
    for (size_t t = 0; t < a.samples[0].tokens.size(); ++t) {
      EXPECT_EQ(a.samples[0].tokens[t].raw_logprob, b.samples[0].tokens[t].raw_logprob)
          << what << ", token " << t;
      EXPECT_EQ(a.samples[0].tokens[t].logprob, b.samples[0].tokens[t].logprob)
          << what << ", token " << t;
    }
  };
  const std::vector<GenerateResult> alone = each_alone(m, requests);
  for (int64_t budget : {64, 7}) {  // all at once in 64-token steps; 3 at a time, prefills in 7s
    InferenceEngineOptions options = manual_config();
    options.max_batch_tokens = budget;
    options.max_running = budget == 7 ? 3 : options.max_running;
    InferenceEngine engine(m, options);
    std::vector<std::future<GenerateResult>> futures;
    for (auto it = requests.rbegin(); it != requests.rend(); ++it)
      futures.push_back(engine.generate(*it));
    drain(engine);
    for (size_t i = 0; i < requests.size(); ++i) {
      expect_same(futures[requests.size() - 1 - i].get(), alone[i],
                  "request " + std::to_string(i) + " with a budget of " + std::to_string(budget));
    }
  }
  // Over a cached prefix: the longest prompt again after a request that shares all but its end.
  InferenceEngine engine(m, manual_config());
  batching::GenerateRequest prefix = requests.back();
  prefix.id = "prefix";
  prefix.prompt.resize(prefix.prompt.size() - 9);
  auto first = engine.generate(prefix);
  drain(engine);
  ASSERT_FALSE(first.get().error);
  const int64_t computed = engine.stats().tokens_computed;
  auto again = engine.generate(requests.back());
  drain(engine);
  expect_same(again.get(), alone.back(), "the longest request over a cached prefix");
  EXPECT_LT(engine.stats().tokens_computed - computed,
            static_cast<int64_t>(requests.back().prompt.size()))
      << "the prefix was not served from the cache";
}

TEST(Engine, SamplesSharingOnePrefillEachMatchAnIndependentRun) {
  model::Qwen2Model m = tiny_model(3);
  // 21 prompt tokens in blocks of 4: the last block is shared half-full, so each sample's first
  // token triggers copy-on-write.
  batching::GenerateRequest r = request("n4", prompt_of(21, 4), 10, 1.3);
  r.n = 4;
  r.seed = 77;
  r.top_logprobs = 3;
  InferenceEngine engine(m, manual_config());
  auto f = engine.generate(r);
  drain(engine);
  GenerateResult result = f.get();
  ASSERT_FALSE(result.error);
  ASSERT_EQ(result.samples.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (const SampleOutput& s : result.samples) {
    ASSERT_EQ(s.tokens.size(), 10u);
    expect_matches_reference(m, r.prompt, s, /*greedy=*/false);
    distinct.insert(ids_of(s));
    ASSERT_EQ(s.tokens[0].top_logprobs.size(), 3u);
    EXPECT_GE(s.tokens[0].top_logprobs[0].logprob, s.tokens[0].top_logprobs[1].logprob);
    EXPECT_GE(s.tokens[0].top_logprobs[0].logprob, s.tokens[0].raw_logprob);
  }
  EXPECT_GE(distinct.size(), 2u) << "samples with different RNG streams all came out the same";
  // The prefill ran once: 21 prompt tokens, then one decode token per sample per later step.
  EXPECT_EQ(engine.stats().tokens_computed, 21 + 4 * 9);
  EXPECT_EQ(engine.stats().free_blocks, engine.stats().total_blocks);

  // The same seed reproduces every sample, alone or next to other work.
  InferenceEngine again(m, manual_config());
  auto other = again.generate(request("other", prompt_of(9, 8), 15, 1.0));
  auto f2 = again.generate(r);
  drain(again);
  GenerateResult repeat = f2.get();
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(ids_of(repeat.samples[i]), ids_of(result.samples[i])) << "sample " << i;
  EXPECT_FALSE(other.get().error);
}

TEST(Engine, FullCacheMakesRequestsWaitAndPreemptionRecomputesCorrectly) {
  model::Qwen2Model m = tiny_model(4);
  // 8 blocks of 4 tokens: three 6-token prompts fit (2 blocks each), but growing to 16 tokens each
  // needs 12 blocks, so sequences are preempted and recomputed; a fourth request waits throughout.
  const hf::ModelConfig& c = m->config();
  const int64_t block_bytes = 2 * c.num_hidden_layers * 4 * c.num_key_value_heads * c.head_dim * 4;
  InferenceEngineOptions config = manual_config(8 * block_bytes);
  InferenceEngine engine(m, config);
  ASSERT_EQ(engine.stats().total_blocks, 8);
  std::vector<batching::GenerateRequest> requests;
  std::vector<std::future<GenerateResult>> futures;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(request("c" + std::to_string(i), prompt_of(6, 10 + i), 10));
    futures.push_back(engine.generate(requests.back()));
  }
  engine.step();
  EXPECT_EQ(engine.stats().running, 3);
  EXPECT_EQ(engine.stats().waiting, 1);
  drain(engine);
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_EQ(engine.stats().free_blocks, 8);
  for (size_t i = 0; i < futures.size(); ++i) {
    GenerateResult r = futures[i].get();
    ASSERT_FALSE(r.error) << r.error->what();
    ASSERT_EQ(r.samples[0].tokens.size(), 10u);
    expect_matches_reference(m, requests[i].prompt, r.samples[0], /*greedy=*/true);
  }
}

TEST(Engine, AbortEndsOnlyThatRequest) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  std::vector<batching::GenerateEvent> events;
  batching::GenerateRequest victim = request("victim", prompt_of(5, 1), 100);
  victim.n = 2;
  engine.submit(victim, [&](const batching::GenerateEvent& e) { events.push_back(e); });
  auto survivor = engine.generate(request("survivor", prompt_of(8, 2), 20));
  for (int i = 0; i < 4; ++i) engine.step();
  const size_t tokens_before = events.size();
  EXPECT_GT(tokens_before, 0u);
  engine.abort("victim");
  engine.abort("no-such-request");
  drain(engine);
  std::set<int64_t> aborted;
  for (size_t i = tokens_before; i < events.size(); ++i) {
    EXPECT_TRUE(events[i].tokens.empty());
    EXPECT_EQ(events[i].finish, batching::FinishReason::kAbort);
    aborted.insert(events[i].sample_index);
  }
  EXPECT_EQ(aborted, (std::set<int64_t>{0, 1}));
  EXPECT_TRUE(events.back().request_finished);
  GenerateResult s = survivor.get();
  EXPECT_EQ(s.samples[0].tokens.size(), 20u);
  EXPECT_EQ(s.samples[0].finish, batching::FinishReason::kLength);
  EXPECT_EQ(engine.stats().free_blocks, engine.stats().total_blocks);
}

TEST(Engine, InvalidRequestsGetErrorsWhileOthersComplete) {
  model::Qwen2Model m = tiny_model();
  InferenceEngineOptions config = manual_config();
  config.start_thread = true;
  config.max_model_len = 64;
  InferenceEngine engine(m, config);
  auto good = engine.generate(request("good", prompt_of(10, 1), 30));
  std::vector<std::pair<batching::GenerateRequest, std::string>> bad;
  bad.push_back({request("bad-id", {1, 2, 300}, 5), "token 2 has id 300"});
  bad.push_back({request("negative-id", {-1}, 5), "token 0 has id -1"});
  bad.push_back({request("empty", {}, 5), "at least one token"});
  bad.push_back({request("too-long", prompt_of(64, 1), 5), "context of 64"});
  bad.push_back({request("max-tokens", {1}, 0), "max_tokens"});
  bad.push_back({request("temperature", {1}, 5, -1.0), "temperature"});
  batching::GenerateRequest n0 = request("n0", {1}, 5);
  n0.n = 0;
  bad.push_back({n0, "n must be"});
  batching::GenerateRequest top_p = request("top-p", {1}, 5);
  top_p.top_p = 0;
  bad.push_back({top_p, "top_p"});
  bad.push_back({request("good", {1}, 5), "already in flight"});
  std::vector<std::future<GenerateResult>> futures;
  for (const auto& [r, why] : bad) futures.push_back(engine.generate(r));
  for (size_t i = 0; i < bad.size(); ++i) {
    GenerateResult r = futures[i].get();
    ASSERT_TRUE(r.error) << bad[i].first.id;
    EXPECT_EQ(r.error->code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(r.error->what()).find(bad[i].second), std::string::npos)
        << r.error->what();
  }
  GenerateResult g = good.get();
  ASSERT_FALSE(g.error);
  EXPECT_EQ(g.samples[0].tokens.size(), 30u);
}

TEST(Engine, StopTokenIsIncludedAndEndsTheSample) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  const std::vector<int32_t> prompt = prompt_of(7, 5);
  auto first = engine.generate(request("free", prompt, 10));
  drain(engine);
  std::vector<int32_t> free_run = ids_of(first.get().samples[0]);
  // Stop at the first occurrence of the 4th token.
  batching::GenerateRequest r = request("stop", prompt, 10);
  r.stop_token_ids = {free_run[3], 299};
  auto second = engine.generate(r);
  drain(engine);
  SampleOutput s = second.get().samples[0];
  const size_t first_hit =
      std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  EXPECT_EQ(ids_of(s), std::vector<int32_t>(free_run.begin(), free_run.begin() + first_hit + 1));
  EXPECT_EQ(s.finish, batching::FinishReason::kStop);
}

TEST(Engine, ContextLimitEndsWithLength) {
  model::Qwen2Model m = tiny_model();
  InferenceEngineOptions config = manual_config();
  config.max_model_len = 20;
  InferenceEngine engine(m, config);
  EXPECT_EQ(engine.max_model_len(), 20);
  auto f = engine.generate(request("ctx", prompt_of(15, 1), 100));
  drain(engine);
  SampleOutput s = f.get().samples[0];
  EXPECT_EQ(s.tokens.size(), 5u);  // 15 + 5 = 20 tokens
  EXPECT_EQ(s.finish, batching::FinishReason::kLength);
}

TEST(Engine, RunExclusiveBetweenStepsChangesTheReportedVersion) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  std::vector<batching::GeneratedToken> tokens;
  engine.submit(request("v", prompt_of(5, 1), 8), [&](const batching::GenerateEvent& e) {
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
  });
  for (int i = 0; i < 3; ++i) engine.step();
  ASSERT_EQ(tokens.size(), 3u);
  bool ran = false;
  std::future<void> done = engine.run_exclusive(
      [&](model::Qwen2Model& model) {
        torch::NoGradGuard no_grad;
        model->layer(0)->linear(model::Proj::kDown)->weight.mul_(0.5);
        ran = true;
      },
      /*bump_version=*/true);
  drain(engine);
  done.get();
  EXPECT_TRUE(ran);
  EXPECT_EQ(engine.policy_version(), 1);
  ASSERT_EQ(tokens.size(), 8u);
  for (size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(tokens[i].policy_version, i < 3 ? 0 : 1) << "token " << i;
  std::future<void> set = engine.set_policy_version(41);  // manual mode: done by the next step
  engine.step();
  set.get();
  EXPECT_EQ(engine.policy_version(), 41);
}

// run_drained_at_version (disaggregated weight pushes): a request in flight finishes on the
// weights it started on; one submitted while the task waits starts only after the swap, so no
// request samples from two versions.
TEST(Engine, DrainedSwapWaitsForInFlightRequestsAndHoldsNewOnes) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  std::vector<batching::GeneratedToken> first, second;
  engine.submit(request("first", prompt_of(5, 1), 8), [&](const batching::GenerateEvent& e) {
    first.insert(first.end(), e.tokens.begin(), e.tokens.end());
  });
  for (int i = 0; i < 3; ++i) engine.step();
  ASSERT_EQ(first.size(), 3u);
  bool ran = false;
  std::future<void> done = engine.run_drained_at_version(
      [&](model::Qwen2Model& model) {
        torch::NoGradGuard no_grad;
        model->layer(0)->linear(model::Proj::kDown)->weight.mul_(0.5);
        EXPECT_EQ(first.size(), 8u) << "the swap ran before the request in flight ended";
        EXPECT_TRUE(second.empty()) << "a request started before the swap";
        ran = true;
      },
      7);
  engine.submit(request("second", prompt_of(6, 2), 4), [&](const batching::GenerateEvent& e) {
    second.insert(second.end(), e.tokens.begin(), e.tokens.end());
  });
  engine.step();
  EXPECT_FALSE(ran);
  EXPECT_EQ(engine.stats().running + engine.stats().waiting, 1) << "the new request was admitted";
  drain(engine);
  done.get();
  EXPECT_TRUE(ran);
  EXPECT_EQ(engine.policy_version(), 7);
  ASSERT_EQ(first.size(), 8u);
  ASSERT_EQ(second.size(), 4u);
  for (const auto& t : first) EXPECT_EQ(t.policy_version, 0);
  for (const auto& t : second) EXPECT_EQ(t.policy_version, 7);
  // With nothing in flight it runs at the next step.
  std::future<void> idle = engine.run_drained_at_version([](model::Qwen2Model&) {}, 8);
  engine.step();
  idle.get();
  EXPECT_EQ(engine.policy_version(), 8);
}

TEST(Engine, ThreadedEngineServesConcurrentSubmittersAndSwapsWeights) {
  model::Qwen2Model m = tiny_model(5, /*tied=*/true);
  InferenceEngineOptions config = manual_config();
  config.start_thread = true;
  config.threads = 1;
  InferenceEngine engine(m, config);
  std::vector<std::future<GenerateResult>> futures;
  std::vector<std::thread> submitters;
  std::mutex mu;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        auto f = engine.generate(
            request("t" + std::to_string(t) + "-" + std::to_string(i), prompt_of(4 + i, t), 6));
        std::lock_guard lock(mu);
        futures.push_back(std::move(f));
      }
    });
  }
  for (auto& s : submitters) s.join();
  for (auto& f : futures) {
    GenerateResult r = f.get();
    ASSERT_FALSE(r.error);
    EXPECT_EQ(r.samples[0].tokens.size(), 6u);
  }
  engine.run_exclusive([](model::Qwen2Model&) {}, true).get();
  GenerateResult after = engine.generate(request("after", prompt_of(4, 0), 3)).get();
  for (const batching::GeneratedToken& t : after.samples[0].tokens) EXPECT_EQ(t.policy_version, 1);
  EngineStats s = engine.stats();
  EXPECT_EQ(s.requests_finished, 21);
  EXPECT_EQ(s.tokens_generated, 20 * 6 + 3);
  engine.stop();
  EXPECT_TRUE(engine.generate(request("late", {1}, 1)).get().error);
  EXPECT_THROW(engine.run_exclusive([](model::Qwen2Model&) {}, false).get(), Error);
}

TEST(Engine, AFailingStepFailsItsRequestsNotTheEngine) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  torch::Tensor saved;
  auto broken = engine.run_exclusive(
      [&](model::Qwen2Model& model) {
        saved = model->layer(1)->linear(model::Proj::kUp)->weight;
        model->layer(1)->linear(model::Proj::kUp)->weight =
            torch::zeros({3, 5});  // forward now throws
      },
      false);
  auto failed = engine.generate(request("fails", prompt_of(6, 1), 4));
  drain(engine);
  broken.get();
  GenerateResult r = failed.get();
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->code(), ErrorCode::kInternal);
  EXPECT_EQ(engine.stats().free_blocks, engine.stats().total_blocks);
  auto fixed = engine.run_exclusive(
      [&](model::Qwen2Model& model) { model->layer(1)->linear(model::Proj::kUp)->weight = saved; },
      false);
  auto works = engine.generate(request("works", prompt_of(6, 1), 4));
  drain(engine);
  fixed.get();
  GenerateResult w = works.get();
  ASSERT_FALSE(w.error);
  EXPECT_EQ(w.samples[0].tokens.size(), 4u);
}

TEST(Engine, StopAbortsRequestsInFlight) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  auto f = engine.generate(request("long", prompt_of(5, 1), 100));
  engine.step();
  engine.stop();
  GenerateResult r = f.get();
  EXPECT_EQ(r.samples[0].finish, batching::FinishReason::kAbort);
}

// Prefix caching: prompts that share a prefix with keys/values already computed (the same system
// prompt; an agent's next turn, which repeats the previous one) skip those blocks, and every token
// is still the full recompute's.
TEST(Engine, PrefixCachingSkipsComputedBlocksAndKeepsEveryToken) {
  model::Qwen2Model m = tiny_model();
  std::vector<int32_t> common = prompt_of(24, 4);  // 6 blocks of 4
  std::vector<int32_t> p1 = common, p2 = common;
  for (int32_t t : {11, 12, 13, 14, 15, 16}) p1.push_back(t);
  for (int32_t t : {21, 22, 23, 24, 25}) p2.push_back(t);
  InferenceEngine engine(m, manual_config());
  auto f1 = engine.generate(request("p1", p1, 6));
  drain(engine);
  const GenerateResult r1 = f1.get();
  auto f2 = engine.generate(request("p2", p2, 6));
  drain(engine);
  const GenerateResult r2 = f2.get();
  ASSERT_FALSE(r1.error);
  ASSERT_FALSE(r2.error);
  EXPECT_EQ(engine.stats().tokens_prefix_cached, 24);
  expect_matches_reference(m, p1, r1.samples[0], /*greedy=*/true);
  expect_matches_reference(m, p2, r2.samples[0], /*greedy=*/true);

  // The next turn: the first exchange (prompt and reply) and a new message. 30 + 6 tokens, of which
  // 35 were computed: 8 full blocks.
  std::vector<int32_t> turn2 = p1;
  for (int32_t id : ids_of(r1.samples[0])) turn2.push_back(id);
  for (int32_t t : {31, 32, 33}) turn2.push_back(t);
  auto f3 = engine.generate(request("turn2", turn2, 5));
  drain(engine);
  const GenerateResult r3 = f3.get();
  ASSERT_FALSE(r3.error);
  EXPECT_EQ(engine.stats().tokens_prefix_cached, 24 + 32);
  expect_matches_reference(m, turn2, r3.samples[0], /*greedy=*/true);

  // Without prefix caching the same requests give the same tokens, all computed.
  InferenceEngineOptions off = manual_config();
  off.prefix_caching = false;
  InferenceEngine plain(m, off);
  for (const auto& [id, prompt, out] :
       {std::tuple{"p1", p1, r1}, std::tuple{"p2", p2, r2}, std::tuple{"turn2", turn2, r3}}) {
    auto f =
        plain.generate(request(id, prompt, static_cast<int64_t>(out.samples[0].tokens.size())));
    drain(plain);
    EXPECT_EQ(ids_of(f.get().samples[0]), ids_of(out.samples[0])) << id;
  }
  EXPECT_EQ(plain.stats().tokens_prefix_cached, 0);
}

TEST(Engine, PrefixCachingNeverServesKeysAndValuesOfOldWeights) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  const std::vector<int32_t> prompt = prompt_of(21, 2);
  auto before = engine.generate(request("before", prompt, 4));
  drain(engine);
  ASSERT_FALSE(before.get().error);
  std::future<void> changed = engine.run_exclusive(
      [](model::Qwen2Model& model) {
        torch::NoGradGuard no_grad;
        model->layer(0)->linear(model::Proj::kV)->weight.mul_(-1.5);
      },
      /*bump_version=*/true);
  auto after = engine.generate(request("after", prompt, 8));
  drain(engine);
  changed.get();
  const GenerateResult r = after.get();
  ASSERT_FALSE(r.error);
  EXPECT_EQ(engine.stats().tokens_prefix_cached, 0);
  expect_matches_reference(m, prompt, r.samples[0], /*greedy=*/true);  // m now has the new weights
}

// prompt_logprobs: every prompt position's raw logprob and rank equal the no-cache forward's, with
// the prompt prefilled in several chunks, beside another request, and after a prefix of it was
// cached by an earlier request (which a prompt_logprobs request must not reuse).
TEST(Engine, PromptLogprobsMatchTheFullForwardAcrossChunksAndCachedPrefixes) {
  model::Qwen2Model m = tiny_model(7);
  InferenceEngineOptions config = manual_config();
  config.max_batch_tokens = 16;  // a 40-token prompt takes three steps
  InferenceEngine engine(m, config);
  const std::vector<int32_t> prompt = prompt_of(40, 3);
  // The same prompt first without logprobs: its blocks are cached for the next one.
  std::future<GenerateResult> warm = engine.generate(request("warm", prompt, 2));
  drain(engine);
  ASSERT_FALSE(warm.get().error);
  batching::GenerateRequest r = request("scored", prompt, 3);
  r.prompt_logprobs = 4;
  std::future<GenerateResult> scored = engine.generate(r);
  std::future<GenerateResult> other = engine.generate(request("other", prompt_of(9, 5), 4));
  drain(engine);
  GenerateResult out = scored.get();
  ASSERT_FALSE(out.error) << out.error->what();
  ASSERT_FALSE(other.get().error);
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size() - 1);
  const torch::Tensor ref = reference_logprobs(m, prompt);  // (T, V)
  for (size_t p = 1; p < prompt.size(); ++p) {
    const batching::PromptLogprob& e = out.prompt_logprobs[p - 1];
    const torch::Tensor row = ref[int64_t(p) - 1];
    EXPECT_EQ(e.id, prompt[p]);
    EXPECT_NEAR(e.logprob, row[prompt[p]].item<double>(), 1e-4) << "position " << p;
    // The rank counts larger logits: ids within rounding of the token's own may go either way.
    const double own = row[prompt[p]].item<double>();
    EXPECT_GE(e.rank, 1 + (row > own + 1e-4).sum().item<int64_t>()) << "position " << p;
    EXPECT_LE(e.rank, 1 + (row > own - 1e-4).sum().item<int64_t>()) << "position " << p;
    ASSERT_EQ(e.top_logprobs.size(), 4u);
    const auto best = std::get<1>(row.topk(4));
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(e.top_logprobs[size_t(j)].id, best[j].item<int64_t>());
      EXPECT_NEAR(e.top_logprobs[size_t(j)].logprob, row[best[j]].item<double>(), 1e-4);
    }
  }
  EXPECT_EQ(out.samples[0].tokens.size(), 3u);

  // A prompt prefilled alone in one chunk: its rows are every row of the step, the sampling row
  // first, so they are not in position order.
  const std::vector<int32_t> alone = prompt_of(9, 4);
  batching::GenerateRequest a = request("alone", alone, 1);
  a.prompt_logprobs = 0;
  std::future<GenerateResult> single = engine.generate(a);
  drain(engine);
  GenerateResult one = single.get();
  ASSERT_FALSE(one.error) << one.error->what();
  ASSERT_EQ(one.prompt_logprobs.size(), alone.size() - 1);
  const torch::Tensor ref_alone = reference_logprobs(m, alone);
  for (size_t p = 1; p < alone.size(); ++p) {
    EXPECT_NEAR(one.prompt_logprobs[p - 1].logprob,
                ref_alone[int64_t(p) - 1][alone[p]].item<double>(), 1e-4)
        << "position " << p;
  }
}

TEST(Engine, PromptLogprobsOutOfRangeIsRefused) {
  model::Qwen2Model m = tiny_model();
  InferenceEngine engine(m, manual_config());
  batching::GenerateRequest r = request("bad", prompt_of(5, 1), 2);
  r.prompt_logprobs = 21;
  std::future<GenerateResult> f = engine.generate(r);
  drain(engine);
  GenerateResult out = f.get();
  ASSERT_TRUE(out.error);
  EXPECT_NE(std::string(out.error->what()).find("prompt_logprobs"), std::string::npos);
}

// A model made to loop (a zero final norm: every logit 0, so greedy decoding repeats id 0) is
// stopped by the repetition detector as soon as the loop spans repeat_tokens tokens, with the
// finish reason that says so.
TEST(Engine, MadnessDetectorStopsALoopingModelWithinItsWindow) {
  model::Qwen2Model m = tiny_model(9);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : m->named_parameters()) {
      if (item.key() == "model.norm.weight") item.value().fill_(0.0);
    }
  }
  InferenceEngineOptions config = manual_config();
  config.madness.repeat_tokens = 6;
  config.madness.max_period = 4;
  InferenceEngine engine(m, config);
  std::future<GenerateResult> f = engine.generate(request("loop", prompt_of(5, 2), 40));
  drain(engine);
  GenerateResult out = f.get();
  ASSERT_FALSE(out.error) << out.error->what();
  ASSERT_TRUE(out.samples[0].finish.has_value());
  EXPECT_EQ(*out.samples[0].finish, batching::FinishReason::kRepetition);
  EXPECT_EQ(out.samples[0].tokens.size(), 6u);
  EXPECT_EQ(engine.stats().madness_stops, 1);
}

}  // namespace
}  // namespace ajet::infer
