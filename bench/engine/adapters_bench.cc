// Named LoRA adapters on one engine (engine/adapters.h), the issue 43 numbers in one run on one
// in-process engine (the real InferenceEngine and AdapterSet, no RPC):
//   memory: the process's RSS over the base engine after 1, 2 and 8 adapters, each created and
//           trained once (so its AdamW moments exist), against the bytes of one more copy of the
//           base (what a second engine would hold);
//   train:  one train_step whose S samples all name one adapter vs the same S samples spread over
//           8 adapters (each adapter its own trainer on S/8 samples), interleaved (target <= 1.2x);
//   decode: R greedy requests all on one adapter vs spread over 8 adapters, interleaved, generated
//           tokens/s (target >= 0.8x);
//   budget: waves of requests cycling over the 8 trained adapters (each wave on 2 of them) with
//           every adapter in its slot vs under a memory budget that holds 4 (so every wave brings
//           2 back from disk: LRU's worst case), tokens/s, failed requests, moves out and back.
// Options: --preset (small), --rank (8), --samples (32), --rounds (3), --requests (64),
// --max-tokens (16), --threads (2). Appends the tables with the date to docs/benchmarks.md unless
// --no-append; --smoke runs the micro preset once and appends nothing.
#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "engine/adapters.h"
#include "infer/engine.h"
#include "model/compute.h"
#include "model/presets.h"
#include "train_data/batch.h"

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The process's resident set (VmRSS), bytes, after the allocator gave its free pages back (what is
// in use, not what malloc keeps for later).
int64_t rss_bytes() {
  ::malloc_trim(0);
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

double mb(int64_t bytes) { return double(bytes) / (1 << 20); }

// S samples in groups of 4 (one task per group, rewards 0, 1, 0.5, 2): a 48-token prompt, then a
// 32-token response; `names[s]` is sample s's adapter.
std::pair<train_data::Batch, std::vector<std::string>> make_batch(
    int samples, int64_t vocab, const std::vector<std::string>& adapter_of_group, int salt) {
  train_data::Batch b;
  std::vector<std::string> names;
  std::mt19937 rng{uint32_t(salt)};
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
  for (int s = 0; s < samples; ++s) {
    train_data::TrainSample t;
    for (int i = 0; i < 80; ++i) {
      t.token_ids.push_back(token(rng));
      t.loss_mask.push_back(i >= 48 ? 1 : 0);
      t.logprobs.push_back(i >= 48 ? -2.0f : 0.0f);
    }
    const int group = s / 4;
    t.task_id = "task-" + std::to_string(group);
    t.episode_uuid = "ep-" + std::to_string(salt) + "-" + std::to_string(s);
    const double rewards[] = {0.0, 1.0, 0.5, 2.0};
    t.reward = rewards[s % 4];
    b.samples.push_back(std::move(t));
    names.push_back(adapter_of_group[size_t(group) % adapter_of_group.size()]);
  }
  return {b, names};
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "small";
  int rank = 8, samples = 32, rounds = 3, requests = 64, max_tokens = 16, threads = 2;
  bench::BenchCli cli("engine_adapters_bench",
                      "Named LoRA adapters on one engine: memory for 1, 2, 8 adapters; a train "
                      "step and decode over 8 adapters vs 1");
  CLI::App& app = cli.app();
  app.add_option("--preset", preset, "Model preset (default small)")
      ->check(CLI::IsMember({"micro", "tiny", "small", "qwen2.5-0.5b"}));
  app.add_option("--rank", rank, "LoRA rank of every adapter (default 8)")
      ->check(CLI::Range(1, 256));
  app.add_option("--samples", samples, "Samples of a train step, a multiple of 32 (default 32)")
      ->check(CLI::Range(8, 4096));
  app.add_option("--rounds", rounds, "Interleaved timed runs each way (default 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--requests", requests, "Greedy requests decoding at once (default 64)")
      ->check(CLI::Range(8, 512));
  app.add_option("--max-tokens", max_tokens, "Tokens per request (default 16)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--threads", threads, "Intra-op threads (default 2)")->check(CLI::Range(1, 256));
  if (auto code = cli.parse(argc, argv)) return *code;
  if (cli.smoke()) {
    preset = "micro";
    samples = 32;
    rounds = 1;
    requests = 16;
    max_tokens = 4;
  }
  model::configure_threads(threads);
  const int64_t vocab = 32000;
  torch::manual_seed(1);
  model::Qwen2Model m(model::preset_config(preset, vocab));
  int64_t base_bytes = 0;
  for (const auto& [name, t] : m->hf_named_parameters()) base_bytes += int64_t(t.nbytes());
  infer::InferenceEngineOptions eo;
  eo.cache_bytes = int64_t(256) << 20;
  eo.max_running = std::max(64, requests);
  eo.max_batch_tokens = 2048;
  eo.quiet = true;
  infer::InferenceEngine engine(m, eo);
  engine::ModelInfo info;
  info.path = "preset-" + preset;
  info.config = m->config();
  engine::TrainingOptions to;
  to.threads = threads;
  // Where adapters move out to under the budget: a directory of its own, removed at the end.
  char spill_template[] = "/tmp/ajet_adapters_bench_XXXXXX";
  if (::mkdtemp(spill_template) == nullptr) {
    std::perror("engine_adapters_bench: mkdtemp");
    return 1;
  }
  to.checkpoint_base_dir = spill_template;
  struct RemoveAtExit {
    std::filesystem::path dir;
    ~RemoveAtExit() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove_at_exit{spill_template};
  engine::AdapterSet adapters(engine, info, to);
  auto create = [&](int k) {
    adapters.create(Json{{"name", "a" + std::to_string(k)}, {"rank", rank}, {"alpha", 2 * rank}});
  };
  // A request on `name`'s adapter, holding it in its slot until the request ends (as the engine's
  // RPC service does): at once when it is in, else once the loader brought it back.
  auto generate_on = [&](const std::string& name, batching::GenerateRequest g) {
    auto result = std::make_shared<std::promise<infer::GenerateResult>>();
    std::future<infer::GenerateResult> out = result->get_future();
    adapters.acquire(
        name,
        [&engine, result, g](engine::AdapterLease lease) mutable {
          g.adapter_slot = lease.slot;
          g.adapter_uid = lease.uid;
          auto running =
              std::make_shared<std::future<infer::GenerateResult>>(engine.generate(std::move(g)));
          std::thread([running, result, lease = std::move(lease)]() mutable {
            result->set_value(running->get());
            lease.pin.reset();
          }).detach();
        },
        [result](const Error& e) { result->set_exception(std::make_exception_ptr(e)); });
    return out;
  };
  auto train = [&](const std::vector<std::string>& names, int salt) {
    auto [b, per_sample] = make_batch(samples, vocab, names, salt);
    return adapters.train_step(b, per_sample);
  };

  // ---- memory ----
  // A warm-up adapter trains once and is removed before the baseline is read, so one-time costs
  // (thread pools, lazily made tables) are not counted as the first adapter's.
  const int64_t rss_engine = rss_bytes();
  adapters.create(Json{{"name", "warm-up"}, {"rank", rank}, {"alpha", 2 * rank}});
  train({"warm-up"}, 99);
  adapters.remove(Json{{"name", "warm-up"}});
  const int64_t rss0 = rss_bytes();
  std::printf("base engine RSS %.1f MB; after one train step (workspace kept) %.1f MB\n",
              mb(rss_engine), mb(rss0));
  std::ostringstream memory;
  memory << "| adapters | RSS over the warmed-up engine | per adapter | adapter + AdamW moments "
            "(listed) | one more base copy |\n|---|---|---|---|---|\n";
  int made = 0;
  for (int n : {1, 2, 8}) {
    std::vector<std::string> fresh;
    for (; made < n; ++made) {
      create(made);
      fresh.push_back("a" + std::to_string(made));
    }
    train(fresh, 100 + n);  // each new adapter trains once: its trainer and moments exist
    const int64_t over = rss_bytes() - rss0;
    const Json list = adapters.list();
    const int64_t listed = list["adapters"][0]["bytes"].get<int64_t>() +
                           list["adapters"][0]["optimizer_bytes"].get<int64_t>();
    char row[256];
    std::snprintf(row, sizeof row, "| %d | %.1f MB | %.1f MB | %.2f MB | %.1f MB |\n", n, mb(over),
                  mb(over) / n, mb(listed), mb(base_bytes));
    memory << row;
    std::printf(
        "%d adapters: RSS +%.1f MB over the base engine (%.1f MB each); one adapter with its "
        "moments %.2f MB; the base %.1f MB\n",
        n, mb(over), mb(over) / n, mb(listed), mb(base_bytes));
  }

  // ---- train step: one adapter vs 8 ----
  const std::vector<std::string> one = {"a0"};
  const std::vector<std::string> eight = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"};
  std::vector<double> t_one, t_eight;
  train(one, 1);  // warm-up
  train(eight, 2);
  for (int r = 0; r < rounds; ++r) {
    auto start = Clock::now();
    train(one, 10 + r);
    t_one.push_back(seconds(start));
    start = Clock::now();
    train(eight, 20 + r);
    t_eight.push_back(seconds(start));
  }
  const double train_ratio = median(t_eight) / median(t_one);
  std::printf("train step of %d samples: one adapter %.3f s, 8 adapters %.3f s (%.2fx)\n", samples,
              median(t_one), median(t_eight), train_ratio);

  // ---- decode: one adapter vs 8 ----
  auto decode = [&](bool mixed, int salt) {
    std::mt19937 rng{uint32_t(salt)};
    std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
    std::vector<std::future<infer::GenerateResult>> futures;
    const auto start = Clock::now();
    for (int i = 0; i < requests; ++i) {
      batching::GenerateRequest g;
      g.id = "r" + std::to_string(salt) + "-" + std::to_string(i);
      for (int p = 0; p < 32; ++p) g.prompt.push_back(token(rng));
      g.max_tokens = max_tokens;
      g.temperature = 0;
      futures.push_back(generate_on(mixed ? eight[size_t(i) % 8] : one[0], std::move(g)));
    }
    int64_t tokens = 0;
    for (auto& f : futures) {
      infer::GenerateResult r = f.get();
      if (r.error) throw *r.error;
      for (const auto& s : r.samples) tokens += int64_t(s.tokens.size());
    }
    return double(tokens) / seconds(start);
  };
  decode(false, 1);
  decode(true, 2);
  std::vector<double> d_one, d_eight;
  for (int r = 0; r < rounds; ++r) {
    d_one.push_back(decode(false, 10 + r));
    d_eight.push_back(decode(true, 20 + r));
  }
  const double decode_ratio = median(d_eight) / median(d_one);
  std::printf(
      "decode of %d requests x %d tokens: one adapter %.0f tokens/s, 8 adapters %.0f (%.2fx)\n",
      requests, max_tokens, median(d_one), median(d_eight), decode_ratio);

  // ---- budget: waves over the 8 adapters, all in vs 4 in ----
  const Json before = adapters.list();
  const int64_t per_adapter = before["adapters"][0]["resident_bytes"].get<int64_t>();
  auto waves = [&](int salt, int64_t& failed) {
    std::mt19937 rng{uint32_t(salt)};
    std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
    int64_t tokens = 0;
    const auto start = Clock::now();
    for (int wave = 0; wave < 8; ++wave) {  // wave w on adapters 2w and 2w+1 (mod 8)
      std::vector<std::future<infer::GenerateResult>> futures;
      for (int i = 0; i < requests / 4; ++i) {
        batching::GenerateRequest g;
        g.id = "w" + std::to_string(salt) + "-" + std::to_string(wave) + "-" + std::to_string(i);
        for (int p = 0; p < 32; ++p) g.prompt.push_back(token(rng));
        g.max_tokens = max_tokens;
        g.temperature = 0;
        futures.push_back(generate_on(eight[size_t(2 * wave + i % 2) % 8], std::move(g)));
      }
      for (auto& f : futures) {
        try {
          infer::GenerateResult r = f.get();
          if (r.error) {
            ++failed;
            continue;
          }
          for (const auto& s : r.samples) tokens += int64_t(s.tokens.size());
        } catch (const std::exception&) {
          ++failed;
        }
      }
    }
    return double(tokens) / seconds(start);
  };
  int64_t failed_all = 0, failed_budget = 0;
  std::vector<double> w_all, w_budget;
  int64_t loads_budget = 0;
  for (int r = 0; r < rounds; ++r) {
    adapters.set_memory_budget(0);
    w_all.push_back(waves(30 + r, failed_all));
    adapters.set_memory_budget(4 * per_adapter + per_adapter / 2);
    const int64_t loads0 = adapters.list()["adapter_memory"]["loads"].get<int64_t>();
    w_budget.push_back(waves(30 + r, failed_budget));
    loads_budget += adapters.list()["adapter_memory"]["loads"].get<int64_t>() - loads0;
  }
  adapters.set_memory_budget(0);
  const double budget_ratio = median(w_budget) / median(w_all);
  const double loads_per_round = double(loads_budget) / rounds;
  std::printf(
      "waves over 8 adapters: all in their slots %.0f tokens/s, 4 of 8 in (%.1f MB budget) %.0f "
      "tokens/s (%.2fx); %.1f adapters brought back per run; failed requests %lld and %lld\n",
      median(w_all), mb(4 * per_adapter + per_adapter / 2), median(w_budget), budget_ratio,
      loads_per_round, (long long)failed_all, (long long)failed_budget);

  std::ostringstream speed;
  char row[512];
  speed << "| what | one adapter | 8 adapters | ratio | target |\n|---|---|---|---|---|\n";
  std::snprintf(row, sizeof row,
                "| train step, %d samples | %.3f s | %.3f s | **%.2fx** | <= 1.2x |\n", samples,
                median(t_one), median(t_eight), train_ratio);
  speed << row;
  std::snprintf(
      row, sizeof row,
      "| decode, %d requests x %d tokens | %.0f tokens/s | %.0f tokens/s | **%.2fx** | >= "
      "0.8x |\n",
      requests, max_tokens, median(d_one), median(d_eight), decode_ratio);
  speed << row;
  std::snprintf(row, sizeof row,
                "| waves of %d requests x %d tokens cycling over 8 adapters: all in their slots vs "
                "a budget for 4 (%.1f adapters brought back per run) | %.0f tokens/s | %.0f "
                "tokens/s | **%.2fx** | 0 failed requests: %lld |\n",
                requests / 4, max_tokens, loads_per_round, median(w_all), median(w_budget),
                budget_ratio, (long long)(failed_all + failed_budget));
  speed << row;
  std::printf("\n%s\n%s", memory.str().c_str(), speed.str().c_str());
  if (cli.append()) {
    std::ostringstream body;
    body << "`engine_adapters_bench`: the `" << preset << "` preset (vocab 32000, base "
         << std::fixed << std::setprecision(1) << mb(base_bytes)
         << " MB float32), one in-process InferenceEngine with engine::AdapterSet (the real "
            "serving and training paths, no RPC), LoRA rank "
         << rank << " on every linear layer, backbone torch, " << threads << " threads; "
         << model::describe_compute_backend() << "; load average " << bench::load_average_text()
         << ".\n\nMemory: the process's RSS, read after `malloc_trim(0)` (memory in use, not what "
            "the allocator keeps free), once each adapter was created and trained once, over the "
            "engine (model + 256 MB KV cache: "
         << mb(rss_engine) << " MB) after a warm-up adapter trained one step and was removed ("
         << mb(rss0)
         << " MB). The listed bytes are the adapter's A and B and its two AdamW moments; the rest "
            "of the growth is each adapter's own model object, its trainer, and the serving "
            "copy of its A and B.\n\n"
         << memory.str() << "\nSpeed: medians of " << rounds
         << " interleaved runs. Train: the same " << samples
         << " samples (groups of 4, 80 tokens each) all on one adapter, or spread over 8 "
            "adapters (each its own trainer and optimizer step on its share). Decode: greedy, "
            "32-token random prompts, all requests submitted at once. Budget: 8 waves, wave w "
            "submitting its requests at once on adapters 2w and 2w+1 (mod 8) and waiting for "
            "them, first with every adapter in its slot, then under "
            "`AdapterSet::set_memory_budget` of 4.5 trained adapters, so that each wave's two "
            "adapters are the least recently used and come back from disk (PEFT files and AdamW "
            "state written on the way out, read on the way back, while the wave's requests "
            "wait).\n\n"
         << speed.str();
    bench::append_to_benchmarks(
        "Named LoRA adapters on one engine (bench/engine/adapters_bench.cc)", body.str());
  }
  return 0;
}
