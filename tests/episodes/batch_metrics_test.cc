// The names a batch's stats get in the metrics table: every finite number, flattened, with the
// engine's timings under timing/, the per-episode staleness summarised, client ids made valid
// names.
#include "episodes/batch_metrics.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>

namespace ajet::episodes {
namespace {

std::map<std::string, double> as_map(const MetricValues& values) {
  std::map<std::string, double> out;
  for (const auto& [name, value] : values) {
    EXPECT_TRUE(out.emplace(name, value).second) << "twice: " << name;
    EXPECT_TRUE(valid_metric_name(name)) << name;
  }
  return out;
}

TEST(BatchMetrics, EveryNumberOfATrainedBatchGetsAStableName) {
  // What Registry::finish_batch stores: the engine's train_step reply (echo of docs/engine-rpc.md),
  // the merge counts the batch runner adds, and the rollout summary.
  const Json stats = Json::parse(R"({
    "loss": 0.25, "pg_loss": 0.2, "kl": 0.001, "entropy": 0.8, "grad_norm": 1.5, "lr": 1e-6,
    "clip_fraction": 0.05, "tokens": 1000, "trained_tokens": 400, "policy_version": 3,
    "backbone": "torch", "checkpoint": "/x/global_step_3", "approx_kl": null, "skipped": false,
    "step_time_s": 2.0, "seconds": 1.5, "old_logprob_seconds": 0.25, "ref_logprob_seconds": 0.125,
    "inference_paused_s": 2.0,
    "merge": {"calls": 8, "samples": 4, "tokens_before": 900, "tokens_after": 300, "compression_ratio": 3.0},
    "data_parallel": {"world_size": 2, "ranks": [{"rank": 0, "loss": 0.25, "tokens": 500},
                                                 {"rank": 1, "loss": 0.5, "tokens": 500}]},
    "rollout": {"batch_id": 4, "global_step": 2, "episodes": 4, "tasks": 2, "non_dummy_tasks": 1,
                "reward_mean": 0.5, "reward_std": 0.5, "success_rate": null, "policy_version": 3,
                "staleness": {"e1": 0, "e2": 1, "e3": 1, "e4": 2}, "staleness_max": 2,
                "client_shares": {"client a/1": {"episodes": 3, "tasks": 2, "share": 0.75}}}
  })");
  const std::map<std::string, double> m = as_map(batch_metrics(stats));
  const std::map<std::string, double> expected = {
      {"train/loss", 0.25},
      {"train/pg_loss", 0.2},
      {"train/kl", 0.001},
      {"train/entropy", 0.8},
      {"train/grad_norm", 1.5},
      {"train/lr", 1e-6},
      {"train/clip_fraction", 0.05},
      {"train/tokens", 1000},
      {"train/trained_tokens", 400},
      {"train/policy_version", 3},
      {"timing/step_s", 2.0},
      {"timing/trainer_s", 1.5},
      {"timing/old_logprob_s", 0.25},
      {"timing/ref_logprob_s", 0.125},
      {"timing/inference_paused_s", 2.0},
      {"perf/train_tokens_per_s", 500.0},
      {"merge/calls", 8},
      {"merge/samples", 4},
      {"merge/tokens_before", 900},
      {"merge/tokens_after", 300},
      {"merge/compression_ratio", 3.0},
      {"train/data_parallel/world_size", 2},
      {"train/data_parallel/rank0/loss", 0.25},
      {"train/data_parallel/rank0/tokens", 500},
      {"train/data_parallel/rank1/loss", 0.5},
      {"train/data_parallel/rank1/tokens", 500},
      {"rollout/batch_id", 4},
      {"rollout/global_step", 2},
      {"rollout/episodes", 4},
      {"rollout/tasks", 2},
      {"rollout/non_dummy_tasks", 1},
      {"rollout/reward_mean", 0.5},
      {"rollout/reward_std", 0.5},
      {"rollout/policy_version", 3},
      {"rollout/staleness_mean", 1.0},
      {"rollout/staleness_max", 2},
      {"rollout/client/client_a_1/episodes", 3},
      {"rollout/client/client_a_1/tasks", 2},
      {"rollout/client/client_a_1/share", 0.75},
  };
  EXPECT_EQ(m, expected);
}

TEST(BatchMetrics, ADebugBatchHasTheRolloutAloneAndNothingNonFinite) {
  const Json stats = {{"rollout",
                       {{"episodes", 2},
                        {"reward_mean", 1.0},
                        {"success_rate", 0.5},
                        {"staleness", Json::object()},
                        {"aborted", {{"verifier_timeout", 2}}}}},
                      {"loss", std::numeric_limits<double>::quiet_NaN()},
                      {"grad_norm", std::numeric_limits<double>::infinity()}};
  const std::map<std::string, double> m = as_map(batch_metrics(stats));
  EXPECT_EQ(m, (std::map<std::string, double>{{"rollout/episodes", 2},
                                              {"rollout/reward_mean", 1.0},
                                              {"rollout/success_rate", 0.5},
                                              {"rollout/aborted/verifier_timeout", 2}}));
  EXPECT_TRUE(batch_metrics(Json(nullptr)).empty());
  EXPECT_TRUE(batch_metrics(Json::object()).empty());
}

TEST(MetricNames, TheAllowedCharactersAndLength) {
  EXPECT_TRUE(valid_metric_name("rollout/reward_mean@calc"));
  EXPECT_TRUE(valid_metric_name("val/pass_at_4@frozen-lake.v2:a"));
  EXPECT_TRUE(valid_metric_name(std::string(200, 'a')));
  EXPECT_FALSE(valid_metric_name(std::string(201, 'a')));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_FALSE(valid_metric_name("has space"));
  EXPECT_FALSE(valid_metric_name("quote\""));
  EXPECT_FALSE(valid_metric_name("ünïcode"));
  EXPECT_EQ(metric_name_piece("a b/c"), "a_b_c");
  EXPECT_EQ(metric_name_piece(""), "_");
  EXPECT_EQ(metric_name_piece(std::string(100, 'x')).size(), 64u);
}

}  // namespace
}  // namespace ajet::episodes
