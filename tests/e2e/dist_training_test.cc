// Data parallelism through the real binaries: `ajet-swarm start --engine-ranks 2` starts two
// `ajet-engine serve` ranks (one c10d Gloo group on loopback), splits the batch with split_batch
// and trains part r on rank r. With mini_batch_num 1 the weights after the step must equal those of
// a one-rank front on the same episodes (greedy rollouts, so both fronts record the same tokens),
// up to float summation order; rank 0 then serves the new policy version. Also: a rank that dies
// takes the group down and the front restarts every rank; the engine's dist flags and rendezvous
// failures give clear errors naming the flag, the rank and the address.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "e2e_util.h"
#include "hf/checkpoint.h"

namespace ajet::e2e {
namespace {

using ::testing::HasSubstr;

struct RunResult {
  fs::path checkpoint;  // global_step_1 (written by save_freq 1): model/ and optimizer.safetensors
  std::string logs;     // verbose logs after the step
  std::string next_fingerprint;
};

// One front with `ranks` engine ranks; four greedy episodes (2 tasks x 2 repeats, rewards 1 and 0
// in each task) fill one batch, which trains one step.
RunResult train_one_step(const fs::path& model, const fs::path& dir, int ranks) {
  RunResult out;
  std::vector<std::string> extra;
  if (ranks > 1) extra = {"--engine-ranks", std::to_string(ranks)};
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", {}, "", extra});
  Api api(swarm.url());
  std::string yaml = config_yaml(model,
                                 "  trainer_common:\n    save_freq: 1\n    mini_batch_num: 1\n"
                                 "    checkpoint_base_dir: " +
                                     (dir / "ckpt").string() + "\n    optim:\n      lr: 0.001\n");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  yaml.replace(yaml.find("temperature: 1.0"), std::string("temperature: 1.0").size(),
               "temperature: 0.0");
  api.boot(yaml);
  if (::testing::Test::HasFatalFailure()) return out;
  const std::vector<std::pair<std::string, double>> episodes = {
      {"task-a", 1.0}, {"task-a", 0.0}, {"task-b", 0.0}, {"task-b", 1.0}};
  // Greedy decoding repeats itself: each episode gets its own prompt, or the two episodes of a task
  // would be the same sample with opposite advantages and their gradients would cancel.
  const std::vector<std::string> prompts = {"Say something about the sea", "Count the stars",
                                            "Name a colour", "Tell me a story"};
  for (size_t i = 0; i < episodes.size(); ++i) {
    const auto& [task, reward] = episodes[i];
    Json e = api.claim("client-d");
    EXPECT_EQ(e["success"], true) << e.dump();
    auto r = api.chat(e["openai_api_key"], user_chat(prompts[i], {{"max_tokens", 6}}));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(api.end("client-d", e["episode_uuid"], task, reward).status, 200);
  }
  EXPECT_TRUE(eventually([&] { return api.status()["global_step"] == 1; }, 300s))
      << api.status().dump() << "\n"
      << api.get("/get_verbose_logs").body;
  EXPECT_TRUE(eventually([&] { return api.engine_status() == "ENGINE.ROLLING"; }))
      << api.status().dump();
  // The step's log line is written just after global_step advances.
  EXPECT_TRUE(eventually([&] {
    out.logs = api.get("/get_verbose_logs").body;
    return out.logs.find("step 0 done: policy_version 1") != std::string::npos;
  })) << out.logs;
  out.checkpoint = dir / "ckpt" / "global_step_1";
  Json next = api.claim("client-d");
  auto r = api.chat(next["openai_api_key"], user_chat("And now?", {{"max_tokens", 4}}));
  EXPECT_EQ(r.status, 200) << r.body;
  out.next_fingerprint = r.json().value("system_fingerprint", "");
  return out;
}

std::vector<float> floats(const hf::TensorView& t) {
  EXPECT_EQ(t.dtype, hf::DType::kF32) << t.name;
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

// Largest |a - b| over the tensors both checkpoints hold (`same_names`: they must hold the same
// ones).
double max_abs_difference(const fs::path& a_dir, const fs::path& b_dir, bool same_names) {
  hf::SafetensorsCheckpoint a = hf::SafetensorsCheckpoint::open(a_dir);
  hf::SafetensorsCheckpoint b = hf::SafetensorsCheckpoint::open(b_dir);
  if (same_names) {
    EXPECT_EQ(a.names(), b.names());
  }
  double worst = 0;
  for (const std::string& name : a.names()) {
    auto tb = b.find(name);
    if (!tb) continue;
    hf::TensorView ta = a.get(name);
    EXPECT_EQ(ta.shape, tb->shape) << name;
    std::vector<float> va = floats(ta), vb = floats(*tb);
    if (va.size() != vb.size()) continue;
    for (size_t i = 0; i < va.size(); ++i)
      worst = std::max(worst, std::abs(double(va[i]) - double(vb[i])));
  }
  return worst;
}

// Per tensor of two optimizer states: max |a - b| / max |a| (0 when the tensor is all zero), the
// worst over tensors; `largest` gets the largest |a| seen (so a test can tell the state is not
// empty).
double worst_relative_difference(const fs::path& a_file, const fs::path& b_file, double& largest) {
  hf::SafetensorsCheckpoint a = hf::SafetensorsCheckpoint::open(a_file);
  hf::SafetensorsCheckpoint b = hf::SafetensorsCheckpoint::open(b_file);
  EXPECT_EQ(a.names(), b.names());
  double worst = 0;
  largest = 0;
  for (const std::string& name : a.names()) {
    if (name.find(".exp_avg") == std::string::npos || name.find("exp_avg_sq") != std::string::npos)
      continue;
    auto tb = b.find(name);
    if (!tb) continue;
    std::vector<float> va = floats(a.get(name)), vb = floats(*tb);
    if (va.size() != vb.size()) continue;
    double scale = 0, diff = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      scale = std::max(scale, std::abs(double(va[i])));
      diff = std::max(diff, std::abs(double(va[i]) - double(vb[i])));
    }
    largest = std::max(largest, scale);
    if (scale > 0) worst = std::max(worst, diff / scale);
  }
  return worst;
}

TEST(DistTrainingTest, TwoEngineRanksThroughTheFrontTrainTheSameWeightsAsOneRank) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  const RunResult one = train_one_step(model, dir / "one", 1);
  ASSERT_FALSE(HasFailure()) << one.logs;
  const RunResult two = train_one_step(model, dir / "two", 2);
  ASSERT_FALSE(HasFailure()) << two.logs;

  EXPECT_THAT(one.logs, HasSubstr("training on the engine"));
  EXPECT_THAT(two.logs, HasSubstr("training on 2 data-parallel ranks"));
  EXPECT_THAT(two.logs, HasSubstr("step 0 done: policy_version 1"));
  // Rank 0's inference resumed on the trained weights.
  EXPECT_EQ(one.next_fingerprint, "ajet-policy-1");
  EXPECT_EQ(two.next_fingerprint, "ajet-policy-1");
  ASSERT_TRUE(fs::exists(one.checkpoint / "optimizer.safetensors")) << one.logs;
  ASSERT_TRUE(fs::exists(two.checkpoint / "optimizer.safetensors")) << two.logs;

  // The gradient itself: after one AdamW step exp_avg = (1 - beta1) * grad, so equal first moments
  // mean the ranks' summed gradient (scale and normalisers included) is one rank's gradient.
  // Float32 summation order differs (~1e-6 of the tensor's largest entry); 1e-4 leaves room, and a
  // missing all-reduce or normaliser would be off by O(1).
  double largest = 0;
  const double moments = worst_relative_difference(
      one.checkpoint / "optimizer.safetensors", two.checkpoint / "optimizer.safetensors", largest);
  EXPECT_GT(largest, 0.0) << "the step had no gradient: the test cannot tell anything";
  EXPECT_LE(moments, 1e-4);

  // The weights. The step moved them (AdamW's first step is ~lr = 1e-3 per trained parameter) ...
  EXPECT_GT(max_abs_difference(model, one.checkpoint / "model", false), 5e-4);
  // ... and two ranks moved them as one rank did. AdamW's first update is lr * g / (|g| + 1e-8),
  // which magnifies the summation-order noise of gradients near 1e-8 (measured: up to ~7e-6), so
  // the bound is 5% of one step (5e-5); a rank training without the other's gradient differs by
  // ~lr.
  const double weights =
      max_abs_difference(one.checkpoint / "model", two.checkpoint / "model", true);
  EXPECT_LE(weights, 5e-5);
  std::printf("1 rank vs 2 ranks: first moments %.3g relative, weights %.3g absolute\n", moments,
              weights);
}

// Two ranks, both serving: each episode's calls stay on the rank of its first call, new episodes
// spread over the ranks, and after the step both ranks hold the same weights, bit for bit.
TEST(DistTrainingTest, TwoRanksServeEpisodesStickyAndHoldTheSameWeightsAfterAStep) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  SwarmProcess swarm(
      SwarmProcess::Options{dir / "server", {}, "", {"--engine-ranks", "2", "--route", "sticky"}});
  Api api(swarm.url());
  std::string yaml = config_yaml(fixture(true).model, "");
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  api.boot(yaml);
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<std::pair<std::string, double>> episodes = {
      {"task-a", 1.0}, {"task-a", 0.0}, {"task-b", 0.0}, {"task-b", 1.0}};
  for (size_t i = 0; i < episodes.size(); ++i) {
    Json e = api.claim("client-r");
    ASSERT_EQ(e["success"], true) << e.dump();
    for (int turn = 0; turn < 3; ++turn) {
      auto r = api.chat(e["openai_api_key"],
                        user_chat("Turn " + std::to_string(turn) + " of " + std::to_string(i),
                                  {{"max_tokens", 4}}));
      EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_EQ(api.end("client-r", e["episode_uuid"], episodes[i].first, episodes[i].second).status,
              200);
  }
  const std::string metrics = api.get("/metrics").body;
  EXPECT_EQ(sample_value(metrics, "ajet_route_policy{policy=\"sticky\"}"), 1) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_route_episodes_total{placement=\"new\"}"), 4) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_route_sticky_calls_total"), 8) << metrics;
  // One episode at a time: each starts on an idle front and goes to the rank that served fewer.
  EXPECT_EQ(sample_value(metrics, "ajet_replica_calls_total{replica=\"0\"}"), 6) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_calls_total{replica=\"1\"}"), 6) << metrics;
  EXPECT_EQ(sample_value(metrics, "ajet_replica_up{replica=\"1\"}"), 1) << metrics;
  EXPECT_GT(sample_value(metrics, "ajet_replica_generated_tokens_total{replica=\"1\"}"), 0)
      << metrics;
  // KV-pressure admission (--admission kv, the default) reads both replicas about once a second;
  // caches this empty leave the cap at the pool size.
  std::string admission;
  EXPECT_TRUE(eventually([&] {
    admission = api.get("/metrics").body;
    return sample_value(admission, "ajet_admission_decisions_total{decision=\"hold\"}") >= 1;
  })) << admission;
  EXPECT_GT(sample_value(admission, "ajet_admission_pool_size"), 0) << admission;
  EXPECT_EQ(sample_value(admission, "ajet_admission_cap"),
            sample_value(admission, "ajet_admission_pool_size"))
      << admission;

  EXPECT_TRUE(eventually([&] { return api.status()["global_step"] == 1; }, 300s))
      << api.status().dump() << "\n"
      << api.get("/get_verbose_logs").body;
  std::string logs;
  EXPECT_TRUE(eventually([&] {
    logs = api.get("/get_verbose_logs").body;
    return logs.find("step 0 done: policy_version 1") != std::string::npos;
  })) << logs;
  EXPECT_THAT(logs,
              HasSubstr("the 2 data-parallel ranks hold the same weights (weights_checksum "));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("hold different weights")));
  // Both ranks serve the new version: two new episodes land on different ranks.
  EXPECT_TRUE(eventually([&] { return api.engine_status() == "ENGINE.ROLLING"; }));
  for (int i = 0; i < 2; ++i) {
    Json e = api.claim("client-r");
    auto r = api.chat(e["openai_api_key"], user_chat("And now?", {{"max_tokens", 4}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json().value("system_fingerprint", ""), "ajet-policy-1");
  }
}

// The pid of the front's child engine whose command line holds `--local-rank <rank>`; 0 when none.
int64_t rank_pid(pid_t front, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat, cmdline;
    try {
      stat = read_file(entry.path() / "stat");
      cmdline = read_file(entry.path() / "cmdline");
    } catch (...) {
      continue;
    }
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int64_t ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) != 2 || ppid != front)
      continue;
    if (cmdline.find(std::string("--local-rank") + '\0' + std::to_string(rank) + '\0') !=
        std::string::npos) {
      return std::stoll(name);
    }
  }
  return 0;
}

TEST(DistTrainingTest, ARankThatDiesTakesTheGroupDownAndEveryRankIsRestarted) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  ScratchDir dir;
  const fs::path model = fixture(true).model;
  SwarmProcess swarm(SwarmProcess::Options{dir / "server", {}, "", {"--engine-ranks", "2"}});
  Api api(swarm.url());
  std::string yaml = config_yaml(model);
  yaml.replace(yaml.find("backbone: debug"), std::string("backbone: debug").size(),
               "backbone: torch");
  api.boot(yaml);
  const int64_t rank0 = api.engine_pid();
  const int64_t rank1 = rank_pid(swarm.pid(), 1);
  ASSERT_GT(rank0, 0) << api.status().dump();
  ASSERT_GT(rank1, 0) << "no child of the front runs with --local-rank 1";
  ASSERT_EQ(::kill(pid_t(rank1), SIGKILL), 0);
  // Rank 0 cannot train without rank 1: both are replaced.
  ASSERT_TRUE(eventually([&] {
    const int64_t now = api.engine_pid();
    return api.engine_status() == "ENGINE.ROLLING" && now > 0 && now != rank0;
  })) << api.status().dump();
  const std::string logs = api.get("/get_verbose_logs").body;
  EXPECT_THAT(logs, HasSubstr("rank 1 (pid " + std::to_string(rank1) + "): killed by signal 9"));
  EXPECT_THAT(logs, HasSubstr("restarting it from"));
  EXPECT_TRUE(eventually([&] { return process_gone(rank0); }, 20s));
  const int64_t new_rank1 = rank_pid(swarm.pid(), 1);
  EXPECT_GT(new_rank1, 0);
  EXPECT_NE(new_rank1, rank1);
  Json claim = api.claim("client-d");
  EXPECT_EQ(api.chat(claim["openai_api_key"], user_chat("Hi", {{"max_tokens", 2}})).status, 200);
}

// `ajet-engine serve` with `args` (after --model and --listen); its exit status and output.
Captured serve(const fs::path& model, const std::string& args) {
  return run_capture(
      shell_quote(bin("ajet-engine").string()) + " serve --model " + shell_quote(model.string()) +
      " --listen tcp:127.0.0.1:0 --insecure-no-token --threads 1 --kv-cache-mb 16 " + args);
}

TEST(DistTrainingTest, BadDistFlagsAndFailedRendezvousAreClearErrors) {
  if (!fs::exists(bin("ajet-engine")))
    GTEST_FAIL() << "ajet-engine is not built: build the ajet-engine target";
  const fs::path model = fixture(true).model;

  Captured bad_rank = serve(model, "--nproc-per-node 2 --local-rank 2");
  EXPECT_NE(bad_rank.status, 0);
  EXPECT_THAT(bad_rank.out, HasSubstr("--local-rank 2"));

  Captured bad_port = serve(model, "--nproc-per-node 2 --local-rank 0 --master-port 70000");
  EXPECT_NE(bad_port.status, 0);
  EXPECT_THAT(bad_port.out, HasSubstr("70000 is outside [1, 65535]"));

  // Rank 0's rendezvous port is taken: the error names the port and the rank.
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  Captured in_use =
      serve(model, "--nproc-per-node 2 --local-rank 0 --dist-timeout 5 --master-port " + port);
  ::close(taken);
  EXPECT_NE(in_use.status, 0);
  EXPECT_THAT(in_use.out, HasSubstr("port " + port + " is in use"));
  EXPECT_THAT(in_use.out, HasSubstr("rank 0"));

  // Rank 1 of 2 alone: nobody serves the store; it gives up after --dist-timeout, naming the
  // address.
  Captured alone =
      serve(model, "--nproc-per-node 2 --local-rank 1 --dist-timeout 1 --master-port " + port);
  EXPECT_NE(alone.status, 0);
  EXPECT_THAT(alone.out, HasSubstr("127.0.0.1:" + port));
  EXPECT_THAT(alone.out, HasSubstr("rank 1"));

  // The front refuses a rank count below 1 before starting anything.
  Captured front = run_capture(shell_quote(bin("ajet-swarm").string()) + " start --engine-ranks 0");
  EXPECT_NE(front.status, 0);
  EXPECT_THAT(front.out, HasSubstr("--engine-ranks"));
}

}  // namespace
}  // namespace ajet::e2e
