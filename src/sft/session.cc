#include "sft/session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "common/error.h"
#include "common/fs.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "sft/eval.h"
#include "tasks/builtin.h"
#include "text/tokenizer.h"

namespace ajet::sft {
namespace {

namespace fs = std::filesystem;
using text::OrderedJson;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void check_out_dir(const fs::path& out, bool force) {
  if (!fs::exists(out)) return;
  if (!fs::is_directory(out))
    invalid_argument("--out " + out.string() + " exists and is not a directory");
  if (fs::is_empty(out)) return;
  if (!force)
    invalid_argument("--out " + out.string() +
                     " exists and is not empty (pass --force to replace it)");
  if (!fs::exists(out / "config.json")) {
    invalid_argument("--out " + out.string() +
                     " is not empty and holds no config.json; refusing to replace it");
  }
}

// A session's state from loading the model to saving it: the policy of `ajet sft`, one step per
// method.
class SessionRun {
 public:
  SessionRun(const SessionOptions& o, Printer& out)
      : o_(o),
        out_(out),
        tokenizer_(text::Tokenizer::load(o.model)),
        format_(tracking::ChatFormat::from_tokenizer(tokenizer_)),
        model_(model::load_model_dir(o.model)) {
    report_["model"] = o.model;
  }
  OrderedJson run();

 private:
  EvalResult evaluate_now() { return evaluate(model_, format_, o_.eval, o_.threads); }
  void load_demos();
  std::vector<train::SftStep> train();
  void on_step(const train::SftStep& s);
  void evaluate_during(const train::SftStep& s);
  void record_training(const std::vector<train::SftStep>& steps, double seconds,
                       double cpu_seconds);
  void evaluate_after(int64_t last_step);
  void keep_best(int64_t last_step, EvalResult& after);

  const SessionOptions& o_;
  Printer& out_;
  const text::Tokenizer tokenizer_;
  const tracking::ChatFormat format_;
  model::Qwen2Model model_;
  OrderedJson report_ = OrderedJson::object();
  train::DemoSet set_;
  std::vector<train::SftExample>
      probe_;  // the first demos: the loss before/after is a sanity check
  double loss_before_ = 0;
  Clock::time_point t0_;
  std::atomic<bool> stop_{false};
  // The best model by held-out success during training (--eval-every), kept in memory: a warm-up
  // whose success rises and falls again ends with the best one, not the last one. The evaluations
  // of the best and of the last evaluated step are kept too, so neither model is evaluated twice.
  std::vector<torch::Tensor> best_params_;
  int64_t best_step_ = -1, last_eval_step_ = -1;
  EvalResult best_eval_, last_eval_;
};

OrderedJson SessionRun::run() {
  if (!o_.eval.task.empty()) {
    const EvalResult before = evaluate_now();
    out_.linef("eval before: %s success %g reward %g over %lld held-out episodes (%g s)",
               o_.eval.task.c_str(), before.success, before.reward,
               static_cast<long long>(before.episodes), before.seconds);
    report_["eval_before"] = before.to_json();
  }
  if (o_.eval_only) {
    out_.line(report_.dump());
    return report_;
  }
  load_demos();
  const std::clock_t cpu0 = std::clock();
  const std::vector<train::SftStep> steps = train();
  const double seconds = seconds_since(t0_);
  // Process CPU time: on a shared machine it says what the run costs when wall time cannot.
  record_training(steps, seconds, static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC);
  if (!o_.eval.task.empty()) evaluate_after(static_cast<int64_t>(steps.size()));
  model::save_model_dir(model_, o_.out, model::SaveOptions{.tokenizer_dir = o_.model});
  out_.line("sft: saved " + o_.out);
  write_file_atomic(fs::path(o_.out) / "sft_report.json", report_.dump(2) + "\n");
  out_.line(report_.dump());
  return report_;
}

void SessionRun::load_demos() {
  set_ = train::read_demos_jsonl(
      o_.demos, format_,
      train::DemoReadOptions{.max_tokens = o_.max_demo_tokens, .min_reward = o_.min_reward});
  int64_t tokens = 0, trained = 0;
  for (const auto& ex : set_.examples) {
    tokens += static_cast<int64_t>(ex.token_ids.size());
    trained += ex.trained_tokens();
  }
  out_.linef(
      "sft: %zu demos (%lld tokens, %lld trained; skipped %lld too long, %lld below min reward)",
      set_.examples.size(), static_cast<long long>(tokens), static_cast<long long>(trained),
      static_cast<long long>(set_.skipped_too_long), static_cast<long long>(set_.skipped_reward));
  const int64_t probe_size = std::min<int64_t>(static_cast<int64_t>(set_.examples.size()), 32);
  probe_.assign(set_.examples.begin(), set_.examples.begin() + probe_size);
  loss_before_ = train::sft_loss(model_, probe_);
}

std::vector<train::SftStep> SessionRun::train() {
  t0_ = Clock::now();
  train::SftOptions sft = o_.sft;
  sft.stop = &stop_;
  sft.workers = o_.workers;
  out_.linef("sft: %lld worker thread(s) per step, %d intra-op thread(s) each",
             static_cast<long long>(sft.workers), train::sft_worker_threads(sft.workers));
  return train::run_sft(model_, set_.examples, sft, [&](const train::SftStep& s) { on_step(s); });
}

void SessionRun::on_step(const train::SftStep& s) {
  if (s.step == 1 || s.step % std::max<int64_t>(1, o_.log_every) == 0 ||
      s.step == s.planned_steps) {
    out_.linef(
        "step %lld/%lld loss %.4f lr %.2e grad_norm %.2f demos %lld tokens %lld (shared prefix "
        "%lld) (%.2f s)",
        static_cast<long long>(s.step), static_cast<long long>(s.planned_steps), s.loss, s.lr,
        s.grad_norm, static_cast<long long>(s.examples), static_cast<long long>(s.tokens),
        static_cast<long long>(s.shared_prefix), s.seconds);
  }
  if (!o_.eval.task.empty() && o_.eval.every > 0 && s.step % o_.eval.every == 0 &&
      s.step < s.planned_steps) {
    evaluate_during(s);
  }
}

void SessionRun::evaluate_during(const train::SftStep& s) {
  const EvalResult e = evaluate_now();
  last_eval_step_ = s.step;
  last_eval_ = e;
  if (best_step_ < 0 || e.success > best_eval_.success) {
    torch::NoGradGuard no_grad;
    best_params_.clear();
    for (const auto& p : model_->parameters()) best_params_.push_back(p.detach().clone());
    best_step_ = s.step;
    best_eval_ = e;
  }
  const double elapsed = seconds_since(t0_);
  double eta =
      elapsed / static_cast<double>(s.step) * static_cast<double>(s.planned_steps - s.step);
  if (o_.sft.max_seconds > 0) eta = std::min(eta, std::max(0.0, o_.sft.max_seconds - elapsed));
  out_.linef(
      "eval at step %lld: %s held-out success %.1f%% (best %.1f%% at step %lld) over %lld episodes "
      "(%.1f s); "
      "%.0f s so far, at most %.0f s to go",
      static_cast<long long>(s.step), o_.eval.task.c_str(), 100 * e.success,
      100 * best_eval_.success, static_cast<long long>(best_step_),
      static_cast<long long>(e.episodes), e.seconds, elapsed, eta);
  report_["eval_during"].push_back(OrderedJson{{"step", s.step}, {"eval", e.to_json()}});
  if (o_.stop_at_success >= 0 && e.success >= o_.stop_at_success) {
    out_.linef(
        "sft: held-out success %.3f >= %.3f (--stop-at-success): stopping at step %lld of %lld",
        e.success, o_.stop_at_success, static_cast<long long>(s.step),
        static_cast<long long>(o_.sft.steps));
    report_["stopped_at_success"] = OrderedJson{{"step", s.step}, {"success", e.success}};
    stop_ = true;
  }
}

void SessionRun::record_training(const std::vector<train::SftStep>& steps, double seconds,
                                 double cpu_seconds) {
  const auto done = static_cast<int64_t>(steps.size());
  if (done < o_.sft.steps && !stop_) {
    out_.linef(
        "sft: time limit (--max-seconds %.0f) reached: stopping after step %lld of %lld (%.0f s)",
        o_.sft.max_seconds, static_cast<long long>(done), static_cast<long long>(o_.sft.steps),
        seconds);
    report_["stopped_at_time"] = OrderedJson{{"step", done}, {"seconds", seconds}};
  }
  const double loss_after = train::sft_loss(model_, probe_);
  out_.linef("sft: %lld steps in %g s (%g CPU s); demo loss %g -> %g", static_cast<long long>(done),
             seconds, cpu_seconds, loss_before_, loss_after);
  report_["steps"] = done;
  report_["train_seconds"] = seconds;
  report_["train_cpu_seconds"] = cpu_seconds;
  report_["loss_before"] = loss_before_;
  report_["loss_after"] = loss_after;
}

void SessionRun::evaluate_after(int64_t last_step) {
  // A run stopped by --stop-at-success ends right after the evaluation of its last step.
  EvalResult after = last_eval_step_ == last_step ? last_eval_ : evaluate_now();
  keep_best(last_step, after);
  out_.linef("eval after: %s held-out success %g%% reward %g over %lld episodes (%g s)",
             o_.eval.task.c_str(), 100 * after.success, after.reward,
             static_cast<long long>(after.episodes), after.seconds);
  report_["eval_after"] = after.to_json();
  if (o_.stop_at_success >= 0 && after.success < o_.stop_at_success) {
    report_["gate_missed"] = OrderedJson{{"gate", o_.stop_at_success}, {"success", after.success}};
    out_.linef(
        "sft: WARNING: the warm-up missed its gate: held-out success %.1f%% < %.1f%% "
        "(--stop-at-success) after %lld "
        "steps.\n  RL from this model starts from few successes and gains little: RL sharpens what "
        "the model "
        "can already do but did not teach the copying itself in the measured runs (docs/sft.md). "
        "Train longer "
        "(--steps), or check the demos.",
        100 * after.success, 100 * o_.stop_at_success, static_cast<long long>(last_step));
  }
}

// Restores the best evaluated weights when success fell after that step.
void SessionRun::keep_best(int64_t last_step, EvalResult& after) {
  if (best_params_.empty() || best_eval_.success <= after.success) {
    report_["kept_step"] = last_step;
    return;
  }
  torch::NoGradGuard no_grad;
  auto params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(best_params_[i]);
  out_.linef(
      "sft: keeping the model of step %lld (held-out success %.1f%%), not the last one (step %lld: "
      "%.1f%%)",
      static_cast<long long>(best_step_), 100 * best_eval_.success,
      static_cast<long long>(last_step), 100 * after.success);
  report_["kept_step"] = best_step_;
  after = best_eval_;
}

}  // namespace

void check_session_options(const SessionOptions& o) {
  if (!o.eval_only) {
    if (o.demos.empty()) invalid_argument("--demos is required (unless --eval-only)");
    if (o.out.empty()) invalid_argument("--out is required (unless --eval-only)");
    check_out_dir(o.out, o.force);
    if (fs::weakly_canonical(o.out) == fs::weakly_canonical(o.model))
      invalid_argument("--out must differ from --model");
  }
  if (o.eval_only && o.eval.task.empty()) invalid_argument("--eval-only needs --eval-task");
  if (o.stop_at_success >= 0 && (o.eval.task.empty() || o.eval.every <= 0)) {
    invalid_argument(
        "--stop-at-success needs --eval-task and --eval-every N (it stops after an evaluation "
        "during training)");
  }
  if (o.stop_at_success > 1) invalid_argument("--stop-at-success must be a success rate in [0, 1]");
  if (o.sft.fit_schedule_to_time && o.sft.max_seconds <= 0)
    invalid_argument("--fit-schedule needs --max-seconds S > 0");
  if (!o.eval.task.empty()) tasks::builtin_task(o.eval.task);  // names the known tasks when wrong
}

OrderedJson run_session(const SessionOptions& options, Printer& out) {
  check_session_options(options);
  model::configure_threads(options.threads);
  out.line("compute: " + model::describe_compute_backend());
  train::keep_freed_memory();  // no page faults on every step's fresh large tensors (~35% of a tiny
                               // step)
  SessionRun session(options, out);
  return session.run();
}

}  // namespace ajet::sft
