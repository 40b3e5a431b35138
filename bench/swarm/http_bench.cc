// http_bench: the raw HTTP layer of the swarm front, measured in one run.
//  1. Throughput: requests/s and p50/p99 latency of a trivial JSON route (like /get_engine_status)
//     with N concurrent keep-alive connections, for ajet::http::HttpServer and, as the reference
//     point, a minimal raw-Asio responder; the ratio is the cost of the adapter (parsing, routing,
//     timeouts, Respond/Slot hand-off).
//  2. Memory: resident set (VmRSS) of the server process with M idle SSE streams open, against the
//     baseline just before opening them.
// The load generator runs in a child process (this binary with --role) and competes for the same
// cores as the server; the table says so. Appends a dated section to docs/benchmarks.md.
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "common/json.h"
#include "common/log.h"
#include "http/response.h"
#include "http/router.h"
#include "http/server.h"
#include "http/stream.h"
#include "http_load.h"

extern char** environ;

namespace {

using namespace ajet;
using namespace ajet::http;

struct Options {
  int connections = 1000;
  double seconds = 5;
  double warmup = 1;
  int streams = 5000;
  int io_threads = 2;
  int rounds =
      3;  // raw and ours alternate; the best round of each is reported (a shared machine is noisy)
  bool smoke = false;
  bool append = true;
  // child roles
  std::string role;
  uint16_t port = 0;
};

const char* kStatusBody =
    R"({"engine_status":"ENGINE.ROLLING","engine_status_detail":"rolling out","global_step":42})";

// Fills o from the command line; a value means main() returns it (--help, a usage error).
std::optional<int> parse_args(int argc, char** argv, Options& o) {
  ajet::bench::BenchCli cli(
      "http_bench",
      "The HTTP layer: a trivial JSON route against a minimal raw-Asio responder, then idle SSE "
      "streams held open");
  CLI::App& app = cli.app();
  app.add_option("--connections", o.connections, "Keep-alive connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--seconds", o.seconds, "Seconds measured")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--warmup", o.warmup, "Seconds of warm-up")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--streams", o.streams, "Idle SSE streams held open")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--io-threads", o.io_threads, "Server I/O threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--rounds", o.rounds, "Rounds of the throughput pair")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  // The load-generating child's own flags (the bench spawns itself with them).
  app.add_option("--role", o.role, "Child role (used by the bench itself)")
      ->check(CLI::IsMember({"load", "streams"}))
      ->group("");
  app.add_option("--port", o.port, "Child: the server's port")->group("");
  if (auto code = cli.parse(argc, argv)) return code;
  o.smoke = cli.smoke();
  o.append = cli.append();
  if (o.smoke) {
    o.connections = 20;
    o.seconds = 0.3;
    o.warmup = 0.1;
    o.streams = 100;
    o.rounds = 1;
  }
  return std::nullopt;
}

// Lifts the open-file limit to the hard limit: every connection is a descriptor on each side.
rlim_t raise_nofile_limit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// This binary again, with a role; its stdin/stdout are pipes to us.
struct Child {
  pid_t pid = -1;
  int to_child = -1;  // its stdin: closing it tells a stream holder to finish
  FILE* from_child = nullptr;

  static Child spawn(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe() failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> full{"/proc/self/exe"};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    Child c;
    if (posix_spawn(&c.pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("posix_spawn failed");
    }
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    c.to_child = in[1];
    c.from_child = fdopen(out[0], "r");
    return c;
  }

  std::string read_line() {
    char buf[4096];
    if (!fgets(buf, sizeof buf, from_child)) return "";
    return buf;
  }

  int finish() {
    if (to_child >= 0) close(to_child);
    to_child = -1;
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(from_child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

int child_main(const Options& o) {
  if (o.role == "load") {
    bench::LoadResult r =
        bench::run_load(o.port, "/get_engine_status", o.connections, o.seconds, o.warmup);
    Json j = {{"connections", r.connections}, {"requests", r.requests}, {"errors", r.errors},
              {"seconds", r.seconds},         {"p50_us", r.p50_us},     {"p99_us", r.p99_us}};
    std::cout << j.dump() << std::endl;
    return 0;
  }
  if (o.role == "streams") {
    bench::hold_streams(o.port, "/stream", o.streams, 0, [](int ready, int failed) {
      std::cout << Json{{"ready", ready}, {"failed", failed}}.dump() << std::endl;
    });
    return 0;
  }
  std::cerr << "unknown role " << o.role << "\n";
  return 2;
}

double cpu_seconds(int who) {
  rusage usage{};
  getrusage(who, &usage);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return sec(usage.ru_utime) + sec(usage.ru_stime);
}

struct Measured {
  bench::LoadResult load;
  double server_cpu_us = 0;  // CPU time of this process (the server's threads) per request
  double client_cpu_us = 0;  // CPU time of the load generator per request
};

// CPU time per request does not depend on what else the machine runs, unlike requests/s.
Measured load_against(uint16_t port, const Options& o) {
  double server_before = cpu_seconds(RUSAGE_SELF);
  double children_before = cpu_seconds(RUSAGE_CHILDREN);
  Child child = Child::spawn({"--role", "load", "--port", std::to_string(port), "--connections",
                              std::to_string(o.connections), "--seconds", std::to_string(o.seconds),
                              "--warmup", std::to_string(o.warmup)});
  std::string line = child.read_line();
  child.finish();
  Json j = parse_json(line, "load generator output");
  bench::LoadResult r;
  r.connections = j["connections"];
  r.requests = j["requests"];
  r.errors = j["errors"];
  r.seconds = j["seconds"];
  r.p50_us = j["p50_us"];
  r.p99_us = j["p99_us"];
  Measured m;
  m.load = r;
  // Both include the warm-up and connection setup, so they slightly overstate the steady state.
  double total = double(r.requests) * (o.seconds + o.warmup) / std::max(o.seconds, 1e-9);
  if (total > 0) {
    m.server_cpu_us = (cpu_seconds(RUSAGE_SELF) - server_before) * 1e6 / total;
    m.client_cpu_us = (cpu_seconds(RUSAGE_CHILDREN) - children_before) * 1e6 / total;
  }
  return m;
}

struct MemoryResult {
  int streams = 0;
  int ready = 0;
  uint64_t open_connections = 0;
  long baseline_kib = 0;
  long with_streams_kib = 0;
};

MemoryResult measure_streams(const Options& o) {
  std::mutex mu;
  std::vector<std::shared_ptr<ChannelStream>> streams;
  streams.reserve(static_cast<size_t>(o.streams));
  Router router;
  router.get("/stream", [&](Request, Respond respond) {
    auto stream = std::make_shared<ChannelStream>();
    stream->push(
        sse_event(R"({"object":"chat.completion.chunk"})"));  // then idle, like a slow engine
    respond(sse_response(stream));
    std::lock_guard lock(mu);
    streams.push_back(std::move(stream));
  });
  ServerOptions options;
  options.io_threads = o.io_threads;
  options.shutdown_grace = std::chrono::milliseconds(0);
  HttpServer server(options, std::move(router));
  server.start();

  MemoryResult m;
  m.streams = o.streams;
  m.baseline_kib = rss_kib();
  Child child = Child::spawn({"--role", "streams", "--port", std::to_string(server.port()),
                              "--streams", std::to_string(o.streams)});
  Json j = parse_json(child.read_line(), "stream holder output");
  m.ready = j["ready"];
  m.open_connections = server.stats().connections_open;
  m.with_streams_kib = rss_kib();
  child.finish();
  server.stop();
  server.wait();
  return m;
}

std::string fmt_us(double us) {
  char buf[32];
  if (us >= 1000)
    std::snprintf(buf, sizeof buf, "%.2f ms", us / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.0f us", us);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (auto code = parse_args(argc, argv, o)) return *code;
  try {
    rlim_t nofile = raise_nofile_limit();
    if (!o.role.empty()) return child_main(o);
    set_log_level("warn");

    if (nofile < rlim_t(o.streams + o.connections + 256)) {
      std::cerr << "warning: RLIMIT_NOFILE is " << nofile << "; the run needs about "
                << o.streams + 256 << "\n";
    }
    const std::string loadavg = ajet::bench::load_average_text();
    unsigned cores = std::thread::hardware_concurrency();

    // Memory first, so the baseline is not inflated by the throughput runs' allocations.
    MemoryResult mem = measure_streams(o);

    Router router;
    Json status = parse_json(kStatusBody, "status body");
    router.get("/get_engine_status",
               [status](Request, Respond respond) { respond(json_response(status)); });
    ServerOptions options;
    options.io_threads = o.io_threads;
    HttpServer server(options, std::move(router));
    server.start();
    bench::RawResponder responder(o.io_threads, kStatusBody);
    Measured raw;
    Measured ours;
    uint64_t raw_errors = 0;
    uint64_t our_errors = 0;
    for (int round = 0; round < o.rounds; ++round) {
      Measured r = load_against(responder.port(), o);
      raw_errors += r.load.errors;
      if (r.load.requests_per_second() > raw.load.requests_per_second()) raw = r;
      Measured h = load_against(server.port(), o);
      our_errors += h.load.errors;
      if (h.load.requests_per_second() > ours.load.requests_per_second()) ours = h;
    }
    raw.load.errors = raw_errors;  // errors of every round: a better round must not hide one
    ours.load.errors = our_errors;
    auto rps = [](const Measured& m) { return m.load.requests_per_second(); };
    // What both programs would reach on this many otherwise idle cores, from their CPU per request.
    auto capacity = [&](const Measured& m) {
      double us = m.server_cpu_us + m.client_cpu_us;
      return us > 0 ? double(cores) * 1e6 / us : 0;
    };
    double ratio = rps(raw) > 0 ? rps(ours) / rps(raw) : 0;
    double cpu_ratio = ours.server_cpu_us > 0 ? raw.server_cpu_us / ours.server_cpu_us : 0;
    double per_stream_kib =
        mem.ready > 0 ? double(mem.with_streams_kib - mem.baseline_kib) / mem.ready : 0;
    std::ostringstream table;
    char line[512];
    table << "Machine: " << cores << " cores, load average (1/5/15 min) at start " << loadavg
          << " (other work on the machine lowers requests/s, not CPU per request). Server: "
          << o.io_threads
          << " I/O threads; load generator: 1 thread in a child process on the same cores. Best of "
          << o.rounds << " alternating rounds.\n\n";
    table
        << "| server | connections | requests/s | p50 | p99 | errors | server CPU/request | "
           "load-generator "
           "CPU/request | req/s if the cores were idle |\n|---|---|---|---|---|---|---|---|---|\n";
    for (auto [name, m] : {std::pair{"raw Asio responder (reference)", raw},
                           std::pair{"ajet::http::HttpServer", ours}}) {
      const bench::LoadResult& r = m.load;
      std::snprintf(line, sizeof line,
                    "| %s | %d | %.0f | %s | %s | %llu | %.1f us | %.1f us | %.0f |\n", name,
                    r.connections, r.requests_per_second(), fmt_us(r.p50_us).c_str(),
                    fmt_us(r.p99_us).c_str(), static_cast<unsigned long long>(r.errors),
                    m.server_cpu_us, m.client_cpu_us, capacity(m));
      table << line;
    }
    std::snprintf(line, sizeof line,
                  "\nHttpServer / raw responder: throughput %.2f, server CPU per request %.2f (1 = "
                  "as cheap as the "
                  "reference). Target >= 20,000 req/s: measured %s, from CPU per request %s.\n\n",
                  ratio, cpu_ratio, rps(ours) >= 20000 ? "met" : "NOT met",
                  capacity(ours) >= 20000 ? "met" : "NOT met");
    table << line;
    table << "| idle SSE streams | open on server | RSS before | RSS with streams | per stream |\n"
             "|---|---|---|---|---|\n";
    std::snprintf(line, sizeof line, "| %d | %llu | %.1f MiB | %.1f MiB | %.1f KiB |\n",
                  mem.streams, static_cast<unsigned long long>(mem.open_connections),
                  mem.baseline_kib / 1024.0, mem.with_streams_kib / 1024.0, per_stream_kib);
    table << line;
    std::snprintf(line, sizeof line,
                  "\nRSS growth for %d streams: %.1f MiB; whole server process with them: %.1f MiB "
                  "(target: <= 100 MB:"
                  " %s)\n",
                  mem.ready, (mem.with_streams_kib - mem.baseline_kib) / 1024.0,
                  mem.with_streams_kib / 1024.0,
                  mem.with_streams_kib * 1024.0 <= 100e6 ? "met" : "NOT met");
    table << line;
    std::cout << table.str();

    bool healthy = ours.load.requests > 0 && raw.load.requests > 0 && ours.load.errors == 0 &&
                   mem.ready == mem.streams && mem.open_connections == uint64_t(mem.streams);
    if (o.append) {
      std::ostringstream body;
      body << "`build/bin/http_bench` (bench/swarm/http_bench.cc): a trivial JSON route (like "
              "`/get_engine_status`)"
           << " with " << o.connections << " keep-alive connections for " << o.seconds
           << " s after a " << o.warmup
           << " s warm-up, against a minimal raw-Asio responder measured in the same run; then "
           << o.streams << " idle SSE streams held open.\n\n"
           << table.str();
      ajet::bench::append_to_benchmarks(
          "HTTP layer: raw server throughput and idle-stream memory (bench/swarm/http_bench)",
          body.str());
    }
    if (!healthy) {
      std::cerr << "http_bench: unhealthy run (errors, or streams that did not open)\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "http_bench: " << e.what() << "\n";
    return 1;
  }
}
