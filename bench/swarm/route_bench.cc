// Routing overhead per LLM call (issue 42): what engine_control::ReplicaRouter costs the front for
// each call, sticky by episode (the default) against `first` (every call to rank 0: no choice at
// all) and round-robin, with 2 and 8 connected replicas (in-process RPC servers on Unix sockets;
// the router only asks their clients whether they are connected) and 10,000 episodes in flight,
// each making 8 calls in an order that interleaves episodes as concurrent agents do. A call is
// route() plus dropping its lease (the call ended), as the front does around each generate. Single
// thread, and 2 threads routing at once (the front's I/O threads). Prints ns per call and the ratio
// to `first`; for scale, a front's call costs milliseconds (bench/swarm/front_bench.cc).
//
//   route_bench [--calls N] [--smoke] [--no-append]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "common/log.h"
#include "engine_control/replica_router.h"
#include "rpc/client.h"
#include "rpc/router.h"
#include "rpc/server.h"

namespace fs = std::filesystem;
using ajet::engine_control::ReplicaRouter;
using ajet::engine_control::RoutePolicy;

namespace {

struct Replicas {
  std::vector<std::unique_ptr<ajet::rpc::Router>> handlers;
  std::vector<std::unique_ptr<ajet::rpc::Server>> servers;
  std::vector<std::shared_ptr<ajet::rpc::Client>> clients;
};

Replicas start_replicas(int n, const fs::path& dir) {
  Replicas r;
  for (int i = 0; i < n; ++i) {
    r.handlers.push_back(std::make_unique<ajet::rpc::Router>());
    r.servers.push_back(std::make_unique<ajet::rpc::Server>(*r.handlers.back()));
    r.servers.back()->listen("unix:" + (dir / ("r" + std::to_string(i) + ".sock")).string());
    r.clients.push_back(std::make_shared<ajet::rpc::Client>(r.servers.back()->address()));
    r.clients.back()->connect();
  }
  return r;
}

// ns per call over `calls` calls from `threads` threads at once (each its own episodes).
double ns_per_call(RoutePolicy policy, const Replicas& replicas, int64_t calls, int threads,
                   int64_t episodes) {
  ReplicaRouter router(policy);
  std::vector<std::thread> pool;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(uint64_t(t) + 7);
      std::vector<std::string> names;
      for (int64_t e = 0; e < episodes; ++e)
        names.push_back("episode-" + std::to_string(t) + "-" + std::to_string(e));
      std::vector<int> made(size_t(episodes), 0);
      for (int64_t c = 0; c < calls / threads; ++c) {
        const size_t e = size_t(rng() % uint64_t(episodes));
        auto choice = router.route(names[e], replicas.clients, 1);
        if (!choice.client) std::abort();  // every replica is connected
        if (++made[e] == 8) {              // the episode ended; a new one takes its place
          router.forget(names[e]);
          made[e] = 0;
          names[e] += "+";
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s * 1e9 / double(calls / threads * threads);
}

}  // namespace

int main(int argc, char** argv) {
  ajet::bench::BenchCli cli(
      "route_bench",
      "Routing overhead per LLM call: sticky vs first vs round-robin, 2 and 8 "
      "replicas, 1 and 2 threads");
  int64_t calls = 2'000'000;
  cli.app()
      .add_option("--calls", calls, "Calls per measurement (default 2,000,000)")
      ->check(CLI::Range(int64_t(1000), int64_t(1) << 40));
  if (auto code = cli.parse(argc, argv)) return *code;
  if (cli.smoke()) calls = 20'000;
  ajet::set_log_level("warn");
  const fs::path dir =
      fs::temp_directory_path() / ("ajet_route_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int64_t episodes = 10'000;

  std::string table =
      "| replicas | threads | first (ns/call) | round_robin | sticky | sticky / first |\n"
      "|---|---|---|---|---|---|\n";
  for (int n : {2, 8}) {
    Replicas replicas = start_replicas(n, dir);
    for (int threads : {1, 2}) {
      const double first = ns_per_call(RoutePolicy::kFirst, replicas, calls, threads, episodes);
      const double rr = ns_per_call(RoutePolicy::kRoundRobin, replicas, calls, threads, episodes);
      const double sticky = ns_per_call(RoutePolicy::kSticky, replicas, calls, threads, episodes);
      char row[256];
      std::snprintf(row, sizeof row, "| %d | %d | %.0f | %.0f | %.0f | %.2fx |\n", n, threads,
                    first, rr, sticky, sticky / first);
      table += row;
    }
  }
  fs::remove_all(dir);
  const std::string body =
      "`route_bench" + std::string(cli.smoke() ? " --smoke" : "") + "`: " + std::to_string(calls) +
      " calls per cell, " + std::to_string(episodes) +
      " episodes in flight per thread (8 calls each, interleaved at random), every replica "
      "connected (in-process RPC servers); a call is route() plus its lease dropped. Load "
      "average " +
      ajet::bench::load_average_text() +
      ". For scale: one call through the front costs milliseconds, so the route is a "
      "few ten-thousandths of it.\n\n" +
      table;
  std::printf("%s", body.c_str());
  if (cli.append()) {
    ajet::bench::append_to_benchmarks(
        "Routing overhead per LLM call: sticky vs first vs round-robin "
        "(bench/swarm/route_bench.cc)",
        body);
  }
  return 0;
}
