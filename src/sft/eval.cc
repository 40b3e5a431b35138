#include "sft/eval.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "infer/engine.h"
#include "tasks/agent.h"
#include "tasks/builtin.h"
#include "tasks/rng.h"
#include "text/chat_template.h"

namespace ajet::sft {
namespace {

using text::OrderedJson;

// A ChatModel on an in-process inference engine: renders with the model's chat template, generates
// until the end-of-turn token, parses tool calls the way the swarm server does.
class EngineChatModel : public tasks::ChatModel {
 public:
  EngineChatModel(infer::InferenceEngine& engine, const tracking::ChatFormat& format,
                  const EvalOptions& options, uint64_t seed, std::string id)
      : engine_(engine), format_(format), options_(options), seed_(seed), id_(std::move(id)) {}

  tasks::ModelReply complete(const std::vector<text::ChatMessage>& messages,
                             const std::vector<OrderedJson>& tools) override {
    text::ChatRequest request;
    request.messages = messages;
    request.tools = tools;
    const text::RenderedChat rendered = text::render_chat(
        format_.family, request, text::RenderOptions{.add_generation_prompt = true});
    batching::GenerateRequest r;
    r.id = id_ + "-" + std::to_string(turn_);
    r.prompt = format_.tok().encode(rendered.text);
    r.max_tokens = std::min<int64_t>(
        options_.max_tokens, engine_.max_model_len() - static_cast<int64_t>(r.prompt.size()));
    if (r.max_tokens < 1)
      fail(ErrorCode::kResourceExhausted, "conversation no longer fits the context window");
    r.temperature = options_.temperature;
    r.seed = tasks::mix_seed(seed_, static_cast<uint64_t>(turn_++));
    r.stop_token_ids = {format_.end_of_turn};
    infer::GenerateResult result = engine_.generate(std::move(r)).get();
    if (result.error) throw *result.error;
    const infer::SampleOutput& sample = result.samples.at(0);
    std::vector<int32_t> ids;
    for (const batching::GeneratedToken& t : sample.tokens) ids.push_back(t.id);
    if (!ids.empty() && ids.back() == format_.end_of_turn) ids.pop_back();
    const bool length = sample.finish == batching::FinishReason::kLength;
    return tasks::reply_from_text(format_.tok().decode(ids), length ? "length" : "stop", 0);
  }

 private:
  infer::InferenceEngine& engine_;
  const tracking::ChatFormat& format_;
  const EvalOptions& options_;
  uint64_t seed_;
  std::string id_;
  int64_t turn_ = 0;
};

}  // namespace

OrderedJson EvalResult::to_json() const {
  return OrderedJson{{"episodes", episodes},
                     {"success_rate", success},
                     {"reward_mean", reward},
                     {"seconds", seconds}};
}

EvalResult evaluate(model::Qwen2Model& model, const tracking::ChatFormat& format,
                    const EvalOptions& options, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const tasks::BuiltinTask& kind = tasks::builtin_task(options.task);
  const std::vector<tasks::Task> held_out = kind.generate(tasks::GenerateOptions{
      .split = tasks::Split::kValidation, .count = options.n, .seed = options.seed, .params = {}});
  infer::InferenceEngineOptions config;
  config.threads = threads;
  config.max_running = std::max<int64_t>(1, options.parallel);
  config.cache_bytes =
      256LL << 20;  // `parallel` short episodes at a time need far less than a server
  config.quiet =
      true;  // one engine per evaluation: its sizing line would repeat at every evaluation
  infer::InferenceEngine engine(model, config);
  std::atomic<size_t> next{0};
  std::mutex mu;
  double success = 0, reward = 0;
  auto worker = [&] {
    for (size_t i = next++; i < held_out.size(); i = next++) {
      EngineChatModel chat(engine, format, options, tasks::mix_seed(options.seed, i),
                           "eval-" + std::to_string(i));
      const tasks::EpisodeResult r = kind.run_episode(held_out[i], chat);
      std::lock_guard lock(mu);
      success += r.output.is_success ? 1.0 : 0.0;
      reward += r.output.reward;
    }
  };
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < std::max<int64_t>(1, options.parallel); ++w) workers.emplace_back(worker);
  for (auto& t : workers) t.join();
  engine.stop();
  EvalResult e;
  e.episodes = static_cast<int64_t>(held_out.size());
  if (e.episodes > 0) {
    e.success = success / static_cast<double>(e.episodes);
    e.reward = reward / static_cast<double>(e.episodes);
  }
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace ajet::sft
