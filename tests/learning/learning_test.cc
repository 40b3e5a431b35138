// The learning proof, reduced to fit CI (docs/classic.md "Learning proof"): a freshly initialised
// tiny model is warmed up by `ajet sft` on frozenlake demonstrations, then trained by GRPO through
// the whole stack (`ajet --conf` → ajet-swarm → ajet-engine, built-in agents), and its held-out
// success at temperature 1 must rise by more than measurement noise can explain.
//
// The margin: validation plays the same 100 held-out tasks 8 times each before and after training.
// For fixed tasks the success count's variance is at most that of a binomial with the mean success
// rate, so z = (after - before) / sqrt(p0 (1 - p0) / n + p1 (1 - p1) / n) with n = 800 is a
// conservative noise scale; the test asks for z >= 4 (one-sided p < 4e-5) and at least +8 points.
// Measured on the development machine with this config: 27.1% -> 52.5% (z = 10.7) in 8 RL steps;
// with lr 1e-4 and 4 samples per task two runs gave z = 6.6 and 3.8, hence the larger lr and
// sample. Nothing here depends on timing.
#include <gtest/gtest.h>

#include <cmath>

#include "classic/classic_fixture.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::bin;
using e2e::Captured;
using e2e::run_capture;
using e2e::shell_quote;

std::string learning_yaml(const fs::path& model) {
  return "ajet:\n"
         "  experiment_name: learn\n"
         "  backbone: torch\n"
         "  model:\n"
         "    path: " +
         model.string() +
         "\n"
         "  data:\n"
         "    max_prompt_length: 896\n"
         "    max_response_length: 384\n"
         "    train_batch_size: 16\n"
         "  rollout:\n"
         "    max_env_worker: 64\n"
         "    max_num_seqs: 64\n"
         "    num_repeat: 8\n"
         "    temperature: 1.0\n"
         "    max_response_length_in_one_turn: 24\n"
         "    max_model_len: 1280\n"
         "  task_reader:\n"
         "    type: builtin\n"
         "    builtin:\n"
         "      generator: frozenlake\n"
         "      num_training_tasks: 2000\n"
         "      num_validation_tasks: 100\n"
         "      seed: 1\n"
         "      params: {size: 4, hole_fraction: 0.2, slippery: false}\n"
         "  trainer_common:\n"
         "    total_training_steps: 8\n"
         "    test_freq: 8\n"
         "    val_before_train: true\n"
         "    val_pass_n: 8\n"
         "    save_freq: 0\n"
         "    use_kl_loss: false\n"
         "    mini_batch_num: 2\n"
         "    algorithm:\n"
         "      adv_estimator: grpo\n"
         "      drop_zero_variance_groups: true\n"
         "    optim:\n"
         "      lr: 3.0e-4\n"
         "      betas: [0.9, 0.99]\n"
         "      weight_decay: 0.0\n"
         "      grad_clip: 1.0\n"
         "  engine:\n"
         "    threads: 1\n"
         "    kv_cache_memory_mb: 256\n"
         "    seed: 0\n";
}

Captured run_ok(const std::string& command) {
  Captured r = run_capture(command);
  EXPECT_EQ(r.status, 0) << command << "\n" << r.out;
  return r;
}

TEST(Learning, FrozenLakeHeldOutSuccessRisesBeyondNoise) {
  e2e::ScratchDir dir;
  const fs::path tok = classic_tokenizer();
  const std::string ajet = shell_quote(bin("ajet").string());
  const fs::path init = dir / "tiny-init", sft = dir / "tiny-sft", demos = dir / "demos.jsonl";

  // Warm-up: 80% shortest paths, 20% random walks; 100 steps of 4096 tokens, two worker threads of
  // one intra-op thread each (robust when other tests share the cores).
  if (run_ok(ajet + " model init --preset tiny --seed 1 --tokenizer " + shell_quote(tok.string()) +
             " --out " + shell_quote(init.string()))
          .status != 0)
    return;
  if (run_ok(ajet +
             " tasks demos --task frozenlake --n 2000 --correct-ratio 0.8 --error-mix 0,1,0 --seed "
             "5 --out " +
             shell_quote(demos.string()))
          .status != 0)
    return;
  if (run_ok(ajet + " sft --model " + shell_quote(init.string()) + " --demos " +
             shell_quote(demos.string()) + " --out " + shell_quote(sft.string()) +
             " --steps 100 --warmup 20 --lr 2e-3 --min-lr-ratio 0.25 --batch-tokens 4096 --seed 1 "
             "--threads 2"
             " --workers 2 --log-every 50")
          .status != 0)
    return;

  // RL: 8 steps of 16 tasks x 8 episodes, validation before and after.
  write_file_atomic(dir / "learn.yaml", learning_yaml(sft));
  const Captured r = run_ok(ajet + " --conf " + shell_quote((dir / "learn.yaml").string()) +
                            " --exp-dir " + shell_quote((dir / "exps").string()));
  if (r.status != 0) return;

  std::vector<Json> val;
  for (Json& rec : read_jsonl(dir / "exps" / "learn" / "metrics.jsonl")) {
    if (rec["kind"] == "validation") val.push_back(std::move(rec));
  }
  ASSERT_EQ(val.size(), 2u) << r.out;
  EXPECT_EQ(val[0]["step"].get<int64_t>(), 0);
  EXPECT_EQ(val[1]["step"].get<int64_t>(), 8);
  const Json& v0 = val[0]["validation"];
  const Json& v1 = val[1]["validation"];
  ASSERT_EQ(v0["tasks"].get<int64_t>(), 100);
  ASSERT_EQ(v0["k"].get<int64_t>(), 8);
  const double n = static_cast<double>(v0["tasks"].get<int64_t>() * v0["k"].get<int64_t>());
  const double p0 = v0["sampled_success"].get<double>(), p1 = v1["sampled_success"].get<double>();
  const double se = std::sqrt(p0 * (1 - p0) / n + p1 * (1 - p1) / n);
  const double z = se > 0 ? (p1 - p0) / se : 0;
  std::printf(
      "held-out success at T=1: %.1f%% -> %.1f%% (z = %.1f); greedy %.1f%% -> %.1f%%; pass@8 "
      "%.1f%% -> %.1f%%\n",
      100 * p0, 100 * p1, z, 100 * v0["greedy_success"].get<double>(),
      100 * v1["greedy_success"].get<double>(), 100 * v0["pass_at_k"].get<double>(),
      100 * v1["pass_at_k"].get<double>());
  // The warm-up gives RL something to improve: neither hopeless nor solved.
  EXPECT_GT(p0, 0.05);
  EXPECT_LT(p0, 0.8);
  EXPECT_GE(p1 - p0, 0.08) << r.out;
  EXPECT_GE(z, 4.0) << r.out;
}

}  // namespace
}  // namespace ajet::classic
