// front_bench: the swarm front (`ajet-swarm start`) as clients see it, measured in one run.
//  1. GET /get_engine_status with N concurrent keep-alive connections: requests/s, p50/p99.
//  2. POST /v1/chat/completions with max_tokens 1 on the tiny model (real ajet-engine), N
//  connections
//     spread over 16 episodes: requests/s, p50/p99.
//  3. Tracking + HTTP overhead per chat call: the same request one at a time through the front and
//     straight to an `ajet-engine serve` of the same model with src/rpc's Client (the prompt ids
//     the front rendered, read back from the episode document), interleaved; overhead = p50 front -
//     p50 direct.
//  4. Resident memory (VmRSS) of the front with M open streaming chat calls (the echo engine test
//     double holds each stream open after its first tokens: "HOLD" directive), against its
//     baseline.
// Server, engine and this load generator share the machine's cores; the report says how many.
// Appends a dated section to docs/benchmarks.md (not with --smoke or --no-append).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/subprocess.h"
#include "front_load.h"
#include "http/client.h"
#include "rpc/client.h"
#include "rpc/messages.h"

namespace {

using namespace ajet;
using bench::LoadResult;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Options {
  int connections = 1000;
  double seconds = 5;
  double warmup = 1;
  int streams = 5000;
  int overhead_calls = 300;
  bool smoke = false;
  bool append = true;
};

// Fills o from the command line; a value means main() returns it (--help, a usage error).
std::optional<int> parse_args(int argc, char** argv, Options& o) {
  ajet::bench::BenchCli cli(
      "front_bench",
      "The swarm front (ajet-swarm + ajet-engine, tiny model) under client load: status and "
      "chat throughput, streaming overhead, memory per open stream");
  CLI::App& app = cli.app();
  app.add_option("--connections", o.connections, "Concurrent keep-alive connections")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--seconds", o.seconds, "Seconds measured")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--warmup", o.warmup, "Seconds of warm-up")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--streams", o.streams, "Open streaming chat calls for the memory row")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--overhead-calls", o.overhead_calls, "Calls timed for the overhead row")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  if (auto code = cli.parse(argc, argv)) return code;
  o.smoke = cli.smoke();
  o.append = cli.append();
  if (o.smoke) {
    o.connections = 20;
    o.seconds = 0.5;
    o.warmup = 0.2;
    o.streams = 50;
    o.overhead_calls = 20;
  }
  return std::nullopt;
}

fs::path bin_dir() { return fs::read_symlink("/proc/self/exe").parent_path(); }

// A child process whose output lines are collected by a thread (spawned from main: the child dies
// with it, PR_SET_PDEATHSIG).
class Child {
 public:
  explicit Child(std::vector<std::string> argv) {
    Subprocess p = Subprocess::spawn(SpawnOptions{std::move(argv), {}, {}});
    pid_ = p.pid();
    reader_ = std::thread([this, sp = std::make_shared<Subprocess>(std::move(p))]() mutable {
      int status = sp->wait([this](std::string line) {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(std::move(line));
        cv_.notify_all();
      });
      std::lock_guard<std::mutex> lock(mu_);
      exited_ = true;
      status_ = status;
      cv_.notify_all();
      holder_ = std::move(sp);
    });
  }
  ~Child() { stop(); }
  std::string wait_for_line(const std::string& needle, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::string found;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& l : lines_) {
        if (l.find(needle) != std::string::npos) {
          found = l;
          return true;
        }
      }
      return exited_;
    });
    if (found.empty()) {
      std::string all;
      for (const auto& l : lines_) all += l + "\n";
      throw std::runtime_error("child did not print '" + needle + "':\n" + all);
    }
    return found;
  }
  pid_t pid() const { return pid_; }
  void stop() {
    if (pid_ > 0 && !exited()) ::kill(pid_, SIGTERM);
    if (reader_.joinable()) reader_.join();
    pid_ = -1;
  }

 private:
  bool exited() {
    std::lock_guard<std::mutex> lock(mu_);
    return exited_;
  }
  pid_t pid_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  bool exited_ = false;
  int status_ = 0;
  std::shared_ptr<Subprocess> holder_;
  std::thread reader_;
};

void run_or_throw(const std::vector<std::string>& argv) {
  CommandResult r = run_command(SpawnOptions{argv, {}, {}});
  if (!exited_cleanly(r.status)) throw std::runtime_error(argv[0] + " failed:\n" + r.output);
}

struct Fixture {
  fs::path tokenizer, model;
};

Fixture make_fixture() {
  const fs::path root = bin_dir().parent_path() / "bench_fixture";
  Fixture f{root / "tokenizer", root / "model-tiny"};
  if (!fs::exists(f.tokenizer / "tokenizer.json")) {
    fs::remove_all(f.tokenizer);
    run_or_throw({(bin_dir() / "ajet").string(), "tokenizer", "train", "--corpus",
                  (fs::path(AJET_SOURCE_DIR) / "tests/text/data/tokenizer_corpus.jsonl").string(),
                  "--vocab-size", "400", "--out", f.tokenizer.string()});
  }
  if (!fs::exists(f.model / "config.json")) {
    fs::remove_all(f.model);
    run_or_throw({(bin_dir() / "ajet-engine").string(), "model", "init", "--preset", "tiny",
                  "--tokenizer", f.tokenizer.string(), "--seed", "7", "--out", f.model.string()});
  }
  return f;
}

std::string config_yaml(const fs::path& model) {
  return "ajet:\n  backbone: debug\n  model:\n    path: " + model.string() +
         "\n  data:\n    train_batch_size: 1000000\n    max_prompt_length: 256\n    "
         "max_response_length: 256\n"
         "  rollout:\n    max_env_worker: 64\n    max_model_len: 512\n    "
         "max_response_length_in_one_turn: 16\n"
         "    num_repeat: 1\n    temperature: 1.0\n  engine:\n    threads: 1\n    "
         "kv_cache_memory_mb: 128\n";
}

// `ajet-swarm start` with `engine`, booted with `yaml`.
struct Front {
  std::unique_ptr<Child> child;
  uint16_t port = 0;
  std::string url;
};

Front start_front(const fs::path& dir, const fs::path& engine, const std::string& yaml) {
  Front f;
  f.child = std::make_unique<Child>(
      std::vector<std::string>{(bin_dir() / "ajet-swarm").string(), "start", "--port", "0",
                               "--exp-dir", dir.string(), "--engine", engine.string()});
  std::string ready = f.child->wait_for_line("ajet-swarm ready:", 60s);
  f.port = uint16_t(std::stoi(ready.substr(ready.find("(port ") + 6)));
  f.url = "http://127.0.0.1:" + std::to_string(f.port);
  http::HttpClient c(f.url);
  auto r = c.post_json("/sync_train_config", Json{{"yaml_as_string", yaml}});
  if (r.status != 200) throw std::runtime_error("sync_train_config: " + r.body);
  r = c.post_json("/start_engine", Json::object());
  if (r.status != 200) throw std::runtime_error("start_engine: " + r.body);
  auto deadline = Clock::now() + 180s;
  while (c.get("/get_engine_status").json().value("engine_status", "") != "ENGINE.ROLLING") {
    if (Clock::now() > deadline)
      throw std::runtime_error("the engine did not reach ENGINE.ROLLING");
    std::this_thread::sleep_for(50ms);
  }
  return f;
}

Json claim(http::HttpClient& c) {
  Json r = c.post_json("/claim_episode", Json{{"client_uuid", "bench"},
                                              {"episode_type", "train"},
                                              {"discard_episode_timeout", 3600}})
               .json();
  if (!r.value("success", false)) throw std::runtime_error("claim_episode: " + r.dump());
  return r;
}

Json chat_body(const std::string& content, bool stream) {
  Json b = {{"model", "agentjet"},
            {"messages", Json::array({{{"role", "user"}, {"content", content}}})}};
  if (stream) {
    b["stream"] = true;
  } else {
    b["max_tokens"] = 1;
  }
  return b;
}

int64_t rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

struct Latencies {
  std::vector<double> us;
  double pct(double p) {
    if (us.empty()) return 0;
    std::sort(us.begin(), us.end());
    return us[std::min(us.size() - 1, size_t(p * double(us.size())))];
  }
};

std::string fmt_rate(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}
std::string fmt_ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", us / 1000.0);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (auto code = parse_args(argc, argv, o)) return *code;
  try {
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;  // children (the front) inherit it
    ::setrlimit(RLIMIT_NOFILE, &lim);
    const unsigned cores = std::thread::hardware_concurrency();
    const fs::path scratch =
        fs::temp_directory_path() / ("ajet_front_bench_" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    Fixture fx = make_fixture();
    std::ostringstream report;
    report << "Machine: " << cores
           << " cores shared by the front (ajet-swarm, 2 I/O threads), the engine and "
           << "this load generator (one thread); numbers are lower bounds for a machine where they "
              "do not compete.\n\n";

    // --- 1-3: the real engine with the tiny model.
    LoadResult status_load, chat_load;
    Latencies front_lat, direct_lat;
    {
      Front front = start_front(scratch / "real", bin_dir() / "ajet-engine", config_yaml(fx.model));
      status_load =
          bench::run_load(front.port, "/get_engine_status", o.connections, o.seconds, o.warmup);
      std::cerr << "status: " << status_load.requests_per_second() << " req/s\n";

      http::HttpClient c(front.url);
      std::vector<std::string> requests;
      for (int i = 0; i < 16; ++i) {
        Json ep = claim(c);
        requests.push_back(
            bench::raw_post("/v1/chat/completions", chat_body("Hello there", false).dump(),
                            {"Authorization: Bearer " + ep["openai_api_key"].get<std::string>()}));
      }
      chat_load = bench::run_request_load(front.port, requests, o.connections, o.seconds, o.warmup);
      std::cerr << "chat: " << chat_load.requests_per_second() << " req/s\n";

      // 3. One call at a time: front vs direct RPC, same prompt ids, interleaved.
      Json probe = claim(c);
      http::Headers auth{{"Authorization", "Bearer " + probe["openai_api_key"].get<std::string>()}};
      auto first = c.post_json("/v1/chat/completions", chat_body("Hello there", false), auth);
      if (first.status != 200) throw std::runtime_error("chat: " + first.body);
      c.post_json("/end_episode",
                  Json{{"client_uuid", "bench"},
                       {"episode_uuid", probe["episode_uuid"]},
                       {"task_id", "probe"},
                       {"workflow_output", {{"reward", 0}, {"metadata", {{"task_id", "probe"}}}}}},
                  auth);  // the episode's key
      Json doc = c.get("/episodes/" + probe["episode_uuid"].get<std::string>()).json();
      std::vector<int32_t> prompt =
          doc.at("calls").at(0).at("prompt_ids").get<std::vector<int32_t>>();
      Json measured = claim(c);
      http::Headers mauth{
          {"Authorization", "Bearer " + measured["openai_api_key"].get<std::string>()}};

      Child engine({(bin_dir() / "ajet-engine").string(), "serve", "--model", fx.model.string(),
                    "--listen", "tcp:127.0.0.1:0", "--insecure-no-token", "--threads", "1",
                    "--kv-cache-mb", "128"});
      std::string ready = engine.wait_for_line("ajet-engine: ready on ", 120s);
      rpc::Client rpc(ready.substr(ready.find("ready on ") + 9));
      rpc.connect_with_retry();
      auto direct_call = [&] {
        rpc::GenerateRequest g;
        g.prompt = prompt;
        g.max_tokens = 1;
        g.temperature = 1.0;
        std::promise<void> done;
        rpc.start(rpc::encode_generate_request(g), [&](rpc::Frame&& f) {
          if (f.kind != rpc::FrameKind::kReply) done.set_value();
        });
        done.get_future().wait();
      };
      for (int i = 0; i < 5; ++i) {  // warm both paths
        direct_call();
        c.post_json("/v1/chat/completions", chat_body("Hello there", false), mauth);
      }
      for (int i = 0; i < o.overhead_calls; ++i) {
        auto t0 = Clock::now();
        auto r = c.post_json("/v1/chat/completions", chat_body("Hello there", false), mauth);
        auto t1 = Clock::now();
        if (r.status != 200) throw std::runtime_error("chat: " + r.body);
        direct_call();
        auto t2 = Clock::now();
        front_lat.us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        direct_lat.us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      }
    }

    // --- 4: memory with open streams (echo engine holds them open).
    int64_t rss_before = -1, rss_with = -1;
    int streams_ready = 0, streams_failed = 0;
    std::string memory_note;
    if (fs::exists(bin_dir() / "ajet-echo-engine")) {
      Front front =
          start_front(scratch / "echo", bin_dir() / "ajet-echo-engine", config_yaml(fx.tokenizer));
      http::HttpClient c(front.url);
      std::vector<std::string> requests;
      for (int i = 0; i < 16; ++i) {
        Json ep = claim(c);
        requests.push_back(
            bench::raw_post("/v1/chat/completions", chat_body("HOLD\nhello stream", true).dump(),
                            {"Authorization: Bearer " + ep["openai_api_key"].get<std::string>()}));
      }
      rss_before = rss_kb(front.child->pid());
      bench::hold_request_streams(front.port, requests, o.streams, 120, [&](int ready, int failed) {
        streams_ready = ready;
        streams_failed = failed;
        rss_with = rss_kb(front.child->pid());
      });
    } else {
      memory_note = "skipped: ajet-echo-engine (the engine test double of tests/e2e) is not built";
    }
    std::error_code ec;
    fs::remove_all(scratch, ec);

    // --- report
    report << "| Measurement | Connections | Requests/s | p50 ms | p99 ms | Errors "
              "|\n|---|---|---|---|---|---|\n";
    report << "| GET /get_engine_status | " << status_load.connections << " | "
           << fmt_rate(status_load.requests_per_second()) << " | " << fmt_ms(status_load.p50_us)
           << " | " << fmt_ms(status_load.p99_us) << " | " << status_load.errors << " |\n";
    report << "| POST /v1/chat/completions, max_tokens 1, tiny model | " << chat_load.connections
           << " | " << fmt_rate(chat_load.requests_per_second()) << " | "
           << fmt_ms(chat_load.p50_us) << " | " << fmt_ms(chat_load.p99_us) << " | "
           << chat_load.errors << " |\n\n";
    const double fp50 = front_lat.pct(0.5), dp50 = direct_lat.pct(0.5);
    report << "One call at a time (" << o.overhead_calls
           << " each, interleaved), max_tokens 1, same prompt ids:\n\n"
           << "| Path | p50 ms | p99 ms |\n|---|---|---|\n"
           << "| front: HTTP + render + tracking + engine RPC | " << fmt_ms(fp50) << " | "
           << fmt_ms(front_lat.pct(0.99)) << " |\n"
           << "| direct: src/rpc Client → ajet-engine serve | " << fmt_ms(dp50) << " | "
           << fmt_ms(direct_lat.pct(0.99)) << " |\n"
           << "| **overhead (front − direct), p50** | **" << fmt_ms(fp50 - dp50)
           << "** | (target ≤ 1 ms) |\n\n";
    if (memory_note.empty()) {
      report << "Resident memory of the front (VmRSS): " << rss_before / 1024 << " MiB after boot; "
             << rss_with / 1024 << " MiB with " << streams_ready << " open streaming chat calls ("
             << streams_failed << " failed); "
             << (streams_ready > 0 ? (rss_with - rss_before) / std::max(streams_ready, 1) : 0)
             << " KiB per stream (target ≤ 100 MB for 5,000 streams; echo engine holding each "
                "stream).\n";
    } else {
      report << "Resident memory with open streams: " << memory_note << ".\n";
    }
    std::cout << report.str();
    if (o.append) {
      std::ostringstream body;
      body << o.connections << " concurrent keep-alive connections, " << o.seconds
           << " s measured after " << o.warmup
           << " s warm-up; tiny model (debug backbone) on the real ajet-engine.\n\n"
           << report.str();
      ajet::bench::append_to_benchmarks("Swarm front as clients see it (bench/swarm/front_bench)",
                                        body.str());
    }
    if (status_load.errors + chat_load.errors > 0 || (memory_note.empty() && streams_failed > 0)) {
      std::cerr << "front_bench: some requests failed (see the Errors column)\n";
      return o.smoke ? 1 : 0;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "front_bench: " << e.what() << "\n";
    return 1;
  }
}
