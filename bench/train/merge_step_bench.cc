// Wall time of one training step (issue 5's benchmark) for a synthetic multi-turn agent, three
// ways, in one run: (a) one sample per LLM call (plain packing: every call repeats the shared
// history), (b) timeline merging (one sample per linear episode, plain packing), (c) merging + tree
// packing (the GRPO group's shared prompt computed once). Episodes come from tracking/synthetic.h
// with the shape bench/tracking/merge_tokens uses (256-token system prompt, 32-token task, ~64 new
// tokens per turn); ONE GRPO group of 8 episodes, N turns. A step is Trainer::train_step (old
// logprobs from the step's own forward, forward + backward, AdamW; micro_batch_tokens 16384). Each
// packing mode gets a warm-up step on the N = 1 batch; every measured step then runs once (a step
// on tiny is seconds; large buffers are fresh mmaps either way). Before each (a) step its time is
// estimated from the previous (a) step's seconds per token; above --cap seconds (default 240) that
// N is skipped and the output says so. Prints a table and appends it to docs/benchmarks.md
// (--no-append to skip; --smoke for a seconds-long check with micro shapes). Options: --preset
// (tiny), --threads (2), --vocab (4096),
// --turns 1,5,10,20, --cap S. On `small`, (a) at N = 20 (~140k tokens) takes several minutes on 2
// cores: the cap skips it there.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "model/blas_kernel.h"
#include "model/compute.h"
#include "model/presets.h"
#include "tracking/merge.h"
#include "tracking/synthetic.h"
#include "train/trainer.h"

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

constexpr int kGroupSize = 8;

struct Batches {
  train_data::Batch per_call;  // (a)
  train_data::Batch merged;    // (b) and (c)
};

// One GRPO group of `turns`-turn episodes; rewards 0 / 1 alternate so the group has variance.
Batches make_batches(int turns, int64_t vocab, bool smoke) {
  tracking::synthetic::AgentShape shape;
  shape.turns = turns;
  shape.vocab_size = static_cast<int>(vocab);
  if (smoke) {
    shape.system_prompt_tokens = 16;
    shape.task_tokens = 4;
    shape.generated_tokens_per_turn = 8;
    shape.observation_tokens_per_turn = 4;
  }
  Batches b;
  auto episodes = tracking::synthetic::grpo_group(shape, smoke ? 2 : kGroupSize, 1000);
  for (size_t e = 0; e < episodes.size(); ++e) {
    const auto& calls = episodes[e];
    const std::string uuid = calls.at(0).episode_uuid;
    const double reward = static_cast<double>(e % 2);
    for (const tracking::CallRecord& c : calls) {
      train_data::TrainSample s;
      s.episode_uuid = uuid;
      s.task_id = "task";
      s.reward = reward;
      s.weight = 1;  // a linear episode is one branch (trainer.h "Merging invariance")
      s.token_ids = c.prompt_ids;
      s.token_ids.insert(s.token_ids.end(), c.completion_ids.begin(), c.completion_ids.end());
      s.loss_mask.assign(c.prompt_ids.size(), 0);
      s.loss_mask.insert(s.loss_mask.end(), c.completion_ids.size(), 1);
      s.logprobs.assign(c.prompt_ids.size(), 0.0f);
      s.logprobs.insert(s.logprobs.end(), c.logprobs.begin(), c.logprobs.end());
      b.per_call.samples.push_back(std::move(s));
    }
    auto m = tracking::merge_episode({uuid, "task", reward}, calls, {});
    for (auto& s : train_data::batch_from_samples(m.samples).samples)
      b.merged.samples.push_back(std::move(s));
  }
  return b;
}

struct Step {
  double seconds = 0;
  int64_t packed = 0;  // tokens the forward computed (TrainMetrics::packed_tokens)
};

Step time_step(train::Trainer& trainer, const train_data::Batch& batch) {
  const auto t0 = Clock::now();
  const auto m = trainer.train_step(batch);
  return {std::chrono::duration<double>(Clock::now() - t0).count(), m.packed_tokens};
}

struct Row {
  int turns = 0;
  size_t tokens_a = 0;    // sample tokens of (a) (plain packing computes each once)
  std::optional<Step> a;  // absent: skipped by the cap
  Step b, c;
  double a_estimate = 0;  // seconds, when skipped
};

std::string ratio(double x, double y) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", x / y);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  std::string preset = "tiny";
  int threads = 2;
  int64_t vocab = 4096;
  double cap = 240;
  std::vector<int> turns = {1, 5, 10, 20};
  ajet::bench::BenchCli cli(
      "train_merge_step_bench",
      "Wall time of one training step: one sample per LLM call against merged against merged + "
      "tree-packed");
  CLI::App& app = cli.app();
  app.add_option("--preset", preset, "Model preset (default tiny)")
      ->check(CLI::IsMember({"micro", "tiny", "small"}));
  app.add_option("--threads", threads, "Intra-op threads (default 2)")->check(CLI::Range(1, 256));
  app.add_option("--vocab", vocab, "Vocabulary size (default 4096)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--cap", cap,
                 "Skip an (a) step estimated to take longer than this many seconds (default 240)")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--turns", turns, "Comma-separated turns per episode (default 1,5,10,20)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1000));
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  if (smoke) {
    preset = "micro";
    vocab = 256;
    turns = {1, 3};
  }
  model::configure_threads(threads);
  const auto config = model::preset_config(preset, vocab);
  model::Qwen2Model base(config);
  model::init_weights(base, 0);

  train_data::TrainerOptions o;
  o.optim.lr = 1e-6;
  o.shuffle = false;
  o.episode_weighting = true;
  std::printf("preset %s (%lld parameters, vocab %lld), %d threads, load %s\n", preset.c_str(),
              static_cast<long long>(model::count_parameters(config)),
              static_cast<long long>(vocab), threads, ajet::bench::load_average_text().c_str());

  // One model per packing mode (weights drift by lr 1e-6 steps; the cost of a step does not).
  o.packing = train_data::Packing::kPlain;
  train::Trainer plain(base, o);
  model::Qwen2Model tree_model(config);
  {
    torch::NoGradGuard no_grad;
    auto src = base->hf_named_parameters();
    auto dst = tree_model->hf_named_parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  }
  o.packing = train_data::Packing::kTree;
  train::Trainer tree(tree_model, o);
  {
    const Batches warm = make_batches(1, vocab, smoke);
    plain.train_step(warm.merged);
    tree.train_step(warm.merged);
  }

  std::vector<Row> rows;
  std::vector<std::string> notes;
  double a_seconds_per_token = 0;  // of the last (a) step measured
  for (int n : turns) {
    const Batches b = make_batches(n, vocab, smoke);
    Row r;
    r.turns = n;
    r.tokens_a = b.per_call.tokens();
    r.b = time_step(plain, b.merged);
    r.c = time_step(tree, b.merged);
    // (a) costs at least its tokens at (a)'s measured rate; attention grows faster, hence the
    // margin.
    const double estimate =
        1.2 * static_cast<double>(b.per_call.tokens()) *
        (a_seconds_per_token > 0 ? a_seconds_per_token
                                 : r.b.seconds / static_cast<double>(r.b.packed));
    if (estimate > cap) {
      r.a_estimate = estimate;
      notes.push_back("N = " + std::to_string(n) + ": (a) skipped, estimated " +
                      std::to_string(static_cast<int>(estimate)) + " s for one step (> cap " +
                      std::to_string(static_cast<int>(cap)) + " s); its tokens are still listed.");
    } else {
      r.a = time_step(plain, b.per_call);
      a_seconds_per_token = r.a->seconds / static_cast<double>(r.a->packed);
    }
    std::printf("N = %d: tokens (a) %zu (b) %lld (c) %lld; seconds (a) %s (b) %.3f (c) %.3f\n", n,
                r.tokens_a, static_cast<long long>(r.b.packed), static_cast<long long>(r.c.packed),
                r.a ? std::to_string(r.a->seconds).c_str() : "skipped", r.b.seconds, r.c.seconds);
    rows.push_back(r);
    std::fflush(stdout);
  }

  std::ostringstream table;
  table
      << "| turns N | tokens (a) | tokens (b) | tokens (c) | step s (a) | step s (b) | step s (c) "
         "| tokens (a)/(b) | tokens (b)/(c) | time (a)/(b) | time (b)/(c) | time (a)/(c) |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    const double ta = static_cast<double>(r.tokens_a);
    char a_cell[64];
    if (r.a)
      std::snprintf(a_cell, sizeof a_cell, "%.3f", r.a->seconds);
    else
      std::snprintf(a_cell, sizeof a_cell, "skipped (~%.0f)", r.a_estimate);
    char line[512];
    std::snprintf(line, sizeof line,
                  "| %d | %.0f | %lld | %lld | %s | %.3f | %.3f | %s | %s | %s | %s | %s |\n",
                  r.turns, ta, static_cast<long long>(r.b.packed),
                  static_cast<long long>(r.c.packed), a_cell, r.b.seconds, r.c.seconds,
                  ratio(ta, static_cast<double>(r.b.packed)).c_str(),
                  ratio(static_cast<double>(r.b.packed), static_cast<double>(r.c.packed)).c_str(),
                  r.a ? ratio(r.a->seconds, r.b.seconds).c_str() : "-",
                  ratio(r.b.seconds, r.c.seconds).c_str(),
                  r.a ? ratio(r.a->seconds, r.c.seconds).c_str() : "-");
    table << line;
  }
  for (const auto& n : notes) table << "\n" << n << "\n";
  const std::string load = ajet::bench::load_average_text();
  std::printf("\n%s\nload average after the run: %s\n", table.str().c_str(), load.c_str());
  if (cli.append()) {
    std::ostringstream body;
    body << "`bench/train/merge_step_bench`: the synthetic agent of `bench/tracking/merge_tokens` "
            "(256-token system prompt,\n"
         << "32-token task, ~64 new tokens per turn), ONE GRPO group of " << kGroupSize
         << " episodes, `" << preset << "` preset (" << model::count_parameters(config)
         << " parameters, vocab " << vocab << "), " << threads
         << " threads. One Trainer::train_step\n(forward + backward + AdamW, micro_batch_tokens "
            "16384) timed once per cell "
         << "after a warm-up step per packing mode:\n(a) one sample per LLM call, plain packing; "
            "(b) merged, plain packing; "
         << "(c) merged + tree packing. Tokens = tokens\nthe forward computed. Load average "
            "(1/5/15 min) at the end: "
         << load << " (2-core machine).\n\n"
         << table.str();
    ajet::bench::append_to_benchmarks(
        "Timeline merging and tree packing: wall time of one training step", body.str());
  }
  return 0;
}
