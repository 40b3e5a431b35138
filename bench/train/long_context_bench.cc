// One GRPO step over long shared prompts, before and after issue 40, in one run: a group of G
// samples of one task sharing a P-token prompt (a coding agent's system prompt and tools), each
// with its own short user message (12 tokens) and 32 trained completion tokens, through
// Trainer::train_step (old logprobs, forward + backward of the PPO loss, AdamW) on the `tiny`
// preset with Qwen3's vocabulary (151,936).
//   before: the micro-batch budget (16,384) counts every token, so a sample longer than it is
//   packed
//           alone and its prompt computed once per sample; attention blocks carry a (rows, keys)
//           mask.
//   after:  the budget counts the tokens beyond the prefix a micro-batch's samples share, so the
//   group
//           is one tree and its prompt computed once; blocks mask only the keys some row may not
//           see.
// Every cell runs in a fresh child process (this binary, --child), so its peak RSS is its own.
// Prints a table over --prefixes x --groups and appends it to docs/benchmarks.md (--no-append to
// skip; --smoke for a seconds-long check). With --preset qwen2.5-0.5b --lora R it measures that
// shape with LoRA.
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "common/json.h"
#include "model/compute.h"
#include "model/presets.h"
#include "train/packed_forward.h"
#include "train/trainer.h"

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

struct Cell {
  double seconds = 0;  // the timed step
  double peak_gb = 0;  // the child's peak RSS
  int64_t tokens = 0;  // sample tokens of the batch
};

double peak_rss_gb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB
}

// One cell, in this process: prints {"seconds":..,"peak_gb":..,"tokens":..} on the last line.
int run_child(const std::string& preset, int64_t vocab, int64_t lora, int prefix, int group,
              bool after, int threads, bool warm_up, bool checkpointing, int64_t layers) {
  model::configure_threads(threads);
  train::set_partial_block_masks(after);
  train::set_flash_attention_enabled(after);
  auto config = model::preset_config(preset, vocab);
  if (layers > 0) config.num_hidden_layers = layers;
  model::Qwen2Model m(config);
  model::init_weights(m, 0);
  std::mt19937_64 rng(1);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)); };
  std::vector<int32_t> prompt(static_cast<size_t>(prefix));
  for (auto& t : prompt) t = token();
  train_data::Batch batch;
  for (int e = 0; e < group; ++e) {
    train_data::TrainSample s;
    s.episode_uuid = "e" + std::to_string(e);
    s.task_id = "task";
    s.reward = e % 2;
    s.token_ids = prompt;
    for (int k = 0; k < 12; ++k) s.token_ids.push_back(token());  // the sample's own user message
    s.loss_mask.assign(s.token_ids.size(), 0);
    for (int k = 0; k < 32; ++k) {
      s.token_ids.push_back(token());
      s.loss_mask.push_back(1);
    }
    s.logprobs.assign(s.token_ids.size(), -1.0f);
    batch.samples.push_back(std::move(s));
  }
  train_data::TrainerOptions o;
  o.optim.lr = 1e-6;
  o.loss.use_kl = false;
  o.shuffle = false;
  o.budget_beyond_shared_prefix = after;
  if (lora > 0) o.lora.rank = lora;
  o.activation_checkpointing = checkpointing;
  train::Trainer trainer(m, o);
  if (warm_up) trainer.train_step(batch);
  const auto t0 = Clock::now();
  trainer.train_step(batch);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("{\"seconds\":%.3f,\"peak_gb\":%.3f,\"tokens\":%lld}\n", seconds, peak_rss_gb(),
              static_cast<long long>(batch.tokens()));
  return 0;
}

// Runs one cell in a child and reads its line; a failed child (out of memory, say) gives nullopt.
std::optional<Cell> run_cell(const std::string& self, const std::string& args) {
  const bench::CommandOutput out = bench::run_command(self + " " + args + " 2>&1");
  const auto at = out.text.rfind("{\"seconds\"");
  if (out.exit_code != 0 || at == std::string::npos) {
    std::fprintf(stderr, "cell %s failed (exit %d):\n%s\n", args.c_str(), out.exit_code,
                 out.text.c_str());
    return std::nullopt;
  }
  Json j = parse_json(out.text.substr(at), "cell output");
  return Cell{j.at("seconds").get<double>(), j.at("peak_gb").get<double>(),
              j.at("tokens").get<int64_t>()};
}

// Attention alone, forward + backward of one causal sequence of T tokens at the preset's head
// shape: the tensor-op path with (rows, keys) masks (what the trainer ran before) against the flash
// kernel with partial masks. The best of a few runs each, alternating.
std::string attention_table(const std::string& preset, int64_t vocab, int threads,
                            int64_t longest) {
  model::configure_threads(threads);
  const auto c = model::preset_config(preset, vocab);
  const int64_t h = c.num_attention_heads, hkv = c.num_key_value_heads, d = c.head_dim;
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof(line),
                "\nAttention alone (`block_sparse_attention`, forward + backward, one causal "
                "sequence, %lld heads "
                "(%lld kv) of %lld, %d threads): the tensor-op path with full block masks, as "
                "before, against the "
                "flash kernel with partial masks; best of 3 (1 beyond 8k tokens).\n\n",
                static_cast<long long>(h), static_cast<long long>(hkv), static_cast<long long>(d),
                threads);
  out << line << "| T | tensor ops s | flash s | flash speed |\n|---|---|---|---|\n";
  for (int64_t t = std::min<int64_t>(1024, longest); t <= longest; t *= 4) {
    std::vector<int32_t> ends(static_cast<size_t>(t), static_cast<int32_t>(t));
    torch::manual_seed(0);
    auto q0 = torch::randn({t, h, d}) * 0.3, k0 = torch::randn({t, hkv, d}),
         v0 = torch::randn({t, hkv, d});
    auto up = torch::randn({t, h * d});
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < (t > 8192 ? 1 : 3); ++rep) {
      for (int flash = 0; flash < 2; ++flash) {
        train::set_partial_block_masks(flash == 1);
        train::set_flash_attention_enabled(flash == 1);
        const train::AttentionPlan plan = train::plan_attention(ends, 128);
        auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
             v = v0.clone().requires_grad_(true);
        const auto t0 = Clock::now();
        (train::block_sparse_attention(q, k, v, plan) * up).sum().backward();
        best[flash] =
            std::min(best[flash], std::chrono::duration<double>(Clock::now() - t0).count());
      }
    }
    train::set_partial_block_masks(true);
    train::set_flash_attention_enabled(true);
    std::snprintf(line, sizeof(line), "| %lld | %.3f | %.3f | %.2fx |\n", static_cast<long long>(t),
                  best[0], best[1], best[0] / best[1]);
    out << line;
    std::printf("%s", line);
    std::fflush(stdout);
  }
  return out.str();
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::BenchCli cli(
      "train_long_context_bench",
      "One GRPO step over a long shared prompt, before and after shared-prefix packing and "
      "partial attention masks");
  CLI::App& app = cli.app();
  std::string prefixes = "1024,4096,16521,32768", groups = "1,4,8", preset = "tiny";
  int threads = 2;
  int64_t vocab = 151936, lora = 0;
  bool before_all = false;
  int child_prefix = 0, child_group = 0, child_after = -1;
  app.add_option("--prefixes", prefixes,
                 "Shared prompt lengths, comma-separated (default 1024,4096,16521,32768)");
  app.add_option("--groups", groups, "Group sizes, comma-separated (default 1,4,8)");
  app.add_option("--preset", preset, "Model preset (default tiny)");
  app.add_option("--vocab", vocab, "Vocabulary (default 151936, Qwen3's)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--lora", lora, "LoRA rank (default 0: full fine-tuning)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  app.add_option("--threads", threads, "Intra-op threads (default 2)")->check(CLI::Range(1, 256));
  app.add_flag("--before-all", before_all,
               "Also run the 'before' cells costlier than 8 samples x 16521 tokens (G x P^2 beyond "
               "it: many minutes)");
  bool checkpointing = false;
  int64_t layers = 0;
  app.add_option("--layers", layers,
                 "Decoder layers instead of the preset's (memory per layer, measured on fewer)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  int64_t attention_max = 16384;
  app.add_flag("--checkpointing", checkpointing,
               "Activation checkpointing in every cell (before and after)");
  app.add_option("--attention-max", attention_max,
                 "Longest sequence of the attention-alone table (default 16384; 0 skips the table)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--child-prefix", child_prefix)->group("");
  app.add_option("--child-group", child_group)->group("");
  app.add_option("--child-after", child_after)->group("");
  if (auto code = cli.parse(argc, argv)) return *code;
  if (child_after >= 0) {
    return run_child(preset, vocab, lora, child_prefix, child_group, child_after == 1, threads,
                     child_prefix <= 4096, checkpointing, layers);
  }
  if (cli.smoke()) {
    prefixes = "64";
    groups = "1,3";
    vocab = 512;
  }
  const std::string self = "/proc/" + std::to_string(::getpid()) + "/exe";
  std::ostringstream table;
  char line[512];
  std::snprintf(line, sizeof(line),
                "`%s` preset%s%s%s, vocabulary %lld, %d threads; a group of G samples sharing a "
                "P-token prompt, each "
                "with a 12-token user message and 32 trained tokens; one `Trainer::train_step` per "
                "cell, each cell "
                "in a fresh process (peak RSS its own; cells of 4k tokens or less after one "
                "warm-up step). Load "
                "average at the start: %s.\n\n",
                preset.c_str(), lora > 0 ? (", LoRA rank " + std::to_string(lora)).c_str() : "",
                checkpointing ? ", activation checkpointing" : "",
                layers > 0 ? (", " + std::to_string(layers) + " decoder layers").c_str() : "",
                static_cast<long long>(vocab), threads, bench::load_average_text().c_str());
  table << line;
  table << "| prompt P | group G | tokens | before s | after s | speed-up | before peak GB | after "
           "peak GB |\n"
           "|---|---|---|---|---|---|---|---|\n";
  for (int p : parse_list(prefixes)) {
    for (int g : parse_list(groups)) {
      const std::string common =
          "--preset " + preset + " --vocab " + std::to_string(vocab) + " --lora " +
          std::to_string(lora) + " --threads " + std::to_string(threads) + " --child-prefix " +
          std::to_string(p) + " --child-group " + std::to_string(g) +
          (checkpointing ? " --checkpointing" : "") + " --layers " + std::to_string(layers);
      const double tokens = static_cast<double>(g) * (p + 44);
      std::optional<Cell> before;
      const double cost = static_cast<double>(g) * p * p, headline = 8.0 * 16521.0 * 16521.0;
      if (before_all || cost <= headline) before = run_cell(self, common + " --child-after 0");
      const std::optional<Cell> after = run_cell(self, common + " --child-after 1");
      auto num = [](const std::optional<Cell>& c, double Cell::*field, const char* fmt) {
        if (!c) return std::string("—");
        char b[64];
        std::snprintf(b, sizeof(b), fmt, (*c).*field);
        return std::string(b);
      };
      std::string ratio = "—";
      if (before && after) {
        char b[32];
        std::snprintf(b, sizeof(b), "%.1fx", before->seconds / after->seconds);
        ratio = b;
      }
      std::snprintf(line, sizeof(line), "| %d | %d | %.0f | %s | %s | %s | %s | %s |\n", p, g,
                    tokens, num(before, &Cell::seconds, "%.2f").c_str(),
                    num(after, &Cell::seconds, "%.2f").c_str(), ratio.c_str(),
                    num(before, &Cell::peak_gb, "%.2f").c_str(),
                    num(after, &Cell::peak_gb, "%.2f").c_str());
      table << line;
      std::printf("%s", line);
      std::fflush(stdout);
    }
  }
  if (attention_max > 0)
    table << attention_table(preset, vocab, threads, cli.smoke() ? 256 : attention_max);
  std::snprintf(
      line, sizeof(line),
      "\n\"—\": not run (a 'before' cell costlier than G x P^2 = 8 x 16521^2 takes many minutes; "
      "--before-all runs it) or failed (its output is printed above).%s\n",
      "");
  table << line;
  std::printf("\n%s", table.str().c_str());
  if (cli.append()) {
    bench::append_to_benchmarks(
        "Trainer: long shared prompts, before vs after (bench/train/long_context_bench)",
        table.str());
  }
  return 0;
}
