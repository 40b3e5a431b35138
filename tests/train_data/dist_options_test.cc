// Where a rank sits in its data-parallel group: torchrun-style flags
// (apps/ajet-engine/dist_flags.h) with the torchrun environment as the fallback, and errors that
// name the flag or variable. No libtorch.
#include "train_data/dist_options.h"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ajet-engine/dist_flags.h"
#include "common/error.h"
#include "test_util.h"

namespace ajet::train_data {
namespace {

using testing::error_of;
using testing::fake_env;

DistOptions parse_flags(std::vector<std::string> args) {
  CLI::App app;
  DistOptions o;
  engine_cli::add_dist_flags(app, o);
  std::vector<const char*> argv = {"serve"};
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return o;
}

TEST(DistPlacement, FlagsLikeTorchrun) {
  const DistOptions o = parse_flags({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "3",
                                     "--local-rank", "2", "--master-addr", "10.0.0.5",
                                     "--master-port", "4000", "--dist-timeout", "7"});
  const DistPlacement p =
      resolve_placement(o, fake_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "1"}}));
  EXPECT_EQ(p.world_size, 6);
  EXPECT_EQ(p.rank, 1 * 3 + 2);
  EXPECT_EQ(p.local_rank, 2);
  EXPECT_EQ(p.local_world_size, 3);
  EXPECT_EQ(p.master(), "10.0.0.5:4000");
  EXPECT_EQ(p.timeout.count(), 7000);
}

TEST(DistPlacement, TorchrunEnvironmentIsTheFallback) {
  const DistPlacement p = resolve_placement(parse_flags({}), fake_env({{"RANK", "3"},
                                                                       {"WORLD_SIZE", "4"},
                                                                       {"LOCAL_RANK", "1"},
                                                                       {"LOCAL_WORLD_SIZE", "2"},
                                                                       {"MASTER_ADDR", "node0"},
                                                                       {"MASTER_PORT", "29555"}}));
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.master(), "node0:29555");
  // Flags win over the environment field by field; LOCAL_RANK fills --local-rank.
  const DistPlacement q =
      resolve_placement(parse_flags({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2"}),
                        fake_env({{"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node0"}}));
  EXPECT_EQ(q.rank, 3);
  EXPECT_EQ(q.world_size, 4);
  EXPECT_EQ(q.master(), "node0:29500");
  const DistPlacement single = resolve_placement(parse_flags({}), fake_env({}));
  EXPECT_EQ(single.world_size, 1);
  EXPECT_EQ(single.rank, 0);
  EXPECT_EQ(single.master(), "127.0.0.1:29500");
}

TEST(DistPlacement, BadValuesNameTheFlagOrVariable) {
  auto resolve = [](std::vector<std::string> flags, std::map<std::string, std::string> env) {
    return error_of([&] { resolve_placement(parse_flags(flags), fake_env(env)); });
  };
  EXPECT_NE(resolve({"--nnodes", "2", "--node-rank", "2"}, {}).find("--node-rank 2"),
            std::string::npos);
  EXPECT_NE(resolve({"--nproc-per-node", "0"}, {}).find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(resolve({"--nproc-per-node", "2", "--local-rank", "2"}, {}).find("--local-rank 2"),
            std::string::npos);
  EXPECT_NE(resolve({"--master-port", "70000"}, {}).find("--master-port 70000"), std::string::npos);
  EXPECT_NE(resolve({}, {{"MASTER_PORT", "http"}}).find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(resolve({}, {{"WORLD_SIZE", "2"}}).find("RANK is not"), std::string::npos);
  EXPECT_NE(resolve({}, {{"WORLD_SIZE", "2"}, {"RANK", "2"}}).find("RANK 2"), std::string::npos);
  EXPECT_NE(resolve({"--dist-backend", "mpi"}, {}).find("mpi"), std::string::npos);
}

}  // namespace
}  // namespace ajet::train_data
