// `ajet-engine sft`: the warm-up before RL. Fine-tunes a model directory on chat demonstrations
// (JSONL from `ajet tasks demos`), loss on assistant tokens only, and saves the result in HF layout
// with the tokenizer; with --eval-task it plays held-out episodes before, during and after training
// (src/sft/session.h). With --candidates N it races N such runs as child processes and keeps the
// first past the gate (src/sft/race.h). This file only parses flags.
#include <filesystem>
#include <memory>
#include <set>

#include "command.h"
#include "sft/race.h"
#include "sft/session.h"

namespace ajet::engine_cli {
namespace {

struct SftArgs {
  sft::SessionOptions session;
  sft::RaceOptions race;       // with candidates > 0
  sft::RaceStage first;        // the race's first stage, with first.steps > 0
  std::string candidate_init;  // `model init` flags, split like a shell's words
};

// The race sets these itself for each stage; every other flag given goes to every stage as given.
const std::set<std::string> kRaceFlags = {"--model",
                                          "--demos",
                                          "--out",
                                          "--force",
                                          "--steps",
                                          "--warmup",
                                          "--lr",
                                          "--min-lr-ratio",
                                          "--seed",
                                          "--threads",
                                          "--max-seconds",
                                          "--stop-at-success",
                                          "--candidates",
                                          "--candidate-init",
                                          "--candidate-init-prefix",
                                          "--first-demos",
                                          "--first-steps",
                                          "--first-warmup",
                                          "--first-lr",
                                          "--first-min-lr-ratio"};

std::vector<std::string> stage_flags(const CLI::App& cmd) {
  std::vector<std::string> flags;
  for (const CLI::Option* o : cmd.get_options()) {
    const std::string name = o->get_name();
    if (o->count() == 0 || kRaceFlags.count(name) || name.rfind("--", 0) != 0) continue;
    if (o->get_expected_max() == 0) {  // a flag: given once per use
      for (size_t i = 0; i < o->count(); ++i) flags.push_back(name);
      continue;
    }
    for (const std::string& value : o->results()) flags.insert(flags.end(), {name, value});
  }
  return flags;
}

void run(SftArgs& a, const CLI::App& cmd) {
  sft::Printer out;
  if (a.race.candidates == 0) {
    sft::run_session(a.session, out);
    return;
  }
  sft::check_session_options(a.session);  // the main stage's flags, as each candidate will see them
  sft::RaceOptions& r = a.race;
  r.program = std::filesystem::read_symlink("/proc/self/exe");
  r.model = a.session.model;
  r.out = a.session.out;
  r.force = a.session.force;
  r.seed = a.session.sft.seed;
  r.threads = a.session.threads;
  r.max_seconds = static_cast<int64_t>(a.session.sft.max_seconds);
  r.main = {a.session.demos, a.session.sft.steps, a.session.sft.warmup_steps, a.session.sft.lr,
            a.session.sft.min_lr_ratio};
  if (a.first.steps > 0) r.first = a.first;
  r.gate = a.session.stop_at_success;
  for (std::string& word : CLI::detail::split_up(a.candidate_init)) {
    if (!word.empty()) r.candidate_init.push_back(std::move(word));
  }
  r.stage_flags = stage_flags(cmd);
  if (sft::run_race(r, out).winner < 0)
    fail(ErrorCode::kInternal, "no warm-up candidate produced a model");
}

void add_race_flags(CLI::App* cmd, SftArgs& a) {
  a.first.steps = 0;
  a.race.candidates = 0;  // not given: one plain run
  auto* candidates = cmd->add_option("--candidates", a.race.candidates,
                                     "Race N candidates side by side (child processes, --threads "
                                     "shared out; candidate k's --seed is "
                                     "seed + 1000k); the first past --stop-at-success wins, else "
                                     "the best by held-out success (docs/sft.md)")
                         ->check(CLI::PositiveNumber);
  cmd->add_option("--candidate-init", a.candidate_init,
                  "With --candidates: candidate k > 0 starts from its own model, `model init` with "
                  "these flags and "
                  "--seed seed + 1000k, made once at MODEL-candidate<k> (e.g. \"--preset tiny "
                  "--tokenizer DIR\")")
      ->needs(candidates);
  cmd->add_option(
         "--candidate-init-prefix", a.race.candidate_prefix,
         "With --candidate-init: candidate k's model is PREFIX<k> (default: MODEL-candidate)")
      ->needs(candidates);
  cmd->add_option("--first-demos", a.first.demos,
                  "With --candidates: demos of a first stage (no gate) before --demos")
      ->needs(candidates);
  cmd->add_option("--first-steps", a.first.steps, "Steps of the first stage (0: none)")
      ->capture_default_str()
      ->needs(candidates);
  cmd->add_option("--first-warmup", a.first.warmup, "The first stage's --warmup")
      ->capture_default_str()
      ->needs(candidates);
  cmd->add_option("--first-lr", a.first.lr, "The first stage's --lr")
      ->capture_default_str()
      ->needs(candidates);
  cmd->add_option("--first-min-lr-ratio", a.first.min_lr_ratio, "The first stage's --min-lr-ratio")
      ->capture_default_str()
      ->needs(candidates);
}

void add_eval_flags(CLI::App* cmd, sft::SessionOptions& s) {
  cmd->add_option("--eval-task", s.eval.task,
                  "Play held-out episodes of this built-in task before and after (calc, ...)");
  cmd->add_option("--eval-n", s.eval.n, "Held-out episodes per evaluation")->capture_default_str();
  cmd->add_option("--eval-seed", s.eval.seed, "Seed of the held-out tasks and of sampling")
      ->capture_default_str();
  cmd->add_option("--eval-temperature", s.eval.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--eval-max-tokens", s.eval.max_tokens, "Generated tokens per turn")
      ->capture_default_str();
  cmd->add_option("--eval-parallel", s.eval.parallel, "Episodes played at once")
      ->capture_default_str();
  cmd->add_option("--eval-every", s.eval.every,
                  "Also evaluate every N steps during training (0: only before and after)")
      ->capture_default_str();
  cmd->add_option("--stop-at-success", s.stop_at_success,
                  "Stop training after the first --eval-every evaluation whose held-out success "
                  "reaches this rate (0-1); "
                  "the lr schedule still spans --steps");
  cmd->add_flag("--eval-only", s.eval_only,
                "Only evaluate --model (no training, no --demos/--out)");
}

void add_train_flags(CLI::App* cmd, sft::SessionOptions& s) {
  cmd->add_option("--steps", s.sft.steps, "Optimizer steps")->capture_default_str();
  cmd->add_option("--lr", s.sft.lr, "Peak learning rate (AdamW)")->capture_default_str();
  cmd->add_option("--warmup", s.sft.warmup_steps, "Linear warmup steps (then cosine decay)")
      ->capture_default_str();
  cmd->add_option("--min-lr-ratio", s.sft.min_lr_ratio, "Final lr as a share of --lr")
      ->capture_default_str();
  cmd->add_option("--weight-decay", s.sft.weight_decay, "AdamW weight decay")
      ->capture_default_str();
  cmd->add_option("--batch-tokens", s.sft.batch_tokens,
                  "Tokens per step (demos packed side by side)")
      ->capture_default_str();
  cmd->add_option("--seed", s.sft.seed, "Order of demos")->capture_default_str();
  cmd->add_option("--max-demo-tokens", s.max_demo_tokens, "Skip longer demos (0: keep all)")
      ->capture_default_str();
  cmd->add_option("--min-reward", s.min_reward, "Skip demos whose reward is below this");
  cmd->add_option("--threads", s.threads, "Intra-op threads (0: all cores)")->capture_default_str();
  cmd->add_option("--workers", s.workers,
                  "Threads that each run part of a step's demos, sharing --threads between them. "
                  "1: the whole step "
                  "with all of --threads (fastest on idle cores); --threads N --workers N: one "
                  "intra-op thread each, "
                  "which keeps its speed when other jobs share the cores")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--log-every", s.log_every, "Print a step line every N steps")
      ->capture_default_str();
  cmd->add_option("--max-seconds", s.sft.max_seconds,
                  "Stop training when the next step would end after this many seconds (evaluations "
                  "included; 0: no "
                  "limit); the run then ends as if --steps were done (final evaluation, best model "
                  "kept, saved)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--fit-schedule", s.sft.fit_schedule_to_time,
                "With --max-seconds: end the lr cosine when the time ends (its length re-estimated "
                "every step from the "
                "measured step time, at most --steps), instead of cutting it off");
  cmd->add_flag("!--no-share-prefix", s.sft.share_prefix,
                "Pack every demo whole (default: the prefix a step's demos share, e.g. the system "
                "prompt, is packed once)");
}

const CommandRegistration kSft("sft", [](CLI::App& app) {
  auto a = std::make_shared<SftArgs>();
  auto* cmd = app.add_subcommand("sft",
                                 "Supervised warm-up: fine-tune a model on chat demonstrations "
                                 "(loss on assistant tokens) and save it");
  sft::SessionOptions& s = a->session;
  cmd->add_option("--model", s.model, "Model directory (HF layout with tokenizer files)")
      ->required();
  cmd->add_option("--demos", s.demos,
                  "Demonstrations JSONL ({\"messages\": [...], \"tools\"?: [...]} per line; `ajet "
                  "tasks demos`)");
  cmd->add_option("--out", s.out,
                  "Output model directory (must not exist or be empty, unless --force)");
  cmd->add_flag("--force", s.force, "Replace a non-empty output model directory");
  add_train_flags(cmd, s);
  add_eval_flags(cmd, s);
  add_race_flags(cmd, *a);
  cmd->callback([a, cmd] { run(*a, *cmd); });
});

}  // namespace
}  // namespace ajet::engine_cli
