// multi_server_bench: one client driving N swarm servers (multi-model training: one server per
// model), measured in one run. N real `ajet-swarm start` fronts on loopback, each with the echo
// engine test double (ajet-echo-engine: deterministic, no model, so the client and the fronts are
// what is timed) and the debug backbone (nothing trains, global_step stays: no weight update aborts
// a group) with a batch of 128 episodes that closes and is recorded as it fills. The batch must
// keep turning over: the front rescans the whole batch at every end, so a batch that never fills
// makes each end slower than the last.
//  1. Throughput: W worker threads, each a closed loop of one episode group — claim on every
//  server,
//     one chat call per server, end — for N = 1 (plain claim + SwarmClient::end_episode, the
//     baseline), 2 and 4 (MultiEpisode::begin / end: prepare everywhere, commit on the coordinator,
//     then on the rest). Groups/s and episodes/s (N per group).
//  2. The latency of ending, one episode at a time, interleaved so load drifts hit every row alike:
//     end_episode on one server vs MultiEpisode::end on 1, 2 and 4 servers; the group protocol's
//     overhead = group end p50 - single end p50 (issue 17's target: <= 2 ms); and the same protocol
//     driven by hand, each phase timed (prepare, coordinator commit, participants' commit).
// --scratch puts the fronts' stores elsewhere (/dev/shm: no fsync cost) to tell disk from protocol.
// Servers, engines and this client share the machine's cores; the report says how many and the
// load. Appends a dated section to docs/benchmarks.md (not with --smoke or --no-append).
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench_cli.h"
#include "client/multi_episode.h"
#include "client/openai_chat.h"
#include "client/swarm_client.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/subprocess.h"

namespace {

using namespace ajet;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct BenchOptions {
  std::vector<int> servers = {1, 2, 4};
  std::vector<int> workers = {1, 8};
  double seconds = 5;   // measured per throughput cell
  double warmup = 1;    // discarded before each cell
  int rounds = 300;     // latency rounds (each: one single end, one group end per N)
  std::string scratch;  // parent of the servers' --exp-dir (their stores); default the temp dir
  bool smoke = false;
  bool append = true;
};

// Fills o from the command line; a value means main() returns it (--help, a usage error).
std::optional<int> parse_bench_args(int argc, char** argv, BenchOptions& o) {
  ajet::bench::BenchCli cli(
      "multi_server_bench",
      "One client driving 1, 2 and 4 swarm servers: episode groups/s and the group end's overhead "
      "over a single-server end");
  CLI::App& app = cli.app();
  app.add_option("--servers", o.servers, "Comma-separated server counts (1 is always measured)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app.add_option("--workers", o.workers, "Comma-separated client worker counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  app.add_option("--seconds", o.seconds, "Seconds measured per throughput cell")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--warmup", o.warmup, "Seconds discarded before each cell")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--rounds", o.rounds, "Latency rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--scratch", o.scratch,
                 "Parent of the servers' --exp-dir (default: the temp directory)");
  if (auto code = cli.parse(argc, argv)) return code;
  o.smoke = cli.smoke();
  o.append = cli.append();
  if (o.smoke) {
    o.seconds = 0.5;
    o.warmup = 0.1;
    o.rounds = 10;
  }
  if (std::find(o.servers.begin(), o.servers.end(), 1) == o.servers.end())
    o.servers.insert(o.servers.begin(), 1);
  std::sort(o.servers.begin(), o.servers.end());
  return std::nullopt;
}

fs::path exe_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

// `ajet-swarm start` as a child whose output lines a thread collects. Spawned from main's thread:
// the child dies with it (PR_SET_PDEATHSIG), so a crashed benchmark leaves no servers behind.
class ServerProcess {
 public:
  // `peer`: the coordinator front (the first one), which this one may dial (--peer); "" for the
  // first.
  ServerProcess(const fs::path& exp_dir, const fs::path& engine, const std::string& peer) {
    std::vector<std::string> argv = {(exe_dir() / "ajet-swarm").string(), "start", "--port", "0",
                                     "--exp-dir", exp_dir.string(), "--engine", engine.string(),
                                     // one client drives the whole pool
                                     "--max-claims-per-client", "-1"};
    if (!peer.empty()) argv.insert(argv.end(), {"--peer", peer});
    Subprocess p = Subprocess::spawn(SpawnOptions{argv, {}, {}});
    pid_ = p.pid();
    reader_ = std::thread([this, sp = std::make_shared<Subprocess>(std::move(p))] {
      sp->wait([this](std::string line) {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(std::move(line));
        cv_.notify_all();
      });
      std::lock_guard<std::mutex> lock(mu_);
      exited_ = true;
      cv_.notify_all();
    });
    const std::string ready = wait_for_line("ajet-swarm ready:", 60s);
    url_ = "http://127.0.0.1:" + std::to_string(std::stoi(ready.substr(ready.find("(port ") + 6)));
  }
  ~ServerProcess() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    if (reader_.joinable()) reader_.join();
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  const std::string& url() const { return url_; }

 private:
  std::string wait_for_line(const std::string& needle, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::string found;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& l : lines_) {
        if (l.find(needle) != std::string::npos) found = l;
      }
      return !found.empty() || exited_;
    });
    if (found.empty()) {
      std::string all;
      for (const auto& l : lines_) all += l + "\n";
      throw std::runtime_error("ajet-swarm did not print '" + needle + "':\n" + all);
    }
    return found;
  }

  pid_t pid_ = -1;
  std::string url_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  bool exited_ = false;
  std::thread reader_;
};

// The fixture tokenizer (the echo engine needs no model), shared with front_bench.
fs::path bench_tokenizer() {
  const fs::path dir = exe_dir().parent_path() / "bench_fixture" / "tokenizer";
  if (!fs::exists(dir / "tokenizer.json")) {
    fs::remove_all(dir);
    CommandResult r = run_command(SpawnOptions{
        {(exe_dir() / "ajet").string(), "tokenizer", "train", "--corpus",
         (fs::path(AJET_SOURCE_DIR) / "tests/text/data/tokenizer_corpus.jsonl").string(),
         "--vocab-size", "400", "--out", dir.string()},
        {},
        {}});
    if (!exited_cleanly(r.status))
      throw std::runtime_error("ajet tokenizer train failed:\n" + r.output);
  }
  return dir;
}

// The debug backbone never trains, so no weight update aborts a group; a batch of 32 x 4 episodes
// (a usual size) closes by episode count and is recorded at once (ROLLING_POST lasts until the
// episodes running at the boundary have ended: a claim then waits a few ms).
std::string bench_config(const fs::path& tokenizer) {
  return "ajet:\n  backbone: debug\n  swarm_mode_sample_collection_method: "
         "rollout_until_finish_enough_episodes\n"
         "  model:\n    path: " +
         tokenizer.string() +
         "\n  data:\n    train_batch_size: 32\n    max_prompt_length: 256\n    "
         "max_response_length: 256\n"
         "  rollout:\n    max_env_worker: 64\n    max_model_len: 512\n    "
         "max_response_length_in_one_turn: 16\n"
         "    num_repeat: 4\n    temperature: 1.0\n  engine:\n    threads: 1\n    "
         "kv_cache_memory_mb: 16\n";
}

// A claim that finds the batch boundary (ROLLING_POST) retries within milliseconds, not seconds.
client::SwarmClientOptions bench_client_options() {
  client::SwarmClientOptions c;
  c.retry.status_poll = 0.005;
  c.retry.engine_busy = 0.005;
  c.retry.empty_pool = 0.005;
  c.retry.jitter = 0;
  return c;
}

client::ClaimOptions claim_options() {
  client::ClaimOptions c;
  c.discard_episode_timeout = 600;
  c.max_wait = 60;
  return c;
}

// One chat call of an agent on its model's server (a fresh connection, as an agent per episode
// makes).
void chat_once(const client::Episode& e) {
  client::ChatClient chat(e.base_url, e.api_key);
  chat.create(Json::array({client::user_message("hello model")}), nullptr, Json{{"max_tokens", 8}});
}

client::WorkflowOutput output_with(double reward) {
  client::WorkflowOutput out;
  out.reward = reward;
  return out;
}

// One rollout over `servers`: claim, one chat call per server, end. Returns the end's latency (µs).
// `group`: MultiEpisode (any N); otherwise a plain episode on servers[0] and end_episode.
double one_rollout(const std::vector<client::SwarmClient*>& servers, bool group, int64_t seq) {
  const std::string task = "task-" + std::to_string(seq % 32);
  if (!group) {
    client::Episode e = servers[0]->begin_episode(claim_options());
    chat_once(e);
    auto t0 = Clock::now();
    client::EndResult r = servers[0]->end_episode(task, e.episode_uuid, output_with(1));
    auto t1 = Clock::now();
    if (r != client::EndResult::kEnded)
      throw std::runtime_error("end_episode did not end the episode");
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  client::MultiEpisode g = client::MultiEpisode::begin(servers, claim_options());
  for (size_t i = 0; i < g.size(); ++i) chat_once(g.episode(i));
  std::vector<client::WorkflowOutput> outputs(servers.size(), output_with(1));
  auto t0 = Clock::now();
  g.end(task, outputs);
  auto t1 = Clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

// The same group end as MultiEpisode::end, by hand, timing its three phases (µs): prepare on every
// server at once, commit on the coordinator, commit on the participants at once. Also one command
// round trip without a store write (can_continue_episode) on the coordinator, for scale.
struct PhaseTimes {
  double prepare = 0, coordinator_commit = 0, participants_commit = 0, command_round_trip = 0;
  double decided = 0;  // prepare + coordinator commit: from here the group is committed everywhere
};

template <typename Fn>
void on_every_server(size_t n, Fn fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) throw std::runtime_error(e);
  }
}

PhaseTimes timed_group_end(const std::vector<client::SwarmClient*>& servers, int64_t seq) {
  const size_t n = servers.size();
  std::vector<client::Episode> episodes(n);
  for (size_t i = 0; i < n; ++i) {
    episodes[i] = servers[i]->begin_episode(claim_options());
    chat_once(episodes[i]);
  }
  const std::string task = "task-" + std::to_string(seq % 32);
  const std::string group_id = "bench-group-" + std::to_string(::getpid()) + "-" +
                               std::to_string(seq) + "-" + std::to_string(n);
  PhaseTimes t;
  auto t0 = Clock::now();
  servers[0]->can_continue_episode(episodes[0].episode_uuid);
  auto t1 = Clock::now();
  on_every_server(n, [&](size_t i) {
    client::GroupRole role;
    role.group_id = group_id;
    role.prepare_timeout = 60;
    if (i > 0) {
      role.coordinator_url = servers[0]->server_url();
      role.coordinator_episode_uuid = episodes[0].episode_uuid;
      role.coordinator_episode_key = episodes[0].api_key;
    }
    servers[i]->prepare_end_episode(task, episodes[i].episode_uuid, output_with(1), role);
  });
  auto t2 = Clock::now();
  servers[0]->commit_episode(episodes[0].episode_uuid);
  auto t3 = Clock::now();
  on_every_server(n - 1,
                  [&](size_t i) { servers[i + 1]->commit_episode(episodes[i + 1].episode_uuid); });
  auto t4 = Clock::now();
  auto us = [](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  t.command_round_trip = us(t1 - t0);
  t.prepare = us(t2 - t1);
  t.coordinator_commit = us(t3 - t2);
  t.participants_commit = us(t4 - t3);
  t.decided = us(t3 - t1);
  return t;
}

struct Latencies {
  std::vector<double> us;
  double pct(double p) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, size_t(p * double(us.size())))];
  }
};

struct Cell {
  int servers = 1;
  bool group = false;
  int workers = 1;
  double seconds = 0;
  int64_t groups = 0;
  int64_t errors = 0;
  std::string first_error;
  Latencies end;
};

// W closed-loop workers for warmup + seconds; counts the rollouts that finished inside the window.
Cell throughput(const std::vector<client::SwarmClient*>& servers, bool group, int workers,
                double warmup, double seconds) {
  Cell cell;
  cell.servers = int(servers.size());
  cell.group = group;
  cell.workers = workers;
  cell.seconds = seconds;
  const auto window_from = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(warmup));
  const auto window_to = window_from + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  std::mutex mu;
  std::atomic<int64_t> seq{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      Latencies mine;
      int64_t done = 0, errors = 0;
      std::string first_error;
      while (Clock::now() < window_to) {
        try {
          double end_us = one_rollout(servers, group, seq++);
          auto finished = Clock::now();
          if (finished >= window_from && finished <= window_to) {
            done += 1;
            mine.us.push_back(end_us);
          }
        } catch (const std::exception& e) {
          errors += 1;
          if (first_error.empty()) first_error = e.what();
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      cell.groups += done;
      cell.errors += errors;
      if (cell.first_error.empty()) cell.first_error = first_error;
      cell.end.us.insert(cell.end.us.end(), mine.us.begin(), mine.us.end());
    });
  }
  for (auto& t : threads) t.join();
  return cell;
}

std::string ms(double us) { return fmt::format("{:.3f}", us / 1000.0); }

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  if (auto code = parse_bench_args(argc, argv, o)) return *code;
  try {
    const int most = o.servers.back();
    const fs::path engine = exe_dir() / "ajet-echo-engine";
    if (!fs::exists(engine))
      throw std::runtime_error("build ajet-echo-engine first (the engine test double)");
    const fs::path scratch = (o.scratch.empty() ? fs::temp_directory_path() : fs::path(o.scratch)) /
                             ("ajet_multi_server_bench_" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    const std::string yaml = bench_config(bench_tokenizer());
    const std::string load_before = ajet::bench::load_average_text();

    // --- setup: `most` servers, configured and started at once (as a multi-model client does).
    std::vector<std::unique_ptr<ServerProcess>> fronts;
    std::vector<std::unique_ptr<client::SwarmClient>> clients;
    std::vector<std::pair<client::SwarmClient*, std::string>> configs;
    for (int i = 0; i < most; ++i) {
      fronts.push_back(
          std::make_unique<ServerProcess>(scratch / ("model-" + std::to_string(i)), engine,
                                          fronts.empty() ? std::string() : fronts.front()->url()));
      clients.push_back(
          std::make_unique<client::SwarmClient>(fronts.back()->url(), bench_client_options()));
      configs.emplace_back(clients.back().get(), yaml);
    }
    client::SwarmClient::start_multi_engine(configs, false, 180.0);
    auto first = [&](int n) {
      std::vector<client::SwarmClient*> out;
      for (int i = 0; i < n; ++i) out.push_back(clients[size_t(i)].get());
      return out;
    };
    for (int n : o.servers) one_rollout(first(n), n > 1, 0);  // warm every path once

    // --- 1. throughput
    std::vector<Cell> cells;
    for (int w : o.workers) {
      for (int n : o.servers) {
        cells.push_back(throughput(first(n), n > 1, w, o.warmup, o.seconds));
        std::cerr << fmt::format("{} server(s), {} worker(s): {:.1f} groups/s\n", n, w,
                                 double(cells.back().groups) / o.seconds);
      }
    }

    // --- 2. latency of ending, one at a time, interleaved
    Latencies single;
    std::vector<Latencies> grouped(o.servers.size());
    // Per N: command round trip, prepare, coordinator commit, participants' commit.
    std::vector<std::array<Latencies, 5>> phases(o.servers.size());
    for (int r = 0; r < o.rounds; ++r) {
      single.us.push_back(one_rollout(first(1), false, r));
      for (size_t k = 0; k < o.servers.size(); ++k) {
        grouped[k].us.push_back(one_rollout(first(o.servers[k]), true, r));
        PhaseTimes t = timed_group_end(first(o.servers[k]), r);
        phases[k][0].us.push_back(t.command_round_trip);
        phases[k][1].us.push_back(t.prepare);
        phases[k][2].us.push_back(t.coordinator_commit);
        phases[k][3].us.push_back(t.participants_commit);
        phases[k][4].us.push_back(t.decided);
      }
    }
    const std::string load_after = ajet::bench::load_average_text();
    fronts.clear();  // SIGTERM every front (each stops its engine)
    std::error_code ec;
    fs::remove_all(scratch, ec);

    // --- report
    std::ostringstream report;
    report << "Machine: " << std::thread::hardware_concurrency() << " cores shared by " << most
           << " fronts (ajet-swarm), their echo engines and this client; load average (1/5/15 min) "
           << load_before << " before, " << load_after
           << " after. The fronts' stores (SQLite, synchronous=FULL: an fsync per "
           << "commit) under " << scratch.parent_path().string() << ".\n\n";
    report << "Closed loop per worker: claim on every server, one chat call per server (a fresh "
              "connection each, "
           << "max_tokens 8), end; " << o.seconds << " s measured after " << o.warmup
           << " s warm-up per row.\n\n";
    report << "| servers | end | workers | groups/s | episodes/s | end p50 ms | end p90 ms | "
              "errors |\n"
           << "|---|---|---|---|---|---|---|---|\n";
    int64_t errors = 0;
    for (Cell& c : cells) {
      const double rate = double(c.groups) / c.seconds;
      report << "| " << c.servers << " | " << (c.group ? "MultiEpisode::end" : "end_episode")
             << " | " << c.workers << " | " << fmt::format("{:.1f}", rate) << " | "
             << fmt::format("{:.1f}", rate * c.servers) << " | " << ms(c.end.pct(0.5)) << " | "
             << ms(c.end.pct(0.9)) << " | " << c.errors << " |\n";
      errors += c.errors;
      if (c.errors > 0) std::cerr << "first error: " << c.first_error << "\n";
    }
    const double base = single.pct(0.5);
    report << "\nLatency of ending, one rollout at a time (" << o.rounds
           << " rounds, interleaved: one plain episode, then one group per N):\n\n"
           << "| end | servers | p50 ms | p90 ms | overhead vs end_episode, p50 ms "
              "|\n|---|---|---|---|---|\n"
           << "| end_episode | 1 | " << ms(base) << " | " << ms(single.pct(0.9)) << " | — |\n";
    double worst = 0;
    for (size_t k = 0; k < o.servers.size(); ++k) {
      const double p50 = grouped[k].pct(0.5);
      worst = std::max(worst, p50 - base);
      report << "| MultiEpisode::end (prepare + commit) | " << o.servers[k] << " | " << ms(p50)
             << " | " << ms(grouped[k].pct(0.9)) << " | " << ms(p50 - base) << " |\n";
    }
    report << "\nWhere a group end's time goes (the same protocol by hand, same rounds; p50 ms of "
              "each phase; "
           << "a command round trip = can_continue_episode, no store write):\n\n"
           << "| servers | command round trip | prepare (all at once) | commit, coordinator | "
              "commit, participants | "
           << "decided (prepare + coordinator commit) |\n|---|---|---|---|---|---|\n";
    for (size_t k = 0; k < o.servers.size(); ++k) {
      report << "| " << o.servers[k] << " | " << ms(phases[k][0].pct(0.5)) << " | "
             << ms(phases[k][1].pct(0.5)) << " | " << ms(phases[k][2].pct(0.5)) << " | "
             << (o.servers[k] > 1 ? ms(phases[k][3].pct(0.5)) : std::string("—")) << " | "
             << ms(phases[k][4].pct(0.5)) << " |\n";
    }
    report << "\nGroup protocol overhead per episode group, p50: at most **" << ms(worst)
           << " ms** over a single-server end (target ≤ 2 ms): "
           << (worst <= 2000 ? "met" : "not met") << ".\n";
    std::cout << report.str();
    if (o.append) {
      std::ostringstream body;
      body << "`build-u/bin/multi_server_bench` (servers "
           << fmt::format("{}", fmt::join(o.servers, ", ")) << "; workers "
           << fmt::format("{}", fmt::join(o.workers, ", "))
           << "): real `ajet-swarm` fronts on loopback with the echo engine test double and the "
              "debug backbone "
           << "(batches of 32 x 4 episodes recorded as they fill; nothing trains), so the client "
              "and the fronts are "
           << "what is timed.\n\n"
           << report.str();
      ajet::bench::append_to_benchmarks(
          "One client driving several swarm servers (bench/swarm/multi_server_bench)", body.str());
    }
    if (errors > 0) {
      std::cerr << "multi_server_bench: " << errors << " rollouts failed (see the errors column)\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "multi_server_bench: " << e.what() << "\n";
    return 1;
  }
}
