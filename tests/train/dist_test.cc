// Data parallelism (the torch-free placement and batch split are tested in tests/train_data):
// rendezvous errors that name the address, and the real thing — two worker processes on
// loopback (a c10d Gloo group met through a TCPStore) train one step on the halves of a batch and
// end with the parameters one rank gets on the whole batch.
#include "train/dist.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "dist_test_util.h"
#include "model/model_dir.h"
#include "model/presets.h"

extern char** environ;

namespace ajet::train {
namespace {

using testing::relative_difference;
using train_data::testing::error_of;
using train_data::testing::fake_env;

// A port nobody else uses right now (the kernel's pick for an ephemeral bind).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    ADD_FAILURE() << "bind to an ephemeral port failed";
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

train_data::DistPlacement loopback(int rank, int world, int port, double timeout_seconds) {
  train_data::DistOptions o;
  o.nnodes = world;
  o.node_rank = rank;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout_seconds = timeout_seconds;
  return train_data::resolve_placement(o, fake_env({}));
}

TEST(DistRendezvous, PortInUseNamesTheAddress) {
  // Hold a listening socket on every address, as another program would.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const std::string what = error_of([&] { make_collective(loopback(0, 2, port, 2)); });
  ::close(fd);
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0 of 2"), std::string::npos) << what;
  EXPECT_NE(what.find("is in use"), std::string::npos) << what;
}

TEST(DistRendezvous, MissingPeerTimesOutNamingTheAddress) {
  const int port = free_port();
  // Rank 0 serves the store and waits for a rank 1 that never comes.
  const std::string served = error_of([&] { make_collective(loopback(0, 2, port, 1)); });
  EXPECT_NE(served.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << served;
  EXPECT_NE(served.find("not every rank joined"), std::string::npos) << served;
  // Rank 1 finds no store at all.
  const std::string client = error_of([&] { make_collective(loopback(1, 2, free_port(), 1)); });
  EXPECT_NE(client.find("could not reach the store at 127.0.0.1:"), std::string::npos) << client;
}

TEST(DistRendezvous, OneRankNeedsNoStore) {
  auto c = make_collective(loopback(0, 1, 1, 1));
  EXPECT_EQ(c->world_size(), 1);
  std::vector<torch::Tensor> t = {torch::ones({2})};
  c->all_reduce_sum(t);
  EXPECT_EQ(t[0].sum().item<float>(), 2.0f);
}

// Runs `argv` with extra environment variables, stdout and stderr to `log`; returns the pid.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra,
            const std::string& log) {
  static const std::set<std::string> kDropped = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (!kDropped.count(kv.substr(0, kv.find('=')))) env.push_back(kv);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) ADD_FAILURE() << "posix_spawn " << argv[0] << " failed: " << rc;
  return pid;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two real processes, rank 0 placed by flags and rank 1 by torchrun's environment variables, each
// training one step on its part of the batch: gradients, loss and the parameters after the AdamW
// step equal one rank's on the whole batch. Tolerances (max |a - b| / max |b| over all tensors):
// 1e-5 for gradients and the loss (float summation order differs); 1e-6 for the parameters (a few
// float32 ulps); 1e-4 for the parameter change of the step, which is ~100x smaller than the
// parameters, so their float32 rounding alone is ~1e-5 of it. The step itself must be at least 1e-3
// of the largest parameter.
TEST(DataParallel, TwoProcessesEqualOneRankOnTheWholeBatch) {
  testing::ScratchDir dir;
  const auto config = model::preset_config("micro", 61);
  auto initial = testing::random_model(config, 41);
  model::save_model_dir(initial, dir / "model");
  std::vector<torch::Tensor> before;
  for (auto& [name, p] : initial->hf_named_parameters()) before.push_back(p.detach().clone());

  for (const std::string& name : testing::dist_configs()) {
    SCOPED_TRACE(name);
    torch::set_num_threads(1);
    auto model = model::load_model_dir(dir / "model");
    Trainer single(model, testing::dist_options(name));
    const testing::DistResult ref =
        testing::train_once(single, testing::dist_batch(config.vocab_size));

    const std::string port = std::to_string(free_port());
    const std::string worker = AJET_DIST_WORKER;
    const std::string model_dir = (dir / "model").string();
    std::vector<std::string> out = {(dir / (name + "_0.pt")).string(),
                                    (dir / (name + "_1.pt")).string()};
    std::vector<std::string> logs = {(dir / (name + "_0.log")).string(),
                                     (dir / (name + "_1.log")).string()};
    const pid_t p0 =
        spawn({worker, "--model", model_dir, "--out", out[0], "--config", name, "--nnodes", "2",
               "--node-rank", "0", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
               "--master-port", port, "--dist-timeout", "60"},
              {}, logs[0]);
    const pid_t p1 = spawn(
        {worker, "--model", model_dir, "--out", out[1], "--config", name, "--dist-timeout", "60"},
        {{"RANK", "1"},
         {"WORLD_SIZE", "2"},
         {"LOCAL_RANK", "0"},
         {"MASTER_ADDR", "127.0.0.1"},
         {"MASTER_PORT", port}},
        logs[1]);
    for (int r = 0; r < 2; ++r) {
      int status = 0;
      ASSERT_EQ(::waitpid(r == 0 ? p0 : p1, &status, 0), r == 0 ? p0 : p1);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << r << " failed:\n"
          << read_file(logs[static_cast<size_t>(r)]);
    }
    std::vector<testing::DistResult> ranks = {testing::load_dist_result(out[0]),
                                              testing::load_dist_result(out[1])};
    int64_t tokens = 0;
    for (int r = 0; r < 2; ++r) {
      const auto& got = ranks[static_cast<size_t>(r)];
      EXPECT_EQ(got.rank, r);
      EXPECT_EQ(got.world_size, 2);
      EXPECT_GT(got.tokens, 0) << "rank " << r << " trained on nothing";
      tokens += got.tokens;
      EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::max(1.0, std::abs(ref.loss))) << "rank " << r;
      EXPECT_NEAR(got.kl, ref.kl, 1e-6) << "rank " << r;
      EXPECT_LT(relative_difference(got.grads, ref.grads), 1e-5) << "rank " << r;
      std::vector<torch::Tensor> step_got, step_ref;
      for (size_t i = 0; i < before.size(); ++i) {
        step_got.push_back(got.params[i] - before[i]);
        step_ref.push_back(ref.params[i] - before[i]);
      }
      const double step = relative_difference(ref.params, before);  // max |step| / max |parameter|
      const double grad_diff = relative_difference(got.grads, ref.grads);
      const double step_diff = relative_difference(step_got, step_ref);
      const double param_diff = relative_difference(got.params, ref.params);
      std::printf(
          "[%s] rank %d: tokens %lld, step/param %.2e, relative differences: gradients %.2e, step "
          "%.2e, parameters %.2e\n",
          name.c_str(), r, static_cast<long long>(got.tokens), step, grad_diff, step_diff,
          param_diff);
      EXPECT_GT(step, 1e-3) << "the step must move the parameters visibly";
      EXPECT_LT(step_diff, 1e-4) << "rank " << r;
      EXPECT_LT(param_diff, 1e-6) << "rank " << r;
    }
    EXPECT_EQ(tokens, ref.tokens) << "the two parts together are the whole batch";
  }
}

}  // namespace
}  // namespace ajet::train
