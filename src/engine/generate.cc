#include "engine/generate.h"

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <variant>
#include <vector>

#include "common/error.h"
#include "engine/bridge.h"
#include "engine/runtime.h"
#include "hf/hf_config.h"
#include "infer/engine.h"
#include "model/model_source.h"
#include "rpc/client.h"
#include "rpc/messages.h"
#include "rpc/token.h"
#include "text/chat_template.h"
#include "text/messages.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace ajet::engine {
namespace {

namespace fs = std::filesystem;
using text::OrderedJson;

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
  explicit InProcessBackend(const EngineOptions& options) : runtime_(start_engine(options)) {}
  void start(const rpc::GenerateRequest& request, ItemQueue& queue) override {
    auto builder =
        std::make_shared<TokensEventBuilder>(static_cast<int64_t>(request.prompt.size()), request.n,
                                             request.top_logprobs, request.prompt_logprobs);
    runtime_.engine->submit(
        to_infer_request(request, "cli"), [builder, &queue](const batching::GenerateEvent& event) {
          if (event.error) {
            queue.push(Error(event.error->code(), std::string("generate: ") + event.error->what()));
            return;
          }
          queue.push(builder->next(event));
          if (event.request_finished) queue.push(builder->done());
        });
  }

 private:
  EngineRuntime runtime_;
};

rpc::ClientOptions client_options(const std::string& token_file) {
  rpc::ClientOptions options;
  options.token = rpc::resolve_token(token_file);
  return options;
}

class RpcBackend : public Backend {
 public:
  RpcBackend(const std::string& address, const std::string& token_file,
             std::chrono::milliseconds timeout)
      : client_(address, client_options(token_file)) {
    rpc::RetryPolicy retry;
    retry.timeout = timeout;
    client_.connect_with_retry(retry);
  }
  // The engine's status (e.g. to find its model directory).
  Json status() {
    return client_.call(rpc::make_status_request(), std::chrono::seconds(30)).done.body;
  }
  void start(const rpc::GenerateRequest& request, ItemQueue& queue) override {
    client_.start(rpc::encode_generate_request(request), [&queue](rpc::Frame&& frame) {
      try {
        switch (frame.kind) {
          case rpc::FrameKind::kReply: queue.push(rpc::decode_tokens_event(frame)); break;
          case rpc::FrameKind::kDone: queue.push(rpc::decode_generate_done(frame)); break;
          default: queue.push(rpc::frame_error(frame)); break;
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

// Model dir for the tokenizer and config.json: the engine options' (--model, or ajet.model.path of
// --conf); through a remote engine without either, the directory the engine's status names.
fs::path model_dir_for(const GenerateOptions& o, RpcBackend* remote) {
  const EngineOptions resolved = o.engine ? o.engine() : EngineOptions{};
  if (!resolved.model_dir.empty()) return resolved.model_dir;
  if (remote != nullptr) {
    const Json status = remote->status();
    return get_string(status.at("model"), "path", "engine status");
  }
  invalid_argument("--model is required (or --conf with ajet.model.path, or --engine ADDR)");
}

// The model's tokenizer, the prompt's ids and the tokens that end a sample.
struct Prompt {
  text::Tokenizer tokenizer;
  std::optional<text::ChatFamily> family;  // with chat
  std::vector<int32_t> ids;
  std::set<int32_t> stops;
};

Prompt make_prompt(const GenerateOptions& o, const fs::path& given_dir, std::istream& in) {
  if (!fs::is_directory(given_dir))
    fail(ErrorCode::kNotFound, "--model " + given_dir.string() + ": not a directory");
  // A checkpoint, a merged model or a PEFT adapter: the tokenizer and config.json of what is
  // loaded.
  const model::ModelSource source = model::resolve_model_source(given_dir);
  const fs::path tokenizer_dir = source.tokenizer_dir;
  if (!fs::exists(tokenizer_dir / "tokenizer.json")) {
    fail(ErrorCode::kNotFound,
         "model directory " + tokenizer_dir.string() + " has no tokenizer.json");
  }
  Prompt p{text::Tokenizer::load(tokenizer_dir), std::nullopt, {}, {}};
  const hf::ModelConfig model_config = hf::load_model_config(source.weights / "config.json");
  p.tokenizer.pad_to_model_vocab(
      static_cast<size_t>(model_config.vocab_size));  // padded rows: no text
  const std::string input =
      o.prompt ? *o.prompt
               : std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (o.chat) {
    const text::ChatRequest chat = text::parse_chat_request(input, o.prompt ? "--prompt" : "stdin");
    p.family = text::detect_chat_family(text::load_chat_template(tokenizer_dir)).family;
    const text::RenderedChat rendered =
        text::render_chat(*p.family, chat, text::RenderOptions{true});
    p.ids = text::tokenize_chat(p.tokenizer, rendered).ids;
  } else {
    p.ids = p.tokenizer.encode(input);
  }
  if (p.ids.empty()) invalid_argument("the prompt is empty (nothing on stdin?)");
  if (!o.ignore_eos) {
    for (int64_t id : model_config.eos_token_ids) p.stops.insert(static_cast<int32_t>(id));
    if (auto eos = p.tokenizer.eos_id()) p.stops.insert(*eos);
  }
  return p;
}

rpc::GenerateRequest make_request(const GenerateOptions& o, const Prompt& p) {
  rpc::GenerateRequest request;
  request.prompt = p.ids;
  request.n = o.n;
  request.max_tokens = o.max_tokens;
  request.temperature = o.temperature;
  request.top_p = o.top_p;
  request.top_k = o.top_k;
  request.seed = o.seed;
  request.top_logprobs = o.top_logprobs;
  request.tag = "ajet-engine generate";
  request.stop_token_ids.assign(p.stops.begin(), p.stops.end());
  // The wire decoder's checks, so a bad option fails before a model is loaded, with the messages
  // `serve` would give.
  rpc::decode_generate_request(rpc::encode_generate_request(request));
  return request;
}

void append(Sample& s, const rpc::TokensEvent& e) {
  s.ids.insert(s.ids.end(), e.token_ids.begin(), e.token_ids.end());
  s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  s.raw_logprobs.insert(s.raw_logprobs.end(), e.raw_logprobs.begin(), e.raw_logprobs.end());
  s.versions.insert(s.versions.end(), e.policy_versions.begin(), e.policy_versions.end());
  s.top_ids.insert(s.top_ids.end(), e.top_ids.begin(), e.top_ids.end());
  s.top_logprobs.insert(s.top_logprobs.end(), e.top_logprobs.begin(), e.top_logprobs.end());
  if (e.finish_reason) s.finish = e.finish_reason;
}

// Takes the queue's items until the request is done; with `streamer`, prints the text as it comes.
rpc::GenerateDone collect(ItemQueue& queue, const Prompt& p, std::vector<Sample>& samples,
                          text::IncrementalDecoder* streamer, std::ostream& out) {
  for (;;) {
    Item item = queue.pop();
    if (auto* error = std::get_if<Error>(&item)) throw *error;
    if (auto* done = std::get_if<rpc::GenerateDone>(&item)) return *done;
    const rpc::TokensEvent& e = std::get<rpc::TokensEvent>(item);
    append(samples.at(static_cast<size_t>(e.sample)), e);
    if (streamer == nullptr) continue;
    for (int32_t id : e.token_ids) {
      if (!p.stops.count(id)) out << streamer->push(id) << std::flush;
    }
  }
}

// The text of a sample leaves out its final stop token (the model's end of turn).
std::string sample_text(const Prompt& p, const Sample& s) {
  std::vector<int32_t> ids = s.ids;
  if (s.finish == rpc::FinishReason::kStop && !ids.empty() && p.stops.count(ids.back()))
    ids.pop_back();
  return p.tokenizer.decode(ids);
}

OrderedJson message_of(const Prompt& p, const Sample& s) {
  text::ParseOptions options;
  options.parse_reasoning =
      p.family == text::ChatFamily::kQwen3 || p.family == text::ChatFamily::kQwen3Thinking;
  return text::to_openai_json(text::parse_model_output(sample_text(p, s), options).to_message());
}

std::string finish_name(const Sample& s) {
  return std::string(s.finish ? rpc::finish_reason_name(*s.finish) : "none");
}

OrderedJson top_logprobs_json(const Sample& s, size_t k) {
  OrderedJson tops = OrderedJson::array();
  for (size_t t = 0; t < s.ids.size(); ++t) {
    OrderedJson row = OrderedJson::array();
    for (size_t a = t * k; a < (t + 1) * k && a < s.top_ids.size(); ++a) {
      row.push_back({{"id", s.top_ids[a]}, {"logprob", s.top_logprobs[a]}});
    }
    tops.push_back(std::move(row));
  }
  return tops;
}

OrderedJson logprobs_json(const GenerateOptions& o, const Prompt& p,
                          const std::vector<Sample>& samples, const rpc::GenerateDone& totals) {
  OrderedJson out = {{"prompt_token_ids", p.ids},
                     {"prompt_tokens", totals.prompt_tokens},
                     {"completion_tokens", totals.completion_tokens}};
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    OrderedJson j = {{"index", i},
                     {"finish_reason", finish_name(s)},
                     {"text", sample_text(p, s)},
                     {"token_ids", s.ids},
                     {"logprobs", s.logprobs},
                     {"raw_logprobs", s.raw_logprobs},
                     {"policy_versions", s.versions}};
    if (o.top_logprobs > 0)
      j["top_logprobs"] = top_logprobs_json(s, static_cast<size_t>(o.top_logprobs));
    if (o.chat) j["message"] = message_of(p, s);
    list.push_back(std::move(j));
  }
  out["samples"] = std::move(list);
  return out;
}

void print_samples(const Prompt& p, const std::vector<Sample>& samples, std::ostream& out) {
  for (size_t i = 0; i < samples.size(); ++i) {
    out << "=== sample " << i << " (" << finish_name(samples[i]) << ", " << samples[i].ids.size()
        << " tokens) ===\n"
        << sample_text(p, samples[i]) << std::endl;
  }
}

}  // namespace

void run_generate(const GenerateOptions& o, std::istream& in, std::ostream& out,
                  std::ostream& err) {
  ItemQueue queue;  // outlives the backend, whose callbacks push into it
  std::unique_ptr<Backend> backend;
  RpcBackend* remote = nullptr;
  if (!o.address.empty()) {
    auto r = std::make_unique<RpcBackend>(o.address, o.token_file, o.connect_timeout);
    remote = r.get();
    backend = std::move(r);
  }
  const Prompt p = make_prompt(o, model_dir_for(o, remote), in);
  const rpc::GenerateRequest request = make_request(o, p);
  if (!backend) backend = std::make_unique<InProcessBackend>(o.engine());
  backend->start(request, queue);

  // Plain text with one sample streams as the tokens arrive.
  const bool stream = !o.logprobs && !o.chat && o.n == 1;
  text::IncrementalDecoder streamer(p.tokenizer);
  std::vector<Sample> samples(static_cast<size_t>(o.n));
  const rpc::GenerateDone totals = collect(queue, p, samples, stream ? &streamer : nullptr, out);
  if (o.logprobs) {
    out << logprobs_json(o, p, samples, totals).dump() << std::endl;
  } else if (o.chat) {
    for (const Sample& s : samples) out << message_of(p, s).dump() << std::endl;
  } else if (stream) {
    out << streamer.flush() << std::endl;
    err << "[" << finish_name(samples[0]) << ", " << samples[0].ids.size() << " tokens]"
        << std::endl;
  } else {
    print_samples(p, samples, out);
  }
}

}  // namespace ajet::engine
