// Latency the engine RPC adds per request: the same greedy generate requests (max_tokens 1 and 16,
// 1 and 8 in flight) run on an in-process InferenceEngine and through a Unix socket to an
// `ajet-engine serve` process on the same model with the same settings, in one run, interleaved in
// rounds. Prints p50/p99 per request, the difference and the ratio, and appends the table to
// docs/benchmarks.md (--no-append skips that; --smoke runs a few requests and never appends).

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "common/log.h"
#include "engine/runtime.h"
#include "infer/engine.h"
#include "model/blas_kernel.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "model/qwen2.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "rpc/serve_child.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  int threads = 2;
  std::string preset = "tiny";
  int prompt_tokens = 16;
  int rounds = 3;
  bool smoke = false;
};

std::vector<int32_t> prompt_for(int index, int length) {
  std::vector<int32_t> p;
  for (int i = 0; i < length; ++i) p.push_back((index * 131 + i * 17 + 1) % 256);
  return p;
}

// Latencies (ms) of `count` requests, `concurrency` in flight, each from `run(index)` which blocks
// until its request is finished.
std::vector<double> measure(int count, int concurrency, const std::function<void(int)>& run) {
  std::vector<double> latencies(static_cast<size_t>(count));
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (int i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
        const auto t0 = Clock::now();
        run(i);
        latencies[static_cast<size_t>(i)] =
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
    });
  }
  for (auto& w : workers) w.join();
  return latencies;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  Args args;
  ajet::bench::BenchCli cli(
      "rpc_overhead",
      "Engine RPC overhead per request: an in-process engine against `ajet-engine serve` over a "
      "Unix socket");
  cli.app()
      .add_option("--threads", args.threads, "Compute threads of each engine (default 2)")
      ->check(CLI::Range(1, 256));
  cli.app()
      .add_option("--preset", args.preset, "Model preset (default tiny)")
      ->check(CLI::IsMember({"micro", "tiny", "small"}));
  if (auto code = cli.parse(argc, argv)) return *code;
  args.smoke = cli.smoke();
  ajet::set_log_level("warn");
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path engine_binary = self.parent_path() / "ajet-engine";
  if (!fs::exists(engine_binary)) {
    std::fprintf(stderr, "rpc_overhead: %s not found (build the ajet-engine target)\n",
                 engine_binary.c_str());
    return 1;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ajet_rpc_overhead_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  // A random model of the preset, vocab 1024 (no tokenizer needed: requests are token ids).
  {
    ajet::model::Qwen2Model model(ajet::model::preset_config(args.preset, 1024));
    ajet::model::init_weights(model, 1);
    ajet::model::save_model_dir(model, dir / "model");
  }
  ajet::engine::EngineOptions options;
  options.model_dir = dir / "model";
  options.threads = args.threads;
  options.kv_cache_mb = 64;

  int rc = 0;
  std::ostringstream table;
  std::string backend;
  try {
    ajet::engine::EngineRuntime direct = ajet::engine::start_engine(options);
    backend = direct.compute.backend;
    ajet::rpc::ServeChild serve(
        {engine_binary.string(), "serve", "--model", options.model_dir.string(), "--listen",
         "unix:" + (dir / "engine.sock").string(), "--threads", std::to_string(args.threads),
         "--kv-cache-mb", "64"},
        dir / "serve.log");
    ajet::rpc::Client client(serve.wait_ready());
    client.connect();

    auto run_direct = [&](int index, int max_tokens) {
      ajet::batching::GenerateRequest r;
      r.id = "bench-" + std::to_string(index) + "-" + std::to_string(max_tokens);
      r.prompt = prompt_for(index, args.prompt_tokens);
      r.max_tokens = max_tokens;
      r.temperature = 0;
      auto result = direct.engine->generate(std::move(r)).get();
      if (result.error) throw *result.error;
    };
    auto run_rpc = [&](int index, int max_tokens) {
      ajet::rpc::GenerateRequest r;
      r.prompt = prompt_for(index, args.prompt_tokens);
      r.max_tokens = max_tokens;
      r.temperature = 0;
      auto done = std::make_shared<std::promise<std::optional<ajet::Error>>>();
      auto future = done->get_future();
      client.start(ajet::rpc::encode_generate_request(r), [done](ajet::rpc::Frame&& frame) {
        if (frame.kind == ajet::rpc::FrameKind::kDone) done->set_value(std::nullopt);
        if (frame.kind == ajet::rpc::FrameKind::kError)
          done->set_value(ajet::rpc::frame_error(frame));
      });
      if (auto error = future.get()) throw *error;
    };

    table << "| max_tokens | in flight | requests | direct p50 ms | direct p99 ms | rpc p50 ms | "
             "rpc p99 ms "
             "| p50 diff ms | p50 ratio | p99 diff ms | p99 ratio |\n"
          << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    std::printf("preset %s, %d threads, prompt %d tokens, greedy; %s\n", args.preset.c_str(),
                args.threads, args.prompt_tokens, backend.c_str());
    for (int max_tokens : {1, 16}) {
      for (int concurrency : {1, 8}) {
        const int per_round = args.smoke ? 8 : (max_tokens == 1 ? 200 : 48);
        const int rounds = args.smoke ? 1 : args.rounds;
        measure(8, concurrency, [&](int i) { run_direct(i, max_tokens); });  // warm-up both paths
        measure(8, concurrency, [&](int i) { run_rpc(i, max_tokens); });
        std::vector<double> d, r;
        for (int round = 0; round < rounds; ++round) {
          auto a = measure(per_round, concurrency, [&](int i) { run_direct(i, max_tokens); });
          auto b = measure(per_round, concurrency, [&](int i) { run_rpc(i, max_tokens); });
          d.insert(d.end(), a.begin(), a.end());
          r.insert(r.end(), b.begin(), b.end());
        }
        const double d50 = percentile(d, 0.5), d99 = percentile(d, 0.99);
        const double r50 = percentile(r, 0.5), r99 = percentile(r, 0.99);
        char row[512];
        std::snprintf(
            row, sizeof row,
            "| %d | %d | %zu | %.3f | %.3f | %.3f | %.3f | %+.3f | %.2fx | %+.3f | %.2fx |\n",
            max_tokens, concurrency, d.size(), d50, d99, r50, r99, r50 - d50, r50 / d50, r99 - d99,
            r99 / d99);
        table << row;
        std::printf("%s", row);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpc_overhead: %s (engine log: %s)\n", e.what(),
                 (dir / "serve.log").c_str());
    rc = 1;
  }
  if (rc == 0) {
    std::printf("\n%s", table.str().c_str());
    if (cli.append()) {
      std::ostringstream body;
      body << "The same greedy `generate` requests (" << args.prompt_tokens
           << "-token prompts, preset " << args.preset
           << ", vocab 1024, float32, random weights)\nrun on an in-process `InferenceEngine` "
              "(direct) and through a "
           << "Unix socket to an `ajet-engine serve`\nprocess (rpc: frames, socket, server I/O "
              "thread, tokens events "
           << "streamed back per token), with the same\nsettings, " << args.threads
           << " compute threads each, interleaved in " << args.rounds
           << " rounds. Latency = submit to final frame.\n"
           << "Compute: " << backend << "\n\n"
           << table.str();
      ajet::bench::append_to_benchmarks(
          "Engine RPC overhead per request (bench/engine/rpc_overhead)", body.str());
    }
  }
  fs::remove_all(dir);
  return rc;
}
