// Helpers for the engine process tests: a shared `tiny` model made by the real `ajet-engine model
// init`, a running `ajet-engine serve` child process (waited on through its ready line, never a
// sleep), and a collector that turns one request's reply frames into a future. No libtorch here.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/test_util.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "rpc/serve_child.h"

namespace ajet::engine::testing {

namespace fs = std::filesystem;
using model::testing::quote;
using model::testing::run_command;

inline const std::string kAjet = AJET_BINARY_DIR "/bin/ajet";
inline const std::string kEngineBinary = AJET_BINARY_DIR "/bin/ajet-engine";
inline constexpr int64_t kVocab = 259;  // the byte tokenizer: 256 bytes + 3 special tokens
inline constexpr int32_t kImStart = 257;
inline constexpr int32_t kImEnd = 258;        // eos
inline constexpr int64_t kPolicyVersion = 7;  // what the shared servers are started with

// A ChatML template (no tools) that detect_chat_family recognises as plain ChatML.
inline const char* kChatmlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}";

// Whether this libtorch can use CUDA (defined in service_test.cc, this binary's libtorch unit).
bool torch_has_cuda();

// A directory under the temp dir, unique per process, removed at exit.
inline const fs::path& process_dir() {
  struct Dir {
    fs::path path;
    Dir() {
      path = fs::temp_directory_path() / ("ajet_engine_test_" + std::to_string(::getpid()));
      fs::remove_all(path);
      fs::create_directories(path);
    }
    ~Dir() { fs::remove_all(path); }
  };
  static Dir dir;
  return dir.path;
}

// The `tiny` preset over the byte tokenizer (with a ChatML template), made once per test process by
// `ajet-engine model init`.
inline const fs::path& tiny_model_dir() {
  static const fs::path dir = [] {
    const fs::path tok = process_dir() / "tok", out = process_dir() / "tiny";
    model::testing::write_byte_tokenizer(tok);
    nlohmann::json config = {{"eos_token", "<|im_end|>"},
                             {"pad_token", "<|endoftext|>"},
                             {"bos_token", nullptr},
                             {"add_bos_token", false},
                             {"chat_template", kChatmlTemplate}};
    model::testing::write_text(tok / "tokenizer_config.json", config.dump(1));
    auto r =
        run_command(kEngineBinary + " model init --preset tiny --seed 11 --threads 1 --tokenizer " +
                    quote(tok) + " --out " + quote(out));
    if (r.exit_code != 0) throw std::runtime_error("model init failed: " + r.out);
    return out;
  }();
  return dir;
}

// A child `ajet-engine serve` (rpc::ServeChild: stdout read up to the ready line, stderr into a
// file).
class EngineProcess {
 public:
  // `extra` are appended to `serve --model DIR --listen unix:SOCK --threads 1 --kv-cache-mb 32`;
  // a `listen` address replaces unix:SOCK.
  explicit EngineProcess(std::vector<std::string> extra = {}, fs::path model = tiny_model_dir(),
                         std::string listen = "")
      : socket_(next_path(".sock")),
        child_(command(extra, model, listen.empty() ? "unix:" + socket_.string() : listen),
               next_path(".stderr")) {}

  // Reads stdout until "ajet-engine: ready on ADDRESS"; returns ADDRESS. Throws (with stdout and
  // stderr) when the process exits first; `limit` only guards against a hang.
  std::string wait_ready(std::chrono::seconds limit = std::chrono::seconds(120)) {
    return child_.wait_ready(limit);
  }
  // Reads stdout until end of file (the process closed it, i.e. exited) and waits for the exit
  // code.
  int wait_exit(std::chrono::seconds limit = std::chrono::seconds(120)) {
    return child_.wait_exit(limit);
  }

  void signal(int sig) { child_.signal(sig); }
  const std::string& address() const { return child_.address(); }
  const fs::path& socket_path() const { return socket_; }
  const std::string& stdout_text() const { return child_.stdout_text(); }
  std::string stderr_text() const { return child_.stderr_text(); }

 private:
  static fs::path next_path(const std::string& suffix) {
    static int counter = 0;
    return process_dir() / ("e" + std::to_string(counter++) + suffix);
  }
  static std::vector<std::string> command(const std::vector<std::string>& extra,
                                          const fs::path& model, const std::string& listen) {
    std::vector<std::string> args = {kEngineBinary,   "serve", "--model",   model.string(),
                                     "--listen",      listen,  "--threads", "1",
                                     "--kv-cache-mb", "32"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  fs::path socket_;
  rpc::ServeChild child_;
};

// Everything one generate request got back.
struct GenerateOutcome {
  std::vector<rpc::TokensEvent> events;   // in arrival order
  std::optional<rpc::GenerateDone> done;  // set on success
  std::optional<Error> error;             // set on an error reply
  std::vector<int32_t> ids(int sample = 0) const {
    std::vector<int32_t> out;
    for (const auto& e : events) {
      if (e.sample == sample) out.insert(out.end(), e.token_ids.begin(), e.token_ids.end());
    }
    return out;
  }
  std::vector<float> logprobs(int sample = 0, bool raw = false) const {
    std::vector<float> out;
    for (const auto& e : events) {
      if (e.sample != sample) continue;
      const auto& v = raw ? e.raw_logprobs : e.logprobs;
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  std::optional<rpc::FinishReason> finish(int sample = 0) const {
    for (const auto& e : events) {
      if (e.sample == sample && e.finish_reason) return e.finish_reason;
    }
    return std::nullopt;
  }
};

// Starts a generate request; the future is ready at its final frame. `on_first_reply` (optional)
// runs on the client's reader thread when the first tokens event arrives.
struct PendingGenerate {
  uint64_t id = 0;
  std::future<GenerateOutcome> outcome;
  std::shared_future<void> first_reply;
};

inline PendingGenerate start_generate(rpc::Client& client, const rpc::GenerateRequest& request) {
  struct State {
    std::mutex mu;
    GenerateOutcome outcome;
    std::promise<GenerateOutcome> promise;
    std::promise<void> first;
    bool got_first = false;
  };
  auto state = std::make_shared<State>();
  PendingGenerate pending;
  pending.outcome = state->promise.get_future();
  pending.first_reply = state->first.get_future().share();
  pending.id = client.start(rpc::encode_generate_request(request), [state](rpc::Frame&& frame) {
    std::lock_guard lock(state->mu);
    if (frame.kind == rpc::FrameKind::kReply) {
      state->outcome.events.push_back(rpc::decode_tokens_event(frame));
      if (!state->got_first) {
        state->got_first = true;
        state->first.set_value();
      }
      return;
    }
    if (frame.kind == rpc::FrameKind::kDone) {
      state->outcome.done = rpc::decode_generate_done(frame);
    } else {
      state->outcome.error = rpc::frame_error(frame);
    }
    if (!state->got_first) {
      state->got_first = true;
      state->first.set_value();
    }
    state->promise.set_value(std::move(state->outcome));
  });
  return pending;
}

inline GenerateOutcome generate(rpc::Client& client, const rpc::GenerateRequest& request) {
  return start_generate(client, request).outcome.get();
}

inline rpc::GenerateRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  rpc::GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.temperature = 0.0;
  return r;
}

// A prompt of `length` byte ids derived from `salt`.
inline std::vector<int32_t> prompt_of(int length, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < length; ++i) p.push_back((i * 31 + salt * 97 + 3) % 256);
  return p;
}

inline nlohmann::json status_of(rpc::Client& client) {
  return client.call(rpc::make_status_request(), std::chrono::seconds(60)).done.body;
}

}  // namespace ajet::engine::testing
