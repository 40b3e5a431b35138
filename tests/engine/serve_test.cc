// `ajet-engine serve` end to end: the real engine process on a Unix socket, the real model made by
// `ajet-engine model init`, the C++ rpc::Client. Streaming with logprobs, multiplexing, per-request
// errors, abort, client disconnect, status, SIGTERM, and clear start-up errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine_process.h"
#include "hf/hf_config.h"
#include "model/presets.h"

namespace ajet::engine {
namespace {

using namespace testing;

std::vector<std::string> with_version() {
  return {"--policy-version", std::to_string(kPolicyVersion)};
}

// Validity every generated token must have; `version` is what the engine was started with.
void expect_valid_tokens(const GenerateOutcome& o, int sample = 0) {
  for (const auto& e : o.events) {
    if (e.sample != sample) continue;
    for (size_t t = 0; t < e.token_ids.size(); ++t) {
      EXPECT_GE(e.token_ids[t], 0);
      EXPECT_LT(e.token_ids[t], kVocab);
      EXPECT_LE(e.logprobs[t], 0.0f);
      EXPECT_LE(e.raw_logprobs[t], 0.0f);
      EXPECT_TRUE(std::isfinite(e.logprobs[t]));
      EXPECT_EQ(e.policy_versions[t], kPolicyVersion);
    }
  }
}

TEST(EngineServe, StreamsTokensWithLogprobs) {
  EngineProcess engine(with_version());
  rpc::Client client(engine.wait_ready());
  client.connect();

  rpc::GenerateRequest r;
  r.prompt = prompt_of(12, 1);
  r.max_tokens = 10;
  r.temperature = 1.0;
  r.seed = 5;
  r.top_logprobs = 3;
  const GenerateOutcome o = generate(client, r);
  ASSERT_FALSE(o.error) << o.error->what();
  ASSERT_TRUE(o.done);
  // Streamed: the tokens came in more than one frame, in order, the last one with the finish
  // reason.
  EXPECT_GE(o.events.size(), 2u);
  ASSERT_EQ(o.ids().size(), 10u);
  expect_valid_tokens(o);
  EXPECT_EQ(o.finish(), rpc::FinishReason::kLength);
  EXPECT_TRUE(o.events.back().finish_reason.has_value());
  EXPECT_EQ(o.events.back().completion_tokens, 10);
  EXPECT_EQ(o.events.back().prompt_tokens, 12);
  EXPECT_EQ(o.done->prompt_tokens, 12);
  EXPECT_EQ(o.done->completion_tokens, 10);
  // Temperature 1 without top-k / top-p samples from the raw model: both logprobs agree.
  const auto lp = o.logprobs(), raw = o.logprobs(0, true);
  for (size_t t = 0; t < lp.size(); ++t) EXPECT_NEAR(lp[t], raw[t], 1e-5) << "token " << t;
  // Top alternatives: 3 per token, best first, the best at least as likely as the sampled token.
  for (const auto& e : o.events) {
    ASSERT_EQ(e.top_k, 3);
    ASSERT_EQ(e.top_ids.size(), 3 * e.token_ids.size());
    for (size_t t = 0; t < e.token_ids.size(); ++t) {
      EXPECT_GE(e.top_logprobs[3 * t], e.top_logprobs[3 * t + 1]);
      EXPECT_GE(e.top_logprobs[3 * t + 1], e.top_logprobs[3 * t + 2]);
      EXPECT_GE(e.top_logprobs[3 * t] + 1e-5, e.raw_logprobs[t]);
    }
  }
  // The same seed gives the same tokens; top-k sampling changes the sampling distribution, so its
  // logprob is at least the raw one (renormalised over fewer tokens).
  EXPECT_EQ(generate(client, r).ids(), o.ids());
  r.top_k = 5;
  const GenerateOutcome k = generate(client, r);
  ASSERT_TRUE(k.done);
  const auto klp = k.logprobs(), kraw = k.logprobs(0, true);
  for (size_t t = 0; t < klp.size(); ++t) EXPECT_GE(klp[t] + 1e-5, kraw[t]);

  // n samples share one prefill; each ends with its own finish event.
  rpc::GenerateRequest n3 = r;
  n3.n = 3;
  n3.top_k = 0;
  n3.max_tokens = 4;
  const GenerateOutcome s = generate(client, n3);
  ASSERT_TRUE(s.done);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.ids(i).size(), 4u) << i;
    EXPECT_EQ(s.finish(i), rpc::FinishReason::kLength) << i;
    expect_valid_tokens(s, i);
  }
  EXPECT_EQ(s.done->completion_tokens, 12);
}

// Ids must match the solo run; at a position where they differ, the two candidates must be a near
// tie in the solo run (batching changes float summation order, never a clear choice).
void expect_same_greedy(const GenerateOutcome& batched, const GenerateOutcome& solo,
                        const std::string& what) {
  const auto a = batched.ids(), b = solo.ids();
  ASSERT_EQ(a.size(), b.size()) << what;
  const size_t diff = std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
  if (diff == a.size()) return;
  std::vector<float> top;
  size_t t = 0;
  for (const auto& e : solo.events) {
    for (size_t i = 0; i < e.token_ids.size(); ++i, ++t) {
      if (t == diff) top = {e.top_logprobs[i * e.top_k], e.top_logprobs[i * e.top_k + 1]};
    }
  }
  ASSERT_EQ(top.size(), 2u) << what;
  EXPECT_LT(top[0] - top[1], 1e-3)
      << what << ": greedy ids differ at token " << diff << " without a near tie";
}

TEST(EngineServe, ManyConcurrentRequestsAreMultiplexed) {
  EngineProcess engine(with_version());
  const std::string address = engine.wait_ready();
  rpc::Client client(address), other(address);
  client.connect();
  other.connect();

  constexpr int kRequests = 12;
  std::vector<rpc::GenerateRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    rpc::GenerateRequest r = greedy(prompt_of(4 + 3 * i, i), 6 + i % 4);
    r.top_logprobs = 2;
    requests.push_back(r);
  }
  // All in flight at once, on two connections.
  std::vector<PendingGenerate> pending;
  for (int i = 0; i < kRequests; ++i)
    pending.push_back(start_generate(i % 3 == 0 ? other : client, requests[i]));
  std::vector<GenerateOutcome> batched;
  for (auto& p : pending) batched.push_back(p.outcome.get());
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(batched[i].done) << i << ": " << (batched[i].error ? batched[i].error->what() : "");
    EXPECT_EQ(batched[i].ids().size(), static_cast<size_t>(requests[i].max_tokens)) << i;
    expect_valid_tokens(batched[i]);
  }
  // Each equals the same request run alone.
  for (int i = 0; i < kRequests; ++i)
    expect_same_greedy(batched[i], generate(client, requests[i]), "request " + std::to_string(i));
}

TEST(EngineServe, BadRequestsGetErrorsWhileOthersComplete) {
  EngineProcess engine({"--max-model-len", "64"});
  rpc::Client client(engine.wait_ready());
  client.connect();

  PendingGenerate good = start_generate(client, greedy(prompt_of(8, 2), 24));
  struct Case {
    rpc::GenerateRequest request;
    ErrorCode code;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({greedy({1, 2, static_cast<int32_t>(kVocab) + 5}, 4), ErrorCode::kInvalidArgument,
                   "outside the vocabulary"});
  cases.push_back(
      {greedy(prompt_of(64, 3), 4), ErrorCode::kInvalidArgument, "context of 64 tokens"});
  rpc::GenerateRequest cold = greedy(prompt_of(4, 4), 4);
  cold.temperature = -0.5;
  cases.push_back({cold, ErrorCode::kInvalidArgument, "temperature"});
  rpc::GenerateRequest top_p = greedy(prompt_of(4, 4), 4);
  top_p.top_p = 0.0;
  cases.push_back({top_p, ErrorCode::kInvalidArgument, "top_p"});
  rpc::GenerateRequest many = greedy(prompt_of(4, 4), 4);
  many.n = 200;  // beyond the wire format's limit (64, the engine's default max_running and the
                 // front's n)
  cases.push_back({many, ErrorCode::kInvalidArgument, "'n' must be in [1, 64]"});
  rpc::GenerateRequest negative = greedy({5, -1}, 4);
  cases.push_back({negative, ErrorCode::kInvalidArgument, "prompt[1]"});

  std::vector<PendingGenerate> bad;
  for (const Case& c : cases) bad.push_back(start_generate(client, c.request));
  for (size_t i = 0; i < cases.size(); ++i) {
    const GenerateOutcome o = bad[i].outcome.get();
    ASSERT_TRUE(o.error) << "case " << i << " was not rejected";
    EXPECT_TRUE(o.events.empty()) << i;
    EXPECT_EQ(o.error->code(), cases[i].code) << i << ": " << o.error->what();
    EXPECT_NE(std::string(o.error->what()).find(cases[i].message), std::string::npos)
        << i << ": " << o.error->what();
  }
  // An unknown method is an error for that request only.
  rpc::Frame unknown;
  unknown.method = "no_such_method";
  try {
    client.call(unknown, std::chrono::seconds(60));
    ADD_FAILURE() << "unknown method accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("generate"), std::string::npos)
        << e.what();  // lists the methods
  }
  const GenerateOutcome o = good.outcome.get();
  ASSERT_TRUE(o.done) << (o.error ? o.error->what() : "");
  EXPECT_EQ(o.ids().size(), 24u);
  // The engine keeps serving.
  EXPECT_TRUE(generate(client, greedy(prompt_of(4, 9), 3)).done);
  const auto status = status_of(client);
  // The ones the wire decoder rejected: temperature, top_p and the negative id (the vocabulary, the
  // context and n are the engine's checks).
  EXPECT_GE(status["rpc"]["request_errors"].get<int64_t>(), 3);
}

TEST(EngineServe, AbortEndsAStreamWithAbort) {
  EngineProcess engine;
  rpc::Client client(engine.wait_ready());
  client.connect();
  // Long enough (seconds of decoding) that it is still running when the abort arrives.
  rpc::GenerateRequest r = greedy(prompt_of(4, 5), 2000);
  r.n = 2;
  r.temperature = 1.0;
  PendingGenerate p = start_generate(client, r);
  p.first_reply.wait();
  EXPECT_TRUE(client.abort(p.id));
  const GenerateOutcome o = p.outcome.get();
  ASSERT_TRUE(o.done) << (o.error ? o.error->what() : "");
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(o.finish(s), rpc::FinishReason::kAbort) << s;
    EXPECT_LT(o.ids(s).size(), 2000u) << s;
  }
  EXPECT_LT(o.done->completion_tokens, 4000);
  // Aborting a finished request is a no-op; the connection still works.
  EXPECT_FALSE(client.abort(p.id));
  EXPECT_TRUE(generate(client, greedy(prompt_of(4, 6), 2)).done);
  const auto status = status_of(client);
  EXPECT_EQ(status["engine"]["running"], 0);
  EXPECT_EQ(status["rpc"]["aborts"], 1);
}

TEST(EngineServe, StatusDescribesModelEngineAndCompute) {
  EngineProcess engine(with_version());
  const std::string address = engine.wait_ready();
  EXPECT_EQ(address, "unix:" + engine.socket_path().string());
  rpc::Client client(address);
  client.connect();
  const auto before = status_of(client);
  EXPECT_EQ(before["policy_version"], kPolicyVersion);
  const auto& m = before["model"];
  EXPECT_EQ(m["path"], fs::absolute(tiny_model_dir()).lexically_normal().string());
  const hf::ModelConfig config = hf::load_model_config(tiny_model_dir() / "config.json");
  EXPECT_EQ(m["parameters"], model::count_parameters(config));
  EXPECT_EQ(m["dtype"], "float32");
  EXPECT_EQ(m["config"]["vocab_size"], kVocab);
  EXPECT_EQ(m["config"]["hidden_size"], config.hidden_size);
  const auto& e = before["engine"];
  EXPECT_GT(e["total_blocks"].get<int64_t>(), 0);
  EXPECT_EQ(e["free_blocks"], e["total_blocks"]);
  EXPECT_EQ(e["running"], 0);
  EXPECT_EQ(e["waiting"], 0);
  EXPECT_EQ(e["max_model_len"], config.max_position_embeddings);
  EXPECT_EQ(e["kv_cache_bytes"], 32 << 20);
  EXPECT_EQ(e["kv_cache_dtype"], "float32");
  EXPECT_EQ(e["busy_s"].get<double>(), 0.0);  // no batch has run
  EXPECT_EQ(before["compute"]["threads"], 1);
  EXPECT_EQ(before["compute"]["device"], "cpu");
  EXPECT_NE(before["compute"]["backend"].get<std::string>().find("BLAS"), std::string::npos)
      << before.dump();
  EXPECT_EQ(before["rpc"]["address"], address);
  EXPECT_GE(before["uptime_s"].get<double>(), 0.0);
  EXPECT_GT(before["pid"].get<int64_t>(), 0);

  ASSERT_TRUE(generate(client, greedy(prompt_of(6, 1), 9)).done);
  const auto after = status_of(client);
  EXPECT_EQ(
      after["engine"]["tokens_generated"].get<int64_t>() - e["tokens_generated"].get<int64_t>(), 9);
  EXPECT_EQ(
      after["engine"]["requests_finished"].get<int64_t>() - e["requests_finished"].get<int64_t>(),
      1);
  EXPECT_EQ(after["rpc"]["generate_requests"], 1);
  EXPECT_GE(after["uptime_s"].get<double>(), before["uptime_s"].get<double>());
  // Nine steps ran: busy for some time, and never longer than the engine has been up.
  EXPECT_GT(after["engine"]["busy_s"].get<double>(), 0.0);
  EXPECT_LE(after["engine"]["busy_s"].get<double>(), after["uptime_s"].get<double>());
  // The start-up log names the BLAS and the thread count.
  EXPECT_NE(engine.stderr_text().find("1 intra-op threads"), std::string::npos)
      << engine.stderr_text();
}

TEST(EngineServe, ClientDisconnectAbortsItsRequests) {
  EngineProcess engine;
  const std::string address = engine.wait_ready();
  rpc::Client watcher(address);
  watcher.connect();
  const int64_t finished_before = status_of(watcher)["engine"]["requests_finished"];
  {
    rpc::Client leaver(address);
    leaver.connect();
    PendingGenerate a = start_generate(leaver, greedy(prompt_of(4, 7), 2000));
    PendingGenerate b = start_generate(leaver, greedy(prompt_of(5, 8), 2000));
    a.first_reply.wait();
    b.first_reply.wait();
    leaver.close();
    // The client side fails its own requests at once.
    EXPECT_EQ(a.outcome.get().error->code(), ErrorCode::kUnavailable);
    EXPECT_EQ(b.outcome.get().error->code(), ErrorCode::kUnavailable);
  }
  // The engine drops both: wait (bounded) for the status to say so.
  nlohmann::json status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  do {
    status = status_of(watcher);
  } while (status["engine"]["requests_finished"].get<int64_t>() < finished_before + 2 &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(status["engine"]["requests_finished"].get<int64_t>(), finished_before + 2)
      << status.dump();
  EXPECT_EQ(status["engine"]["running"], 0);
  EXPECT_EQ(status["engine"]["free_blocks"], status["engine"]["total_blocks"]);
  EXPECT_LT(status["engine"]["tokens_generated"].get<int64_t>(),
            4000);  // aborted, not run to the end
  EXPECT_GE(status["rpc"]["disconnects"].get<int64_t>(), 1);
}

TEST(EngineServe, SigtermStopsGracefully) {
  EngineProcess engine;
  rpc::Client client(engine.wait_ready());
  client.connect();
  PendingGenerate p = start_generate(client, greedy(prompt_of(4, 9), 2000));
  p.first_reply.wait();
  engine.signal(SIGTERM);
  // The in-flight request ends with `abort` and its final frame before the connection closes.
  const GenerateOutcome o = p.outcome.get();
  ASSERT_TRUE(o.done) << (o.error ? o.error->what() : "");
  EXPECT_EQ(o.finish(), rpc::FinishReason::kAbort);
  EXPECT_EQ(engine.wait_exit(), 0) << engine.stderr_text();
  EXPECT_NE(engine.stdout_text().find("ajet-engine: stopped"), std::string::npos)
      << engine.stdout_text();
  EXPECT_FALSE(fs::exists(engine.socket_path()));
  EXPECT_NE(engine.stderr_text().find("SIGTERM received"), std::string::npos)
      << engine.stderr_text();
}

TEST(EngineServe, SigintStopsAnIdleEngine) {
  EngineProcess engine;
  engine.wait_ready();
  engine.signal(SIGINT);
  EXPECT_EQ(engine.wait_exit(), 0) << engine.stderr_text();
  EXPECT_FALSE(fs::exists(engine.socket_path()));
}

TEST(EngineServe, ConfigFileSetsEngineSettingsAndFlagsWin) {
  const fs::path conf = process_dir() / "engine.yaml";
  model::testing::write_text(conf,
                             "ajet:\n"
                             "  engine:\n"
                             "    threads: 1\n"
                             "    kv_cache_memory_mb: 8\n"
                             "    kv_cache_dtype: bfloat16\n"
                             "  data:\n"  // the config requires prompt + response <= max_model_len
                             "    max_prompt_length: 40\n"
                             "    max_response_length: 50\n"
                             "  rollout:\n"
                             "    max_model_len: 100\n"
                             "    max_num_seqs: 5\n"
                             "    max_response_length_in_one_turn: 50\n");
  {
    EngineProcess engine({"--conf", conf.string()});
    rpc::Client client(engine.wait_ready());
    client.connect();
    const auto status = status_of(client);
    EXPECT_EQ(status["engine"]["max_model_len"], 100);
    EXPECT_EQ(status["engine"]["max_running"], 5);
    EXPECT_EQ(status["engine"]["kv_cache_bytes"], 32 << 20);  // the helper's --kv-cache-mb 32 wins
    EXPECT_EQ(status["engine"]["kv_cache_dtype"], "bfloat16");
    EXPECT_EQ(status["model"]["dtype"], "float32");
  }
  EngineProcess engine(
      {"--conf", conf.string(), "--max-model-len", "90", "--kv-cache-dtype", "auto"});
  rpc::Client client(engine.wait_ready());
  client.connect();
  const auto status = status_of(client);
  EXPECT_EQ(status["engine"]["max_model_len"], 90);
  EXPECT_EQ(status["engine"]["kv_cache_dtype"], "float32");  // auto: the model's
}

// A token file of `mode` in the test's directory.
fs::path token_file(const std::string& name, const std::string& token, mode_t mode) {
  const fs::path path = process_dir() / name;
  model::testing::write_text(path, token + "\n");
  fs::permissions(path, static_cast<fs::perms>(mode), fs::perm_options::replace);
  return path;
}

TEST(EngineServe, TcpNeedsAPrivateTokenFile) {
  const std::string model = " --model " + quote(tiny_model_dir());
  const fs::path open_file = token_file("open.token", "abcdefgh", 0644);
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {model + " --listen tcp:127.0.0.1:0", "head -c 32 /dev/urandom | base64 > engine.token"},
      {model + " --listen tcp:0.0.0.0:0 --insecure-no-token", "only accepted on a loopback"},
      {model + " --listen tcp:127.0.0.1:0 --token-file " + quote(open_file), "has mode 0644"},
      {model + " --listen unix:" + quote(process_dir() / "t.sock") + " --token-file " +
           quote(open_file),
       "chmod 600"},
  };
  for (const Case& c : cases) {
    // env -u: a token in the environment running the tests must not make the first case pass.
    auto r = run_command("env -u AJET_ENGINE_TOKEN " + kEngineBinary + " serve" + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("ready on"), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(EngineServe, TcpWithATokenGeneratesForTheRightToken) {
  const std::string token = "tcp-test-token-0123456789abcdef";
  const fs::path file = token_file("engine.token", token, 0600);
  std::vector<std::string> args = with_version();
  args.insert(args.end(), {"--token-file", file.string()});
  EngineProcess engine(args, tiny_model_dir(), "tcp:127.0.0.1:0");
  const std::string address = engine.wait_ready();
  ASSERT_EQ(address.rfind("tcp:127.0.0.1:", 0), 0u) << address;

  rpc::ClientOptions options;
  options.token = token;
  rpc::Client client(address, options);
  client.connect();
  rpc::GenerateRequest r;
  r.prompt = prompt_of(8, 2);
  r.max_tokens = 5;
  r.temperature = 0;
  const GenerateOutcome o = generate(client, r);
  ASSERT_FALSE(o.error) << o.error->what();
  EXPECT_EQ(o.ids().size(), 5u);
  expect_valid_tokens(o);

  // Without the token a request is refused, not run; with a wrong one the connection is.
  rpc::Client anonymous(address);
  anonymous.connect();
  {
    const GenerateOutcome refused = generate(anonymous, r);
    ASSERT_TRUE(refused.error.has_value());
    EXPECT_EQ(refused.error->code(), ErrorCode::kUnauthenticated) << refused.error->what();
    EXPECT_TRUE(refused.events.empty());
  }
  options.token = "wrong-token";
  rpc::Client wrong(address, options);
  try {
    wrong.connect();
    FAIL() << "connected with a wrong token";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated) << e.what();
    EXPECT_NE(std::string(e.what()).find("wrong engine token"), std::string::npos) << e.what();
  }
  EXPECT_EQ(generate(client, r).ids(), o.ids());  // the good connection is untouched
  engine.signal(SIGTERM);
  EXPECT_EQ(engine.wait_exit(), 0);
  EXPECT_EQ(engine.stderr_text().find(token), std::string::npos);  // never logged
}

TEST(EngineServe, BadArgumentsFailWithClearMessages) {
  const fs::path dir = process_dir() / "bad_args";
  fs::create_directories(dir / "empty");
  model::testing::write_text(dir / "bad.yaml", "ajet:\n  engine:\n    threads: many\n");
  model::testing::write_text(dir / "cuda.yaml", "ajet:\n  engine:\n    device: cuda:0\n");
  const std::string sock = " --listen unix:" + (dir / "s.sock").string();
  const std::string model = " --model " + quote(tiny_model_dir());
  struct Case {
    std::string args;
    std::string message;
    int exit_code;
  };
  std::vector<Case> cases = {
      {"--model " + quote(dir / "missing") + sock, "not a directory", 1},
      {"--model " + quote(dir / "empty") + sock, "no config.json", 1},
      {sock, "--model is required", 2},
      {model + " --listen foo:bar", "foo:bar", 2},
      {model + sock + " --conf " + quote(dir / "bad.yaml"), "ajet.engine.threads", 2},
      {model + sock + " --conf " + quote(dir / "nope.yaml"), "no such file", 1},
      {model + sock + " --dtype int4", "unknown dtype", 2},
      {model + sock + " --kv-cache-mb 0", "--kv-cache-mb must be >= 1", 2},
      {model + sock + " --kv-cache-dtype int8",
       "--kv-cache-dtype must be one of auto, float32, bfloat16, float16, got 'int8'", 2},
      {model + sock + " --device tpu", "--device", 2},
      {model, "--listen", 2},
  };
  if (!torch_has_cuda()) cases.push_back({model + sock + " --device cuda", "no usable CUDA", 2});
#ifndef AJET_TORCH_CUDA
  // A CPU-only build names the key, the value and what the build lacks (docs/engine.md, "GPU").
  cases.push_back({model + sock + " --conf " + quote(dir / "cuda.yaml"),
                   "ajet.engine.device) 'cuda:0': no usable CUDA: this engine is built against a "
                   "CPU-only libtorch",
                   2});
#endif
  for (const Case& c : cases) {
    auto r = run_command(kEngineBinary + " serve " + c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("ready on"), std::string::npos) << c.args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace ajet::engine
