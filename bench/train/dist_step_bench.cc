// Data-parallel training step: 1 rank (1 thread) on the whole batch vs 2 ranks (2 processes on
// loopback, a c10d Gloo group, 1 thread each) on its halves (split_batch), measured in one run on
// the `tiny` preset. Also times the all-reduce of one step's gradients alone. Prints a table and
// appends it to docs/benchmarks.md (--no-append to skip; --smoke for a seconds-long check; --steps
// N). The bench runs itself as the two workers (--worker).
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <ctime>
#include <thread>

#include "ajet-engine/dist_flags.h"
#include "bench_cli.h"
#include "model/blas_kernel.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "train/dist.h"
#include "train/trainer.h"
#include "train_data/dist_split.h"

extern char** environ;

namespace {

using namespace ajet;
using Clock = std::chrono::steady_clock;

struct Shape {
  int groups = 8, per_group = 4, prompt = 96, completion = 64;
  int64_t vocab = 4096;
};

// GRPO-shaped: each group shares a prompt; completions of 16..completion tokens; rewards 0 / 1.
train_data::Batch make_batch(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  train_data::Batch b;
  for (int g = 0; g < s.groups; ++g) {
    std::vector<int32_t> prompt(static_cast<size_t>(s.prompt));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(s.vocab));
    for (int e = 0; e < s.per_group; ++e) {
      train_data::TrainSample t;
      t.episode_uuid = "ep-" + std::to_string(g) + "-" + std::to_string(e);
      t.task_id = "task-" + std::to_string(g);
      t.reward = static_cast<double>(rng() % 2);
      t.token_ids = prompt;
      t.loss_mask.assign(prompt.size(), 0);
      const int len = 16 + static_cast<int>(rng() % static_cast<uint64_t>(s.completion - 15));
      for (int k = 0; k < len; ++k) {
        t.token_ids.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(s.vocab)));
        t.loss_mask.push_back(1);
      }
      for (uint8_t m : t.loss_mask) t.logprobs.push_back(m ? -1.0f : 0.0f);
      b.samples.push_back(std::move(t));
    }
  }
  return b;
}

train_data::TrainerOptions bench_options() {
  train_data::TrainerOptions o;
  o.optim.lr = 1e-5;
  o.shuffle = false;
  return o;
}

double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Step times (s) of `steps` train_steps after one warm-up step; with a collective, also the median
// time of an all-reduce of tensors shaped like the gradients.
std::vector<double> run_steps(train::Trainer& trainer, const train_data::Batch& batch, int steps,
                              train::Collective* c, double* all_reduce_s, double* cpu_s) {
  trainer.train_step(batch);
  std::vector<double> times, cpu;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    trainer.train_step(batch);
    cpu.push_back(cpu_seconds() - c0);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  *cpu_s = median(cpu);
  if (c != nullptr && all_reduce_s != nullptr) {
    std::vector<torch::Tensor> grads;
    for (auto& [name, p] : trainer.trainable_parameters()) grads.push_back(torch::ones_like(p));
    std::vector<double> ar;
    for (int i = 0; i < std::max(3, steps); ++i) {
      const auto t0 = Clock::now();
      c->all_reduce_sum(grads);
      ar.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    *all_reduce_s = median(ar);
  }
  return times;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  bench::BenchCli cli("train_dist_step_bench",
                      "1 rank vs 2 data-parallel ranks: one GRPO step on the tiny preset");
  CLI::App& app = cli.app();
  train_data::DistOptions dist;
  engine_cli::add_dist_flags(app, dist);
  bool worker = false;
  int steps = 5;
  std::string model_dir, out;
  app.add_flag("--worker", worker, "Run as one rank (used by the bench itself)");
  app.add_option("--model", model_dir, "Worker: model directory");
  app.add_option("--out", out, "Worker: result file");
  app.add_option("--steps", steps, "Timed steps (after one warm-up)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  if (auto code = cli.parse(argc, argv)) return *code;
  const bool smoke = cli.smoke();
  Shape shape;
  if (smoke) {
    shape.groups = 2;
    shape.prompt = 16;
    shape.completion = 20;
    steps = 1;
  }
  torch::set_num_threads(1);
  try {
    if (worker) {
      const auto placement = train_data::resolve_placement(dist);
      auto model = model::load_model_dir(model_dir);
      const train_data::TrainerOptions o = bench_options();
      const auto parts =
          train_data::split_batch(make_batch(shape, 1), placement.world_size, o.advantage);
      const auto& mine = parts[static_cast<size_t>(placement.rank)];
      train::Trainer trainer(model, o);
      auto collective = train::make_collective(placement);
      trainer.set_collective(collective);
      double ar = 0, cpu = 0;
      auto times = run_steps(trainer, mine, steps, collective.get(), &ar, &cpu);
      std::ofstream f(out);
      f << median(times) << " " << ar << " " << mine.tokens() << " " << cpu << "\n";
      return 0;
    }

    const auto dir =
        std::filesystem::temp_directory_path() / ("ajet_dist_bench_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto config = model::preset_config("tiny", shape.vocab);
    {
      model::Qwen2Model m(config);
      model::save_model_dir(m, dir / "model");
    }
    const train_data::Batch batch = make_batch(shape, 1);

    // 1 rank, whole batch.
    auto model = model::load_model_dir(dir / "model");
    train::Trainer single(model, bench_options());
    double one_cpu = 0;
    const double one = median(run_steps(single, batch, steps, nullptr, nullptr, &one_cpu));

    // 2 ranks, 2 processes.
    const std::string self = std::filesystem::canonical("/proc/self/exe").string();
    const std::string port = std::to_string(free_port());
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
      pids.push_back(
          spawn({self, "--worker", "--model", (dir / "model").string(), "--out",
                 (dir / ("r" + std::to_string(r))).string(), "--steps", std::to_string(steps),
                 "--nnodes", "2", "--node-rank", std::to_string(r), "--master-addr", "127.0.0.1",
                 "--master-port", port, "--dist-timeout", "600", smoke ? "--smoke" : "--no-append"},
                (dir / ("r" + std::to_string(r) + ".log")).string()));
    }
    double two = 0, ar = 0, two_cpu = 0;
    std::vector<int64_t> tokens;
    for (int r = 0; r < 2; ++r) {
      int status = 0;
      ::waitpid(pids[static_cast<size_t>(r)], &status, 0);
      std::ifstream f(dir / ("r" + std::to_string(r)));
      double t = 0, a = 0, cpu = 0;
      int64_t n = 0;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || !(f >> t >> a >> n >> cpu)) {
        std::ifstream log(dir / ("r" + std::to_string(r) + ".log"));
        std::stringstream ss;
        ss << log.rdbuf();
        std::fprintf(stderr, "rank %d failed:\n%s\n", r, ss.str().c_str());
        return 1;
      }
      two = std::max(two, t);  // a step ends when the slower rank ends
      ar = std::max(ar, a);
      two_cpu = std::max(two_cpu, cpu);
      tokens.push_back(n);
    }
    std::filesystem::remove_all(dir);

    std::ostringstream table;
    char line[256];
    table << "| ranks | threads/rank | tokens/rank | median step wall (s) | step CPU/rank (s) | "
             "tokens/s (wall) | speedup (wall) |\n"
             "|---|---|---|---|---|---|---|\n";
    std::snprintf(line, sizeof line, "| 1 | 1 | %zu | %.3f | %.3f | %.0f | 1.00 |\n",
                  batch.tokens(), one, one_cpu, batch.tokens() / one);
    table << line;
    std::snprintf(line, sizeof line, "| 2 | 1 | %lld / %lld | %.3f | %.3f | %.0f | %.2f |\n",
                  static_cast<long long>(tokens[0]), static_cast<long long>(tokens[1]), two,
                  two_cpu, batch.tokens() / two, one / two);
    table << line;
    int64_t params = 0;
    for (auto& [name, p] : single.trainable_parameters()) params += p.numel();
    std::snprintf(line, sizeof line,
                  "\nModel `tiny` (vocab %lld, %.2f M weights), batch %d groups x %d episodes (%zu "
                  "tokens), %d timed steps "
                  "after a warm-up. All-reduce of one step's gradients (%.1f MB float32) alone: "
                  "%.1f ms. Machine: %u cores.\n",
                  static_cast<long long>(shape.vocab), params / 1e6, shape.groups, shape.per_group,
                  batch.tokens(), steps, params * 4 / 1e6, ar * 1e3,
                  std::thread::hardware_concurrency());
    table << line;
    std::printf("%s", table.str().c_str());
    if (cli.append()) {
      bench::append_to_benchmarks(
          "Trainer: data parallel, 1 rank vs 2 ranks (bench/train/dist_step_bench)", table.str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_step_bench: %s\n", e.what());
    return 1;
  }
}
