// ajet-echo-engine: a TEST DOUBLE of `ajet-engine serve` for the front's end-to-end tests (the real
// engine is tested by tests/e2e/*_real_engine_test.cc and its own suites). Same command line, ready
// line and RPC methods, but no model: `generate` "echoes" the content of the last user message of
// the prompt (or the whole prompt for /v1/completions), token by token, then the end-of-turn token.
// That makes the model's output a test input: tool calls, stop strings, reasoning, UTF-8, lengths.
// Directives at the start of the echoed text: "HOLD\n" streams two tokens, says so on stdout
// ("request N holding"), and then waits for an abort (which it reports on stdout: "request N
// aborted"). "FLOOD\n" repeats the text, whatever max_tokens says, until aborted or kFloodTokens
// tokens per sample (for readers that stop reading). Logprobs are -0.25 per token; alternatives are
// the token and its neighbours. Trainer methods: `train_step` validates the batch like the engine
// (decode_train_batch), trains nothing and bumps the policy version; it reports what it received
// (samples, tokens, trained tokens, the reward and weight sums) in its metrics and on stdout.
// `save_checkpoint` writes DIR/global_step_<version>/echo_checkpoint.json; `--resume DIR` reads the
// version back. With AJET_ECHO_SAVE_HOLDS=1 in its environment, `save_checkpoint` writes nothing,
// says "save_checkpoint holding" and never returns (a save slower than the operator's patience).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "rpc/messages.h"
#include "rpc/router.h"
#include "rpc/server.h"
#include "text/tokenizer.h"

namespace {

using namespace ajet;

struct Running {
  std::atomic<bool> aborted{false};
};

// One whole line on stdout: generation threads print concurrently, and pieces of a `<<` chain from
// two threads would interleave into one line the front cannot read.
void say(const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::cout << line << std::endl;
}

constexpr size_t kFloodTokens = 300'000;  // per sample; about 20 MB of chat SSE for one sample
enum class Directive { kNone, kHold, kFlood };

class EchoEngine {
 public:
  explicit EchoEngine(text::Tokenizer tokenizer) : tok_(std::move(tokenizer)) {
    router_.add(std::string(rpc::kMethodGenerate),
                [this](rpc::Frame request, std::shared_ptr<rpc::ReplySink> sink) {
                  generate(rpc::decode_generate_request(request), std::move(sink));
                });
    router_.add_call(std::string(rpc::kMethodStatus), [this](const rpc::Frame&) {
      rpc::Frame f;
      size_t running = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        running = running_.size();
      }
      // The real engine's figures (engine/service.cc), made up where echoing has none: a 64-block
      // cache with one block per running request, no prefix cache hits.
      f.body = {{"policy_version", version_.load()},
                {"model", {{"name", "echo"}}},
                {"engine",
                 {{"running", running},
                  {"waiting", 0},
                  {"free_blocks", 64 - int64_t(running)},
                  {"total_blocks", 64},
                  {"block_size", 16},
                  {"tokens_generated", tokens_generated_.load()},
                  {"tokens_prefix_cached", 0}}}};
      return f;
    });
    router_.add_call(std::string(rpc::kMethodTrainStep), [this](const rpc::Frame& request) {
      return train_step(rpc::decode_train_batch(request));
    });
    router_.add_call(std::string(rpc::kMethodSaveCheckpoint),
                     [this](const rpc::Frame& request) { return save_checkpoint(request.body); });
    router_.set_on_abort([this](rpc::ConnectionId c, uint64_t id) {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = running_.find({c, id}); it != running_.end()) it->second->aborted = true;
    });
  }
  ~EchoEngine() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, state] : running_) state->aborted = true;
    }
    for (auto& t : threads_) t.join();
  }
  rpc::Router& router() { return router_; }

  void resume(const std::filesystem::path& dir) {
    Json j = Json::parse(read_file(dir / "echo_checkpoint.json"));
    version_ = j.at("policy_version").get<int64_t>();
    say("ajet-echo-engine: warn: resumed policy_version " + std::to_string(version_.load()) +
        " from " + dir.string());
  }

 private:
  rpc::Frame train_step(const rpc::TrainBatch& b) {
    if (b.rewards.empty() && b.advantages.empty())
      invalid_argument("train_step: neither rewards nor advantages");
    int64_t trained = 0;
    for (uint8_t m : b.loss_mask) trained += m;
    double reward_sum = 0, weight_sum = 0;
    for (double r : b.rewards) reward_sum += r;
    for (double w : b.weights) weight_sum += w;
    const size_t episodes =
        std::set<std::string>(b.episode_uuids.begin(), b.episode_uuids.end()).size();
    const size_t groups = std::set<std::string>(b.task_ids.begin(), b.task_ids.end()).size();
    const int64_t version = ++version_;
    rpc::Frame f;
    f.body = {{"policy_version", version},
              {"global_step", version},
              {"samples", b.rewards.size()},
              {"episodes", episodes},
              {"groups", groups},
              {"tokens", b.token_ids.size()},
              {"trained_tokens", trained},
              {"reward_sum", reward_sum},
              {"weight_sum", weight_sum},
              {"loss", 0.0}};
    // One short line (the front forwards lines with "warn" into its verbose log, up to 500 bytes).
    say("ajet-echo-engine: warn: train_step " + f.body.dump());
    return f;
  }

  rpc::Frame save_checkpoint(const Json& body) {
    if (const char* holds = std::getenv("AJET_ECHO_SAVE_HOLDS");
        holds != nullptr && std::string(holds) == "1") {
      say("ajet-echo-engine: warn: save_checkpoint holding");
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    std::filesystem::path base = body.value("dir", std::string("./saved_checkpoints"));
    const int64_t version = version_.load();
    std::filesystem::path dir = base / ("global_step_" + std::to_string(version));
    std::filesystem::create_directories(dir);
    write_file_atomic(dir / "echo_checkpoint.json",
                      Json{{"policy_version", version},
                           {"front_cursor", body.value("front_cursor", Json(nullptr))}}
                          .dump());
    rpc::Frame f;
    f.body = {{"path", std::filesystem::absolute(dir).string()},
              {"policy_version", version},
              {"global_step", version}};
    say("ajet-echo-engine: warn: saved checkpoint " + dir.string());
    return f;
  }

  void generate(rpc::GenerateRequest g, std::shared_ptr<rpc::ReplySink> sink) {
    for (int32_t id : g.prompt) {
      if (!tok_.valid_id(id))
        invalid_argument("generate: prompt token " + std::to_string(id) +
                         " is not in the vocabulary");
    }
    std::string text = tok_.decode(g.prompt, false);
    const std::string open = "<|im_start|>user\n";
    if (size_t at = text.rfind(open); at != std::string::npos) {
      text = text.substr(at + open.size());
      text = text.substr(0, text.find("<|im_end|>"));
    }
    Directive directive = Directive::kNone;
    if (text.rfind("HOLD\n", 0) == 0) {
      directive = Directive::kHold;
      text.erase(0, 5);
    } else if (text.rfind("FLOOD\n", 0) == 0) {
      directive = Directive::kFlood;
      text.erase(0, 6);
    }
    std::vector<int32_t> out = tok_.encode(text);
    if (directive == Directive::kFlood && !out.empty()) {
      const size_t once = out.size();
      while (out.size() < kFloodTokens) out.push_back(out[out.size() % once]);
      g.max_tokens = INT32_MAX;
    }
    const bool hold = directive == Directive::kHold;
    auto state = std::make_shared<Running>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_[{sink->connection_id(), sink->request_id()}] = state;
    }
    threads_.emplace_back([this, g = std::move(g), out = std::move(out), sink, state, hold] {
      emit(g, out, *sink, *state, hold);
      std::lock_guard<std::mutex> lock(mu_);
      running_.erase({sink->connection_id(), sink->request_id()});
    });
  }

  void emit(const rpc::GenerateRequest& g, std::vector<int32_t> out, rpc::ReplySink& sink,
            Running& state, bool hold) {
    const bool stop_known = !g.stop_token_ids.empty();
    if (stop_known) out.push_back(g.stop_token_ids.front());
    const int32_t vocab = int32_t(tok_.vocab_size());
    int64_t total = 0;
    std::vector<int> produced(size_t(g.n), 0);
    std::vector<bool> done(size_t(g.n), false);
    int remaining = g.n;
    auto finish = [&](int s, rpc::FinishReason why) {
      rpc::TokensEvent e;
      e.sample = s;
      e.finish_reason = why;
      e.prompt_tokens = int64_t(g.prompt.size());
      e.completion_tokens = produced[size_t(s)];
      total += produced[size_t(s)];
      done[size_t(s)] = true;
      remaining -= 1;
      sink.reply(rpc::encode_tokens_event(e));
    };
    for (size_t t = 0; remaining > 0; ++t) {
      for (int s = 0; s < g.n; ++s) {
        if (done[size_t(s)]) continue;
        if (state.aborted) {
          finish(s, rpc::FinishReason::kAbort);
          continue;
        }
        if (t >= out.size()) {
          finish(s, rpc::FinishReason::kStop);
          continue;
        }
        if (produced[size_t(s)] >= g.max_tokens) {
          finish(s, rpc::FinishReason::kLength);
          continue;
        }
        rpc::TokensEvent e;
        e.sample = s;
        e.token_ids = {out[t]};
        e.logprobs = {-0.25f};
        e.raw_logprobs = {-0.5f};
        e.policy_versions = {version_.load()};
        if (g.top_logprobs > 0) {
          e.top_k = g.top_logprobs;
          for (int k = 0; k < g.top_logprobs; ++k) {
            e.top_ids.push_back((out[t] + k) % vocab);
            e.top_logprobs.push_back(-0.25f - float(k));
          }
        }
        produced[size_t(s)] += 1;
        tokens_generated_.fetch_add(
            1);  // before the reply: a client that saw the token finds it counted
        const bool last = stop_known && t + 1 == out.size();
        if (last) {
          e.finish_reason = rpc::FinishReason::kStop;
          e.prompt_tokens = int64_t(g.prompt.size());
          e.completion_tokens = produced[size_t(s)];
          total += produced[size_t(s)];
          done[size_t(s)] = true;
          remaining -= 1;
        }
        sink.reply(rpc::encode_tokens_event(e));
      }
      if (hold && t == 1 && !state.aborted) {
        say("ajet-echo-engine: warn: request " + std::to_string(sink.request_id()) + " holding");
      }
      while (hold && t >= 1 && !state.aborted)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (t % 64 == 63 && out.size() >= kFloodTokens)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Observable for the tests (the front copies lines with "warn" into its verbose log).
    if (state.aborted)
      say("ajet-echo-engine: warn: request " + std::to_string(sink.request_id()) + " aborted");
    rpc::GenerateDone d{int64_t(g.prompt.size()), total};
    sink.done(rpc::encode_generate_done(d));
  }

  text::Tokenizer tok_;
  std::atomic<int64_t> version_{0};
  std::atomic<int64_t> tokens_generated_{0};  // status: engine.tokens_generated
  rpc::Router router_;
  std::mutex mu_;
  std::map<std::pair<rpc::ConnectionId, uint64_t>, std::shared_ptr<Running>> running_;
  std::vector<std::thread> threads_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model, listen, resume;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    if (a == "--listen") listen = argv[i + 1];
    if (a == "--resume") resume = argv[i + 1];
  }
  if (argc < 2 || std::string(argv[1]) != "serve" || model.empty() || listen.empty()) {
    std::cerr << "usage: ajet-echo-engine serve --model DIR --listen ADDRESS [ignored flags]\n";
    return 2;
  }
  try {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    EchoEngine engine(text::Tokenizer::load(model));
    if (!resume.empty()) engine.resume(resume);
    rpc::Server server(engine.router());
    server.listen(listen);
    std::cout << "ajet-engine: ready on " << server.address() << std::endl;
    int sig = 0;
    sigwait(&stop, &sig);
    server.stop();
    std::cout << "ajet-engine: stopped" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "ajet-echo-engine: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
