// `ajet-engine generate`: the quickest way to try a model by hand. Reads a prompt on stdin (raw text,
// or with --chat an OpenAI chat request rendered with the model's chat template), generates in this
// process (or through a running engine with --engine ADDR) and prints the text as it is produced, or
// with --logprobs one JSON object with ids, logprobs and finish reasons. With --chat the output is
// parsed for tool calls and printed as OpenAI assistant messages.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "command.h"
#include "common/error.h"
#include "common/log.h"
#include "engine/bridge.h"
#include "engine/runtime.h"
#include "engine_flags.h"
#include "hf/hf_config.h"
#include "infer/engine.h"
#include "model/model_source.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "text/chat_template.h"
#include "text/messages.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace ajet::engine_cli {
namespace {

namespace fs = std::filesystem;
using text::OrderedJson;

struct GenerateArgs {
  EngineFlags engine;
  std::string engine_address;
  std::optional<std::string> prompt;
  int32_t max_tokens = 64;
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  std::optional<int64_t> seed;
  int32_t n = 1;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool chat = false;
  bool ignore_eos = false;
  double connect_timeout_s = 10.0;
};

// What the engine (in-process or remote) delivers, in order, to the main thread.
using Item = std::variant<rpc::TokensEvent, rpc::GenerateDone, Error>;

class ItemQueue {
 public:
  void push(Item item) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
    wake_.notify_one();
  }
  Item pop() {
    std::unique_lock lock(mu_);
    wake_.wait(lock, [&] { return !items_.empty(); });
    Item item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Item> items_;
};

// Runs the request and feeds the queue; keeps whatever must stay alive while it runs.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual void start(const rpc::GenerateRequest& request, ItemQueue& queue) = 0;
};

class InProcessBackend : public Backend {
 public:
  explicit InProcessBackend(const engine::EngineOptions& options) : runtime_(engine::start_engine(options)) {}
  void start(const rpc::GenerateRequest& request, ItemQueue& queue) override {
    auto builder = std::make_shared<engine::TokensEventBuilder>(static_cast<int64_t>(request.prompt.size()), request.n,
                                                        request.top_logprobs);
    runtime_.engine->submit(engine::to_infer_request(request, "cli"), [builder, &queue](const batching::GenerateEvent& event) {
      if (event.error) {
        queue.push(Error(event.error->code(), std::string("generate: ") + event.error->what()));
        return;
      }
      queue.push(builder->next(event));
      if (event.request_finished) queue.push(builder->done());
    });
  }

 private:
  engine::EngineRuntime runtime_;
};

class RpcBackend : public Backend {
 public:
  RpcBackend(const std::string& address, std::chrono::milliseconds timeout) : client_(address) {
    rpc::RetryPolicy retry;
    retry.timeout = timeout;
    client_.connect_with_retry(retry);
  }
  // The engine's status (e.g. to find its model directory).
  Json status() { return client_.call(rpc::make_status_request(), std::chrono::seconds(30)).done.body; }
  void start(const rpc::GenerateRequest& request, ItemQueue& queue) override {
    client_.start(rpc::encode_generate_request(request), [&queue](rpc::Frame&& frame) {
      try {
        switch (frame.kind) {
          case rpc::FrameKind::kReply:
            queue.push(rpc::decode_tokens_event(frame));
            break;
          case rpc::FrameKind::kDone:
            queue.push(rpc::decode_generate_done(frame));
            break;
          default:
            queue.push(rpc::frame_error(frame));
            break;
        }
      } catch (const Error& e) {
        queue.push(e);
      }
    });
  }

 private:
  rpc::Client client_;
};

struct Sample {
  std::vector<int32_t> ids, top_ids;
  std::vector<float> logprobs, raw_logprobs, top_logprobs;
  std::vector<int64_t> versions;
  std::optional<rpc::FinishReason> finish;
};

std::string read_stdin() {
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return text;
}

// Model dir for the tokenizer and config.json: --model (or ajet.model.path of --conf); with --engine
// and neither, the directory the engine's status names.
fs::path model_dir_for(const GenerateArgs& args, RpcBackend* remote) {
  if (!args.engine.model_dir().empty()) return args.engine.model_dir();
  engine::EngineOptions resolved = args.engine.resolve();
  if (!resolved.model_dir.empty()) return resolved.model_dir;
  if (remote != nullptr) {
    const Json status = remote->status();
    return get_string(status.at("model"), "path", "engine status");
  }
  invalid_argument("--model is required (or --conf with ajet.model.path, or --engine ADDR)");
}

void run_generate(const GenerateArgs& args) {
  ItemQueue queue;  // outlives the backend, whose callbacks push into it
  std::unique_ptr<Backend> backend;
  RpcBackend* remote = nullptr;
  if (!args.engine_address.empty()) {
    auto r = std::make_unique<RpcBackend>(
        args.engine_address, std::chrono::milliseconds(static_cast<int64_t>(args.connect_timeout_s * 1000)));
    remote = r.get();
    backend = std::move(r);
  }
  const fs::path given_dir = model_dir_for(args, remote);
  if (!fs::is_directory(given_dir)) fail(ErrorCode::kNotFound, "--model " + given_dir.string() + ": not a directory");
  // A checkpoint, a merged model or a PEFT adapter: the tokenizer and config.json of what is loaded.
  const model::ModelSource source = model::resolve_model_source(given_dir);
  const fs::path tokenizer_dir = source.tokenizer_dir;
  if (!fs::exists(tokenizer_dir / "tokenizer.json")) {
    fail(ErrorCode::kNotFound, "model directory " + tokenizer_dir.string() + " has no tokenizer.json");
  }
  text::Tokenizer tokenizer = text::Tokenizer::load(tokenizer_dir);
  const hf::ModelConfig model_config = hf::load_model_config(source.weights / "config.json");
  tokenizer.pad_to_model_vocab(static_cast<size_t>(model_config.vocab_size));  // padded rows: no text
  const std::string input = args.prompt ? *args.prompt : read_stdin();

  // Prompt ids.
  std::optional<text::ChatFamily> family;
  std::vector<int32_t> prompt;
  if (args.chat) {
    const text::ChatRequest chat = text::parse_chat_request(input, args.prompt ? "--prompt" : "stdin");
    family = text::detect_chat_family(text::load_chat_template(tokenizer_dir)).family;
    const text::RenderedChat rendered = text::render_chat(*family, chat, text::RenderOptions{true});
    prompt = text::tokenize_chat(tokenizer, rendered).ids;
  } else {
    prompt = tokenizer.encode(input);
  }
  if (prompt.empty()) invalid_argument("the prompt is empty (nothing on stdin?)");

  rpc::GenerateRequest request;
  request.prompt = prompt;
  request.n = args.n;
  request.max_tokens = args.max_tokens;
  request.temperature = args.temperature;
  request.top_p = args.top_p;
  request.top_k = args.top_k;
  request.seed = args.seed;
  request.top_logprobs = args.top_logprobs;
  request.tag = "ajet-engine generate";
  std::set<int32_t> stops;
  if (!args.ignore_eos) {
    for (int64_t id : model_config.eos_token_ids) stops.insert(static_cast<int32_t>(id));
    if (auto eos = tokenizer.eos_id()) stops.insert(*eos);
  }
  request.stop_token_ids.assign(stops.begin(), stops.end());

  // The wire decoder's checks, so a bad option fails before a model is loaded, with the messages
  // `serve` would give.
  rpc::decode_generate_request(rpc::encode_generate_request(request));
  if (!backend) backend = std::make_unique<InProcessBackend>(args.engine.resolve());
  backend->start(request, queue);

  // Plain text with one sample streams as the tokens arrive.
  const bool stream = !args.logprobs && !args.chat && args.n == 1;
  text::IncrementalDecoder streamer(tokenizer);
  std::vector<Sample> samples(static_cast<size_t>(args.n));
  rpc::GenerateDone totals;
  for (bool finished = false; !finished;) {
    Item item = queue.pop();
    if (auto* error = std::get_if<Error>(&item)) throw *error;
    if (auto* done = std::get_if<rpc::GenerateDone>(&item)) {
      totals = *done;
      finished = true;
      continue;
    }
    const rpc::TokensEvent& e = std::get<rpc::TokensEvent>(item);
    Sample& s = samples.at(static_cast<size_t>(e.sample));
    s.ids.insert(s.ids.end(), e.token_ids.begin(), e.token_ids.end());
    s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    s.raw_logprobs.insert(s.raw_logprobs.end(), e.raw_logprobs.begin(), e.raw_logprobs.end());
    s.versions.insert(s.versions.end(), e.policy_versions.begin(), e.policy_versions.end());
    s.top_ids.insert(s.top_ids.end(), e.top_ids.begin(), e.top_ids.end());
    s.top_logprobs.insert(s.top_logprobs.end(), e.top_logprobs.begin(), e.top_logprobs.end());
    if (e.finish_reason) s.finish = e.finish_reason;
    if (stream) {
      for (int32_t id : e.token_ids) {
        if (!stops.count(id)) std::cout << streamer.push(id) << std::flush;
      }
    }
  }

  // The text of a sample leaves out its final stop token (the model's end of turn).
  auto sample_text = [&](const Sample& s) {
    std::vector<int32_t> ids = s.ids;
    if (s.finish == rpc::FinishReason::kStop && !ids.empty() && stops.count(ids.back())) ids.pop_back();
    return tokenizer.decode(ids);
  };
  auto message_of = [&](const Sample& s) {
    text::ParseOptions options;
    options.parse_reasoning = family == text::ChatFamily::kQwen3;
    return text::to_openai_json(text::parse_model_output(sample_text(s), options).to_message());
  };
  auto finish_name = [](const Sample& s) {
    return std::string(s.finish ? rpc::finish_reason_name(*s.finish) : "none");
  };

  if (args.logprobs) {
    OrderedJson out = {{"prompt_token_ids", prompt}, {"prompt_tokens", totals.prompt_tokens},
                       {"completion_tokens", totals.completion_tokens}};
    OrderedJson list = OrderedJson::array();
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      OrderedJson j = {{"index", i},
                       {"finish_reason", finish_name(s)},
                       {"text", sample_text(s)},
                       {"token_ids", s.ids},
                       {"logprobs", s.logprobs},
                       {"raw_logprobs", s.raw_logprobs},
                       {"policy_versions", s.versions}};
      if (args.top_logprobs > 0) {
        OrderedJson tops = OrderedJson::array();
        const size_t k = static_cast<size_t>(args.top_logprobs);
        for (size_t t = 0; t < s.ids.size(); ++t) {
          OrderedJson row = OrderedJson::array();
          for (size_t a = t * k; a < (t + 1) * k && a < s.top_ids.size(); ++a) {
            row.push_back({{"id", s.top_ids[a]}, {"logprob", s.top_logprobs[a]}});
          }
          tops.push_back(std::move(row));
        }
        j["top_logprobs"] = std::move(tops);
      }
      if (args.chat) j["message"] = message_of(s);
      list.push_back(std::move(j));
    }
    out["samples"] = std::move(list);
    std::cout << out.dump() << std::endl;
    return;
  }
  if (args.chat) {
    for (const Sample& s : samples) std::cout << message_of(s).dump() << std::endl;
    return;
  }
  if (stream) {
    std::cout << streamer.flush() << std::endl;
    std::cerr << "[" << finish_name(samples[0]) << ", " << samples[0].ids.size() << " tokens]" << std::endl;
    return;
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    std::cout << "=== sample " << i << " (" << finish_name(samples[i]) << ", " << samples[i].ids.size()
              << " tokens) ===\n"
              << sample_text(samples[i]) << std::endl;
  }
}

const CommandRegistration kGenerate("generate", [](CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate from a prompt on stdin (raw text, or a chat request with --chat)");
  args->engine.add_to(cmd);
  cmd->add_option("--engine", args->engine_address,
                  "Generate through a running `ajet-engine serve` (unix:/path or tcp:HOST:PORT) instead of in-process");
  cmd->add_option("--connect-timeout", args->connect_timeout_s, "With --engine: seconds to keep trying to connect")
      ->capture_default_str();
  cmd->add_option("--prompt", args->prompt, "The prompt text (instead of stdin)");
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate per sample")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling, (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "0: off")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed (same seed, same output)");
  cmd->add_option("--n", args->n, "Samples sharing one prefill")->capture_default_str();
  cmd->add_flag("--logprobs", args->logprobs, "Print ids, logprobs and finish reasons as JSON");
  cmd->add_option("--top-logprobs", args->top_logprobs, "With --logprobs: alternatives per token (0..20)")
      ->capture_default_str();
  cmd->add_flag("--chat", args->chat,
                "stdin is a chat request ({\"messages\": [...], \"tools\"?: [...]}); prints assistant messages");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the model's end-of-sequence tokens");
  cmd->callback([args] { run_generate(*args); });
});

}  // namespace
}  // namespace ajet::engine_cli
