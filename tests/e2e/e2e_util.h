// Helpers for the end-to-end tests: the real `ajet-swarm` binary started on loopback with an
// ephemeral port (and, through it, `ajet-engine` or the echo test double), a tiny model fixture
// created once per build tree, HTTP with src/http's client and with curl, and small zip archives.
// Waiting is always on an observable event (a line, a status) with a generous overall deadline.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/fs.h"
#include "common/json.h"
#include "common/subprocess.h"
#include "engine_control/test_zip.h"
#include "http/client.h"
#include "support/scratch_dir.h"

namespace ajet::e2e {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using engine_control::testing::make_zip;
using engine_control::testing::ZipMember;

inline fs::path bin(const std::string& name) { return fs::path(AJET_BINARY_DIR) / "bin" / name; }
inline fs::path source(const std::string& rel) { return fs::path(AJET_SOURCE_DIR) / rel; }

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Captured {
  int status = -1;
  std::string out;
};
// Runs a shell command, capturing stdout (stderr goes to stdout too).
inline Captured run_capture(const std::string& command) {
  Captured r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = ::pclose(p);
  return r;
}

using ScratchDir = ajet::test_support::ScratchDir;

// The tokenizer (`ajet tokenizer train`, 400 ids, Qwen2.5 template) and, when asked, a micro model
// (`ajet model init --preset micro`), made once per build tree under <build>/e2e_fixture. Test
// processes share it (ctest -j2): an flock serialises creation; directories appear by rename.
struct Fixture {
  fs::path tokenizer;
  fs::path model;  // empty unless need_model
};

inline void make_once(const fs::path& dir, const std::function<void(const fs::path&)>& create) {
  if (fs::exists(dir / ".complete")) return;
  const fs::path root = dir.parent_path();
  fs::create_directories(root);
  int fd = ::open((root / ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  ::flock(fd, LOCK_EX);
  if (!fs::exists(dir / ".complete")) {
    const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp);
    create(tmp);
    // A creation that failed (a fatal assertion in `create`) is not marked complete: the next test
    // tries again instead of using half a fixture.
    if (!::testing::Test::HasFatalFailure()) {
      write_file_atomic(tmp / ".complete", "ok\n");
      fs::remove_all(dir);
      fs::rename(tmp, dir);
    }
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
}

inline Fixture fixture(bool need_model) {
  Fixture f;
  const fs::path root = fs::path(AJET_BINARY_DIR) / "e2e_fixture";
  f.tokenizer = root / "tokenizer";
  make_once(f.tokenizer, [](const fs::path& out) {
    Captured r =
        run_capture(shell_quote(bin("ajet").string()) + " tokenizer train --corpus " +
                    shell_quote(source("tests/text/data/tokenizer_corpus.jsonl").string()) +
                    " --vocab-size 400 --out " + shell_quote(out.string()));
    ASSERT_EQ(r.status, 0) << r.out;
  });
  if (need_model) {
    f.model = root / "model-micro";
    make_once(f.model, [&](const fs::path& out) {
      Captured r = run_capture(
          shell_quote(bin("ajet-engine").string()) + " model init --preset micro --tokenizer " +
          shell_quote(f.tokenizer.string()) + " --seed 7 --out " + shell_quote(out.string()));
      ASSERT_EQ(r.status, 0) << r.out;
    });
  }
  return f;
}

// A copy of `model` in `out` whose config allows `positions` positions: the micro preset has 512,
// and a tool-call turn with the 400-id fixture tokenizer is ~650 tokens (RoPE positions are
// computed, not stored, so only config.json changes).
inline fs::path model_with_positions(const fs::path& model, const fs::path& out,
                                     int64_t positions) {
  fs::copy(model, out, fs::copy_options::recursive);
  Json config = Json::parse(read_file(out / "config.json"));
  config["max_position_embeddings"] = positions;
  write_file_atomic(out / "config.json", config.dump(2));
  return out;
}

// A train config for the tiny fixtures; `extra` is appended under `ajet:` (two-space indented
// YAML).
inline std::string config_yaml(const fs::path& model, const std::string& extra = "") {
  return "ajet:\n"
         "  backbone: debug\n"
         "  model:\n"
         "    path: " +
         model.string() +
         "\n"
         "  data:\n"
         "    max_prompt_length: 256\n"
         "    max_response_length: 256\n"
         "    train_batch_size: 2\n"
         "  rollout:\n"
         "    max_env_worker: 8\n"
         "    max_model_len: 512\n"
         "    max_response_length_in_one_turn: 48\n"
         "    num_repeat: 2\n"
         "    temperature: 1.0\n"
         "  engine:\n"
         "    threads: 1\n"
         "    kv_cache_memory_mb: 16\n" +
         extra;
}

// `ajet-swarm start` on 127.0.0.1 with an ephemeral port, its output drained by a thread.
class SwarmProcess {
 public:
  struct Options {
    fs::path dir;     // --exp-dir
    fs::path engine;  // --engine (empty: the real ajet-engine next to ajet-swarm)
    std::string admin_token;
    std::vector<std::string> extra;  // more flags
    // --resume: a restart continues the run in the store (ajet-swarm refuses an earlier run without
    // --resume or --fresh). false: neither flag unless `extra` has one.
    bool resume = true;
    std::vector<std::pair<std::string, std::string>> env;  // set on top of the test's environment
  };

  explicit SwarmProcess(Options options) : options_(std::move(options)) { start(); }
  ~SwarmProcess() { stop(SIGTERM); }

  void start() {
    std::vector<std::string> argv = {
        bin("ajet-swarm").string(), "start", "--port", "0", "--exp-dir", options_.dir.string(),
        "--janitor-interval",       "0.1"};
    if (!options_.engine.empty()) argv.insert(argv.end(), {"--engine", options_.engine.string()});
    if (!options_.admin_token.empty())
      argv.insert(argv.end(), {"--admin-token", options_.admin_token});
    if (options_.resume) argv.push_back("--resume");
    argv.insert(argv.end(), options_.extra.begin(), options_.extra.end());
    {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.clear();
      exited_ = false;
      status_ = -1;
    }
    Subprocess proc = Subprocess::spawn(SpawnOptions{argv, options_.env, {}});
    pid_ = proc.pid();
    reader_ = std::thread([this, p = std::make_shared<Subprocess>(std::move(proc))] {
      int status = p->wait([this](std::string line) {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(std::move(line));
        cv_.notify_all();
      });
      std::lock_guard<std::mutex> lock(mu_);
      exited_ = true;
      status_ = status;
      cv_.notify_all();
    });
    std::string ready = wait_for_line("ajet-swarm ready:", 60s);
    if (ready.empty()) {
      ADD_FAILURE() << "ajet-swarm did not become ready; output:\n" << output();
      return;
    }
    size_t at = ready.find("(port ");
    port_ = uint16_t(std::stoi(ready.substr(at + 6)));
    url_ = "http://127.0.0.1:" + std::to_string(port_);
  }

  // Sends `sig` and returns (stop() waits for the exit).
  void send(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Sends `sig` and waits for the exit (SIGKILL after `grace`); returns the wait status.
  int stop(int sig, std::chrono::milliseconds grace = 20s) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, sig);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, grace, [&] { return exited_; })) {
        lock.unlock();
        ::kill(pid_, SIGKILL);
      }
    }
    if (reader_.joinable()) reader_.join();
    pid_ = -1;
    return status_;
  }
  void restart() {
    stop(SIGTERM);
    start();
  }

  // The first line (from the start, or after `from` lines) containing `needle`; "" on timeout.
  std::string wait_for_line(const std::string& needle, std::chrono::milliseconds timeout,
                            size_t from = 0) {
    std::unique_lock<std::mutex> lock(mu_);
    std::string found;
    cv_.wait_for(lock, timeout, [&] {
      for (size_t i = from; i < lines_.size(); ++i) {
        if (lines_[i].find(needle) != std::string::npos) {
          found = lines_[i];
          return true;
        }
      }
      return exited_;
    });
    return found;
  }
  std::string output() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const auto& l : lines_) out += l + "\n";
    return out;
  }
  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  const std::string& url() const { return url_; }
  const Options& options() const { return options_; }

 private:
  Options options_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::string url_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
  bool exited_ = false;
  int status_ = -1;
  std::thread reader_;
};

// The value of one sample of a Prometheus exposition (`name{labels}` as written), or -1.
inline double sample_value(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 2));
}

// Polls `done` every 20 ms until it holds or `timeout` passes (for server-side events that have no
// push notification: engine status, janitor reclaims).
inline bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 60s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

// A loopback port nothing listens on while this lives: bound without listen(), so a connect is
// refused at once and no other process can take the port meanwhile.
class ClosedPort {
 public:
  ClosedPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t n = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
  }
  ~ClosedPort() { ::close(fd_); }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// True when `pid` no longer runs (gone, or a zombie nobody reaped yet).
inline bool process_gone(int64_t pid) {
  if (::kill(pid_t(pid), 0) != 0) return true;
  std::string stat;
  try {
    stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  } catch (...) {
    return true;
  }
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

// The engine's pid from engine_status_detail ("engine ready (pid 123, ...)"); 0 when absent.
inline int64_t pid_in(const std::string& detail) {
  size_t at = detail.find("pid ");
  if (at == std::string::npos) return 0;
  return std::atoll(detail.c_str() + at + 4);
}

struct CurlResult {
  int status = 0;
  std::string body;
  Json json() const { return Json::parse(body, nullptr, false); }
};
// curl -X METHOD URL with optional JSON body and headers; the HTTP status comes from -w.
inline CurlResult curl(const std::string& method, const std::string& url,
                       const std::string& body = "", const std::vector<std::string>& headers = {},
                       const std::string& body_file = "") {
  std::string cmd =
      "curl -s -S --max-time 60 -X " + method + " -w '\\n%{http_code}' " + shell_quote(url);
  for (const auto& h : headers) cmd += " -H " + shell_quote(h);
  if (!body_file.empty()) {
    cmd += " --data-binary @" + shell_quote(body_file);
  } else if (!body.empty()) {
    cmd += " -H 'Content-Type: application/json' --data-binary " + shell_quote(body);
  }
  Captured r = run_capture(cmd);
  CurlResult out;
  size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return out;
  out.status = std::atoi(r.out.c_str() + nl + 1);
  out.body = r.out.substr(0, nl);
  return out;
}

// The key of every episode an Api claimed in this test process (episode uuid -> openai_api_key), so
// that the episode commands any Api sends carry it, as the front requires (docs/protocol.md
// "Command API"). Tests of the refusal send their own Authorization header (or Api::raw_post).
class EpisodeKeys {
 public:
  static EpisodeKeys& all() {
    static EpisodeKeys keys;
    return keys;
  }
  void remember(const Json& claim) {
    if (!claim.is_object() || !claim.value("success", false)) return;
    std::lock_guard<std::mutex> lock(mu_);
    keys_[claim.value("episode_uuid", "")] = claim.value("openai_api_key", "");
  }
  std::string key_of(const std::string& episode_uuid) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(episode_uuid);
    return it == keys_.end() ? std::string() : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> keys_;
};

inline bool is_episode_command(const std::string& path) {
  for (const char* p : {"/end_episode", "/abort_episode", "/prepare_end_episode", "/commit_episode",
                        "/resolve_episode_group"}) {
    if (path == p) return true;
  }
  return false;
}

// One client per test thread: src/http's HttpClient against the server.
struct Api {
  explicit Api(const std::string& url) : http(url) {}
  // An episode command gets `Authorization: Bearer <the episode's key>` when an Api claimed it and
  // `headers` has no Authorization of its own.
  http::ClientResponse post(const std::string& path, const Json& body,
                            const http::Headers& headers = {}) {
    if (is_episode_command(path) && !headers.has("Authorization") && body.is_object() &&
        body.contains("episode_uuid") && body["episode_uuid"].is_string()) {
      if (std::string key = EpisodeKeys::all().key_of(body["episode_uuid"].get<std::string>());
          !key.empty()) {
        http::Headers with_key = headers;
        with_key.add("Authorization", "Bearer " + key);
        return http.post_json(path, body, with_key);
      }
    }
    return http.post_json(path, body, headers);
  }
  // As sent: no key added.
  http::ClientResponse raw_post(const std::string& path, const Json& body,
                                const http::Headers& headers = {}) {
    return http.post_json(path, body, headers);
  }
  http::ClientResponse get(const std::string& path, const http::Headers& headers = {}) {
    return http.get(path, headers);
  }
  Json status() { return http.get("/get_engine_status").json(); }
  int64_t engine_pid() {
    Json s = status();
    return s["engine_status_detail"].is_string()
               ? pid_in(s["engine_status_detail"].get<std::string>())
               : 0;
  }
  std::string engine_status() { return status().value("engine_status", ""); }
  // sync_train_config + start_engine, then waits for ENGINE.ROLLING.
  void boot(const std::string& yaml, const http::Headers& admin = {}) {
    auto r = post("/sync_train_config", Json{{"yaml_as_string", yaml}}, admin);
    ASSERT_EQ(r.status, 200) << r.body;
    r = post("/start_engine", Json::object(), admin);
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_TRUE(eventually([&] { return engine_status() == "ENGINE.ROLLING"; })) << status().dump();
  }
  Json claim(const std::string& client, const std::string& type = "train", double timeout = 60) {
    auto r = post("/claim_episode", Json{{"client_uuid", client},
                                         {"episode_type", type},
                                         {"discard_episode_timeout", timeout}});
    EXPECT_EQ(r.status, 200) << r.body;
    Json claimed = r.json();
    EpisodeKeys::all().remember(claimed);
    return claimed;
  }
  http::ClientResponse end(const std::string& client, const std::string& uuid,
                           const std::string& task, double reward) {
    return post("/end_episode",
                Json{{"client_uuid", client},
                     {"episode_uuid", uuid},
                     {"task_id", task},
                     {"workflow_output", {{"reward", reward}, {"metadata", {{"task_id", task}}}}}});
  }
  http::ClientResponse chat(const std::string& key, const Json& body,
                            const http::Headers& extra = {}) {
    http::Headers h = extra;
    h.add("Authorization", "Bearer " + key);
    return post("/v1/chat/completions", body, h);
  }
  http::HttpClient http;
};

inline Json user_chat(const std::string& content, Json extra = Json::object()) {
  Json body = {{"model", "agentjet"},
               {"messages", Json::array({{{"role", "user"}, {"content", content}}})}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

}  // namespace ajet::e2e
