// `ajet-engine sft`: the warm-up before RL. Fine-tunes a model directory on chat demonstrations (JSONL
// from `ajet tasks demos`), loss on assistant tokens only (train/sft.h), and saves the result in HF
// layout with the tokenizer. With --eval-task it also plays held-out episodes of a built-in task with
// the built-in agent before and after training (in-process inference engine, greedy by default) and
// reports the success rates, so a recipe can be checked in one command.
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "command.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "infer/engine.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "tasks/agent.h"
#include "tasks/builtin.h"
#include "tasks/rng.h"
#include "text/chat_template.h"
#include "tracking/chat_format.h"
#include "train/sft.h"

namespace ajet::engine_cli {
namespace {

namespace fs = std::filesystem;
using text::OrderedJson;

struct SftArgs {
  std::string model, demos, out;
  train::SftOptions sft;
  int64_t max_demo_tokens = 0;
  double min_reward = -1e300;
  int threads = 2;
  int workers = 1;
  double stop_at_success = -1;  // < 0: off
  bool force = false;
  int64_t log_every = 10;
  std::string eval_task;
  int64_t eval_n = 100;
  uint64_t eval_seed = 1;
  double eval_temperature = 0.0;
  int64_t eval_max_tokens = 96;
  int64_t eval_parallel = 16;
  int64_t eval_every = 0;
  bool eval_only = false;
};

// A ChatModel on an in-process inference engine: renders with the model's chat template, generates
// until the end-of-turn token, parses tool calls the way the swarm server does.
class EngineChatModel : public tasks::ChatModel {
 public:
  EngineChatModel(infer::InferenceEngine& engine, const tracking::ChatFormat& format, const SftArgs& args,
                  uint64_t seed, std::string id)
      : engine_(engine), format_(format), args_(args), seed_(seed), id_(std::move(id)) {}

  tasks::ModelReply complete(const std::vector<text::ChatMessage>& messages,
                             const std::vector<OrderedJson>& tools) override {
    text::ChatRequest request;
    request.messages = messages;
    request.tools = tools;
    const text::RenderedChat rendered =
        text::render_chat(format_.family, request, text::RenderOptions{.add_generation_prompt = true});
    batching::GenerateRequest r;
    r.id = id_ + "-" + std::to_string(turn_);
    r.prompt = format_.tok().encode(rendered.text);
    r.max_tokens = std::min<int64_t>(args_.eval_max_tokens, engine_.max_model_len() - static_cast<int64_t>(r.prompt.size()));
    if (r.max_tokens < 1) fail(ErrorCode::kResourceExhausted, "conversation no longer fits the context window");
    r.temperature = args_.eval_temperature;
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
  const SftArgs& args_;
  uint64_t seed_;
  std::string id_;
  int64_t turn_ = 0;
};

struct EvalResult {
  int64_t episodes = 0;
  double success = 0;
  double reward = 0;
  double seconds = 0;
  OrderedJson to_json() const {
    return OrderedJson{{"episodes", episodes}, {"success_rate", success}, {"reward_mean", reward}, {"seconds", seconds}};
  }
};

// Held-out episodes of args.eval_task, `eval_parallel` at a time (the engine batches their turns).
EvalResult evaluate(model::Qwen2Model& model, const tracking::ChatFormat& format, const SftArgs& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const tasks::BuiltinTask& kind = tasks::builtin_task(args.eval_task);
  const std::vector<tasks::Task> held_out = kind.generate(
      tasks::GenerateOptions{.split = tasks::Split::kValidation, .count = args.eval_n, .seed = args.eval_seed, .params = {}});
  infer::InferenceEngineOptions config;
  config.threads = args.threads;
  config.max_running = std::max<int64_t>(1, args.eval_parallel);
  config.cache_bytes = 256LL << 20;  // eval_parallel short episodes at a time need far less than a server
  config.quiet = true;  // one engine per evaluation: its sizing line would repeat at every evaluation
  infer::InferenceEngine engine(model, config);
  std::atomic<size_t> next{0};
  std::mutex mu;
  double success = 0, reward = 0;
  auto worker = [&] {
    for (size_t i = next++; i < held_out.size(); i = next++) {
      EngineChatModel chat(engine, format, args, tasks::mix_seed(args.eval_seed, i), "eval-" + std::to_string(i));
      const tasks::EpisodeResult r = kind.run_episode(held_out[i], chat);
      std::lock_guard lock(mu);
      success += r.output.is_success ? 1.0 : 0.0;
      reward += r.output.reward;
    }
  };
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < std::max<int64_t>(1, args.eval_parallel); ++w) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
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

void check_out_dir(const fs::path& out, bool force) {
  if (!fs::exists(out)) return;
  if (!fs::is_directory(out)) invalid_argument("--out " + out.string() + " exists and is not a directory");
  if (fs::is_empty(out)) return;
  if (!force) invalid_argument("--out " + out.string() + " exists and is not empty (pass --force to replace it)");
  if (!fs::exists(out / "config.json")) {
    invalid_argument("--out " + out.string() + " is not empty and holds no config.json; refusing to replace it");
  }
}

void run_sft_command(const SftArgs& args) {
  const fs::path model_dir = args.model, out = args.out;
  if (!args.eval_only) {
    if (args.demos.empty()) invalid_argument("--demos is required (unless --eval-only)");
    if (args.out.empty()) invalid_argument("--out is required (unless --eval-only)");
    check_out_dir(out, args.force);
    if (fs::weakly_canonical(out) == fs::weakly_canonical(model_dir)) invalid_argument("--out must differ from --model");
  }
  if (args.eval_only && args.eval_task.empty()) invalid_argument("--eval-only needs --eval-task");
  if (args.stop_at_success >= 0 && (args.eval_task.empty() || args.eval_every <= 0)) {
    invalid_argument("--stop-at-success needs --eval-task and --eval-every N (it stops after an evaluation during training)");
  }
  if (args.stop_at_success > 1) invalid_argument("--stop-at-success must be a success rate in [0, 1]");
  if (args.sft.fit_schedule_to_time && args.sft.max_seconds <= 0) invalid_argument("--fit-schedule needs --max-seconds S > 0");
  if (!args.eval_task.empty()) tasks::builtin_task(args.eval_task);  // names the known tasks when wrong
  model::configure_threads(args.threads);
  log().info("compute: {}", model::describe_compute_backend());
  train::keep_freed_memory();  // no page faults on every step's fresh large tensors (~35% of a tiny step)

  const text::Tokenizer tokenizer = text::Tokenizer::load(model_dir);
  const tracking::ChatFormat format = tracking::ChatFormat::from_tokenizer(tokenizer);
  model::Qwen2Model model = model::load_model_dir(model_dir);
  OrderedJson report = OrderedJson::object();
  report["model"] = model_dir.string();

  if (!args.eval_task.empty()) {
    const EvalResult before = evaluate(model, format, args);
    std::cout << "eval before: " << args.eval_task << " success " << before.success << " reward " << before.reward
              << " over " << before.episodes << " held-out episodes (" << before.seconds << " s)" << std::endl;
    report["eval_before"] = before.to_json();
  }
  if (args.eval_only) {
    std::cout << report.dump() << std::endl;
    return;
  }

  const train::DemoSet set = train::read_demos_jsonl(
      args.demos, format, train::DemoReadOptions{.max_tokens = args.max_demo_tokens, .min_reward = args.min_reward});
  int64_t tokens = 0, trained = 0;
  for (const auto& ex : set.examples) {
    tokens += static_cast<int64_t>(ex.token_ids.size());
    trained += ex.trained_tokens();
  }
  std::cout << "sft: " << set.examples.size() << " demos (" << tokens << " tokens, " << trained << " trained; skipped "
            << set.skipped_too_long << " too long, " << set.skipped_reward << " below min reward)" << std::endl;
  // The demo loss before/after is measured on the first demos only: it is a sanity check, not a metric.
  const int64_t probe_size = std::min<int64_t>(static_cast<int64_t>(set.examples.size()), 32);
  const std::vector<train::SftExample> probe(set.examples.begin(), set.examples.begin() + probe_size);
  const double loss_before = train::sft_loss(model, probe);

  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  train::SftOptions sft = args.sft;
  std::atomic<bool> stop{false};
  sft.stop = &stop;
  sft.workers = args.workers;
  std::cout << "sft: " << sft.workers << " worker thread(s) per step, " << train::sft_worker_threads(sft.workers)
            << " intra-op thread(s) each" << std::endl;
  // The best model by held-out success during training (--eval-every), kept in memory: a warm-up whose
  // success rises and falls again ends with the best one, not the last one. The evaluations of the best
  // and of the last evaluated step are kept too, so neither model is evaluated twice.
  std::vector<torch::Tensor> best_params;
  int64_t best_step = -1, last_eval_step = -1;
  EvalResult best_eval, last_eval;
  const std::vector<train::SftStep> steps = train::run_sft(model, set.examples, sft, [&](const train::SftStep& s) {
    if (s.step == 1 || s.step % std::max<int64_t>(1, args.log_every) == 0 || s.step == s.planned_steps) {
      std::printf("step %lld/%lld loss %.4f lr %.2e grad_norm %.2f demos %lld tokens %lld (shared prefix %lld) (%.2f s)\n",
                  static_cast<long long>(s.step), static_cast<long long>(s.planned_steps), s.loss, s.lr, s.grad_norm,
                  static_cast<long long>(s.examples), static_cast<long long>(s.tokens),
                  static_cast<long long>(s.shared_prefix), s.seconds);
      std::fflush(stdout);
    }
    if (!args.eval_task.empty() && args.eval_every > 0 && s.step % args.eval_every == 0 && s.step < s.planned_steps) {
      const EvalResult e = evaluate(model, format, args);
      last_eval_step = s.step;
      last_eval = e;
      if (best_step < 0 || e.success > best_eval.success) {
        torch::NoGradGuard no_grad;
        best_params.clear();
        for (const auto& p : model->parameters()) best_params.push_back(p.detach().clone());
        best_step = s.step;
        best_eval = e;
      }
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double eta = elapsed / static_cast<double>(s.step) * static_cast<double>(s.planned_steps - s.step);
      if (args.sft.max_seconds > 0) eta = std::min(eta, std::max(0.0, args.sft.max_seconds - elapsed));
      std::printf("eval at step %lld: %s held-out success %.1f%% (best %.1f%% at step %lld) over %lld episodes (%.1f s); "
                  "%.0f s so far, at most %.0f s to go\n",
                  static_cast<long long>(s.step), args.eval_task.c_str(), 100 * e.success, 100 * best_eval.success,
                  static_cast<long long>(best_step), static_cast<long long>(e.episodes), e.seconds, elapsed, eta);
      std::fflush(stdout);
      report["eval_during"].push_back(OrderedJson{{"step", s.step}, {"eval", e.to_json()}});
      if (args.stop_at_success >= 0 && e.success >= args.stop_at_success) {
        std::printf("sft: held-out success %.3f >= %.3f (--stop-at-success): stopping at step %lld of %lld\n", e.success,
                    args.stop_at_success, static_cast<long long>(s.step), static_cast<long long>(args.sft.steps));
        std::fflush(stdout);
        report["stopped_at_success"] = OrderedJson{{"step", s.step}, {"success", e.success}};
        stop = true;
      }
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (static_cast<int64_t>(steps.size()) < args.sft.steps && !stop) {
    std::printf("sft: time limit (--max-seconds %.0f) reached: stopping after step %lld of %lld (%.0f s)\n",
                args.sft.max_seconds, static_cast<long long>(steps.size()), static_cast<long long>(args.sft.steps), seconds);
    report["stopped_at_time"] = OrderedJson{{"step", static_cast<int64_t>(steps.size())}, {"seconds", seconds}};
  }
  // Process CPU time: on a shared machine it says what the run costs when wall time cannot.
  const double cpu_seconds = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const double loss_after = train::sft_loss(model, probe);
  std::cout << "sft: " << steps.size() << " steps in " << seconds << " s (" << cpu_seconds << " CPU s); demo loss " << loss_before << " -> "
            << loss_after << std::endl;
  report["steps"] = static_cast<int64_t>(steps.size());
  report["train_seconds"] = seconds;
  report["train_cpu_seconds"] = cpu_seconds;
  report["loss_before"] = loss_before;
  report["loss_after"] = loss_after;

  if (!args.eval_task.empty()) {
    const int64_t last_step = static_cast<int64_t>(steps.size());
    // A run stopped by --stop-at-success ends right after the evaluation of its last step.
    EvalResult after = last_eval_step == last_step ? last_eval : evaluate(model, format, args);
    if (!best_params.empty() && best_eval.success > after.success) {
      // Restore the best evaluated weights: success fell after that step.
      torch::NoGradGuard no_grad;
      auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(best_params[i]);
      std::printf("sft: keeping the model of step %lld (held-out success %.1f%%), not the last one (step %lld: %.1f%%)\n",
                  static_cast<long long>(best_step), 100 * best_eval.success, static_cast<long long>(last_step),
                  100 * after.success);
      report["kept_step"] = best_step;
      after = best_eval;
    } else {
      report["kept_step"] = last_step;
    }
    std::cout << "eval after: " << args.eval_task << " held-out success " << 100 * after.success << "% reward "
              << after.reward << " over " << after.episodes << " episodes (" << after.seconds << " s)" << std::endl;
    report["eval_after"] = after.to_json();
    if (args.stop_at_success >= 0 && after.success < args.stop_at_success) {
      report["gate_missed"] = OrderedJson{{"gate", args.stop_at_success}, {"success", after.success}};
      std::printf(
          "sft: WARNING: the warm-up missed its gate: held-out success %.1f%% < %.1f%% (--stop-at-success) after %lld "
          "steps.\n  RL from this model starts from few successes and gains little: RL sharpens what the model "
          "can already do but did not teach the copying itself in the measured runs (docs/sft.md). Train longer "
          "(--steps), or check the demos.\n",
          100 * after.success, 100 * args.stop_at_success, static_cast<long long>(last_step));
    }
  }
  model::save_model_dir(model, out, model::SaveOptions{.tokenizer_dir = model_dir});
  std::cout << "sft: saved " << out.string() << std::endl;
  write_file_atomic(out / "sft_report.json", report.dump(2) + "\n");
  std::cout << report.dump() << std::endl;
}

const CommandRegistration kSft("sft", [](CLI::App& app) {
  auto a = std::make_shared<SftArgs>();
  auto* cmd = app.add_subcommand(
      "sft", "Supervised warm-up: fine-tune a model on chat demonstrations (loss on assistant tokens) and save it");
  cmd->add_option("--model", a->model, "Model directory (HF layout with tokenizer files)")->required();
  cmd->add_option("--demos", a->demos, "Demonstrations JSONL ({\"messages\": [...], \"tools\"?: [...]} per line; `ajet tasks demos`)");
  cmd->add_option("--out", a->out, "Output model directory (must not exist or be empty, unless --force)");
  cmd->add_option("--steps", a->sft.steps, "Optimizer steps")->capture_default_str();
  cmd->add_option("--lr", a->sft.lr, "Peak learning rate (AdamW)")->capture_default_str();
  cmd->add_option("--warmup", a->sft.warmup_steps, "Linear warmup steps (then cosine decay)")->capture_default_str();
  cmd->add_option("--min-lr-ratio", a->sft.min_lr_ratio, "Final lr as a share of --lr")->capture_default_str();
  cmd->add_option("--weight-decay", a->sft.weight_decay, "AdamW weight decay")->capture_default_str();
  cmd->add_option("--batch-tokens", a->sft.batch_tokens, "Tokens per step (demos packed side by side)")->capture_default_str();
  cmd->add_option("--seed", a->sft.seed, "Order of demos")->capture_default_str();
  cmd->add_option("--max-demo-tokens", a->max_demo_tokens, "Skip longer demos (0: keep all)")->capture_default_str();
  cmd->add_option("--min-reward", a->min_reward, "Skip demos whose reward is below this");
  cmd->add_option("--threads", a->threads, "Intra-op threads (0: all cores)")->capture_default_str();
  cmd->add_option("--workers", a->workers,
                  "Threads that each run part of a step's demos, sharing --threads between them. 1: the whole step "
                  "with all of --threads (fastest on idle cores); --threads N --workers N: one intra-op thread each, "
                  "which keeps its speed when other jobs share the cores")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--log-every", a->log_every, "Print a step line every N steps")->capture_default_str();
  cmd->add_flag("--force", a->force, "Replace a non-empty output model directory");
  cmd->add_option("--eval-task", a->eval_task, "Play held-out episodes of this built-in task before and after (calc, ...)");
  cmd->add_option("--eval-n", a->eval_n, "Held-out episodes per evaluation")->capture_default_str();
  cmd->add_option("--eval-seed", a->eval_seed, "Seed of the held-out tasks and of sampling")->capture_default_str();
  cmd->add_option("--eval-temperature", a->eval_temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--eval-max-tokens", a->eval_max_tokens, "Generated tokens per turn")->capture_default_str();
  cmd->add_option("--eval-parallel", a->eval_parallel, "Episodes played at once")->capture_default_str();
  cmd->add_option("--stop-at-success", a->stop_at_success,
                  "Stop training after the first --eval-every evaluation whose held-out success reaches this rate (0-1); "
                  "the lr schedule still spans --steps");
  cmd->add_option("--max-seconds", a->sft.max_seconds,
                  "Stop training when the next step would end after this many seconds (evaluations included; 0: no "
                  "limit); the run then ends as if --steps were done (final evaluation, best model kept, saved)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--fit-schedule", a->sft.fit_schedule_to_time,
                "With --max-seconds: end the lr cosine when the time ends (its length re-estimated every step from the "
                "measured step time, at most --steps), instead of cutting it off");
  cmd->add_option("--eval-every", a->eval_every, "Also evaluate every N steps during training (0: only before and after)")
      ->capture_default_str();
  cmd->add_flag("!--no-share-prefix", a->sft.share_prefix,
                "Pack every demo whole (default: the prefix a step's demos share, e.g. the system prompt, is packed once)");
  cmd->add_flag("--eval-only", a->eval_only, "Only evaluate --model (no training, no --demos/--out)");
  cmd->callback([a] { run_sft_command(*a); });
});

}  // namespace
}  // namespace ajet::engine_cli
