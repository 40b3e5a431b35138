#include "sft/race.h"

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/subprocess.h"

namespace ajet::sft {
namespace {

namespace fs = std::filesystem;

// The shortest of %.15g and %.17g that reads back as x ("0.3", not "0.29999999999999999").
std::string number(double x) {
  std::string s = strprintf("%.15g", x);
  return std::strtod(s.c_str(), nullptr) == x ? s : strprintf("%.17g", x);
}

fs::path candidate_dir(const RaceOptions& o, int k) {
  return o.out.string() + "-candidate" + std::to_string(k);
}
fs::path first_dir(const RaceOptions& o, int k) { return candidate_dir(o, k).string() + "-first"; }
fs::path init_dir(const RaceOptions& o, int k) {
  if (k == 0 || o.candidate_init.empty()) return o.model;
  return (o.candidate_prefix.empty() ? o.model.string() + "-candidate" : o.candidate_prefix) +
         std::to_string(k);
}
uint64_t candidate_seed(const RaceOptions& o, int k) {
  return o.seed + 1000 * static_cast<uint64_t>(k);
}

bool has_flag(const std::vector<std::string>& flags, const std::string& name) {
  return std::any_of(flags.begin(), flags.end(), [&](const std::string& f) {
    return f == name || f.rfind(name + "=", 0) == 0;
  });
}

// What the race and its candidate threads share: which candidates are done, and the stop signal.
struct Shared {
  std::mutex mu;
  std::condition_variable changed;
  std::vector<bool> done;
  std::atomic<bool> stop{false};
};

// One candidate: its stages run one after the other as child processes, on a thread of its own (a
// child dies with the thread that started it, common/subprocess.h).
class Candidate {
 public:
  Candidate(const RaceOptions& o, int k, Printer& out, Shared& shared)
      : o_(o), k_(k), out_(out), shared_(shared) {}
  void run();
  CandidateResult result;

 private:
  void stages();
  bool run_stage(bool first, const fs::path& from, const fs::path& dir, int64_t seconds);
  void read_report(const fs::path& dir);
  void say(std::string_view line) {
    out_.line("  [candidate " + std::to_string(k_) + "] " + std::string(line));
  }
  void failed(std::string detail) {
    result.outcome = CandidateOutcome::kFailed;
    result.detail = std::move(detail);
  }

  const RaceOptions& o_;
  const int k_;
  Printer& out_;
  Shared& shared_;
};

void Candidate::run() {
  try {
    stages();
  } catch (const std::exception& e) {
    failed(e.what());
  }
  std::lock_guard lock(shared_.mu);
  shared_.done[static_cast<size_t>(k_)] = true;
  shared_.changed.notify_all();
}

// The first stage with the whole time, then the main stage with what is left of it (at least 5 s).
void Candidate::stages() {
  const std::time_t t0 =
      std::time(nullptr);  // whole seconds, as the race in scripts/run.sh counted
  fs::path from = init_dir(o_, k_);
  if (o_.first) {
    if (!run_stage(true, from, first_dir(o_, k_), o_.max_seconds)) return;
    from = first_dir(o_, k_);
  }
  int64_t left = 0;
  if (o_.max_seconds > 0) {
    left = o_.max_seconds - static_cast<int64_t>(std::time(nullptr) - t0);
    if (left < 5)
      return failed(strprintf("only %lld s left for the main stage", static_cast<long long>(left)));
  }
  if (run_stage(false, from, candidate_dir(o_, k_), left)) read_report(candidate_dir(o_, k_));
}

// Runs one stage to its end, its output prefixed; false when it failed or was stopped (result says
// which).
bool Candidate::run_stage(bool first, const fs::path& from, const fs::path& dir, int64_t seconds) {
  const RaceStage& stage = first ? *o_.first : o_.main;
  SpawnOptions spawn;
  spawn.argv = stage_arguments(o_, k_, first, from, dir, seconds);
  spawn.argv.insert(spawn.argv.begin(), o_.program.string());
  std::string command =
      o_.program.filename().string();  // the whole command line, so a log shows what ran
  for (size_t i = 1; i < spawn.argv.size(); ++i) command += " " + spawn.argv[i];
  say(strprintf("sft: %s stage, up to %lld steps: %s", first ? "first" : "main",
                static_cast<long long>(stage.steps), command.c_str()));
  auto echo = [&](std::string line) { say(line); };
  if (shared_.stop) {
    result.outcome = CandidateOutcome::kStopped;
    result.detail = "another candidate won";
    return false;
  }
  Subprocess child = Subprocess::spawn(spawn);
  while (!child.wait_some(std::chrono::milliseconds(100), echo)) {
    if (!shared_.stop) continue;
    child.terminate(std::chrono::seconds(10), echo);
    result.outcome = CandidateOutcome::kStopped;
    result.detail = "another candidate won";
    return false;
  }
  const int status = child.wait(echo);
  if (exited_cleanly(status)) return true;
  failed(strprintf("the %s stage ended with %s", first ? "first" : "main",
                   describe_exit(status).c_str()));
  return false;
}

void Candidate::read_report(const fs::path& dir) {
  const fs::path path = dir / "sft_report.json";
  const std::optional<Json> report =
      fs::exists(path) ? try_parse_json(read_file(path)) : std::nullopt;
  if (!report || !report->is_object()) return failed("no readable " + path.string());
  result.outcome = report->contains("stopped_at_success") ? CandidateOutcome::kPassed
                                                          : CandidateOutcome::kFinished;
  const auto after = report->find("eval_after");
  if (after != report->end() && after->is_object() && after->contains("success_rate") &&
      (*after)["success_rate"].is_number()) {
    result.success = (*after)["success_rate"].get<double>();
  }
}

// Candidate k's own initial model, made once by `program model init` (its output is not shown).
void make_initial_model(const RaceOptions& o, int k) {
  const fs::path dir = init_dir(o, k);
  if (dir == o.model || fs::exists(dir / "config.json")) return;
  SpawnOptions spawn;
  spawn.argv = {o.program.string(), "model", "init"};
  spawn.argv.insert(spawn.argv.end(), o.candidate_init.begin(), o.candidate_init.end());
  for (const std::string& a : {std::string("--seed"), std::to_string(candidate_seed(o, k)),
                               std::string("--out"), dir.string(), std::string("--force")}) {
    spawn.argv.push_back(a);
  }
  const CommandResult r = run_command(spawn);
  if (!exited_cleanly(r.status)) {
    fail(ErrorCode::kFailedPrecondition,
         strprintf("candidate %d's initial model (--candidate-init): model init ended with %s:\n%s",
                   k, describe_exit(r.status).c_str(), r.output.c_str()));
  }
}

// The first finished candidate (in index order) that passed the gate, or -1 once all are done
// without.
int wait_for_winner(Shared& shared, const std::vector<std::unique_ptr<Candidate>>& candidates) {
  std::unique_lock lock(shared.mu);
  for (;;) {
    bool running = false;
    for (size_t k = 0; k < candidates.size(); ++k) {
      if (!shared.done[k]) {
        running = true;
      } else if (candidates[k]->result.outcome == CandidateOutcome::kPassed) {
        return static_cast<int>(k);
      }
    }
    if (!running) return -1;
    shared.changed.wait(lock);
  }
}

// The best by held-out success of the candidates that wrote a report (the first of equals), or -1.
int best_candidate(const std::vector<CandidateResult>& results) {
  int best = -1;
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k].success) continue;
    if (best < 0 || *results[k].success > *results[static_cast<size_t>(best)].success)
      best = static_cast<int>(k);
  }
  return best;
}

// Starts the candidates in order (candidate k's initial model is made just before it starts), waits
// for the winner, stops the others.
std::vector<CandidateResult> race(const RaceOptions& o, Printer& out, int& winner) {
  Shared shared;
  shared.done.assign(static_cast<size_t>(o.candidates), false);
  std::vector<std::unique_ptr<Candidate>> candidates;
  std::vector<std::thread> threads;
  auto stop_all = [&] {
    shared.stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  };
  try {
    for (int k = 0; k < o.candidates; ++k) {
      make_initial_model(o, k);
      fs::remove_all(candidate_dir(o, k));
      fs::remove_all(first_dir(o, k));
      candidates.push_back(std::make_unique<Candidate>(o, k, out, shared));
      threads.emplace_back(&Candidate::run, candidates.back().get());
    }
    winner = wait_for_winner(shared, candidates);
  } catch (...) {
    stop_all();
    throw;
  }
  stop_all();
  std::vector<CandidateResult> results;
  for (const auto& c : candidates) results.push_back(c->result);
  return results;
}

void print_outcomes(const RaceOptions& o, const RaceResult& r, Printer& out) {
  for (size_t k = 0; k < r.candidates.size(); ++k) {
    const CandidateResult& c = r.candidates[k];
    std::string line = strprintf("sft: candidate %zu: %s", k, outcome_name(c.outcome));
    if (c.success) line += strprintf(", held-out success %.1f%%", 100 * *c.success);
    if (!c.detail.empty()) line += " (" + c.detail + ")";
    out.line(line);
  }
  if (r.winner < 0) {
    out.line("sft: no candidate produced a model");
  } else if (r.passed) {
    out.linef("sft: candidate %d passed the gate first; the others stopped: %s", r.winner,
              o.out.c_str());
  } else {
    out.linef("sft: %skeeping candidate %d, the best by held-out success (%.1f%%): %s",
              o.gate >= 0
                  ? strprintf("WARNING: no candidate reached the gate (%g); ", o.gate).c_str()
                  : "",
              r.winner, 100 * r.candidates[static_cast<size_t>(r.winner)].success.value_or(0),
              o.out.c_str());
  }
}

}  // namespace

const char* outcome_name(CandidateOutcome outcome) {
  switch (outcome) {
    case CandidateOutcome::kPassed: return "passed the gate";
    case CandidateOutcome::kFinished: return "finished below the gate";
    case CandidateOutcome::kStopped: return "stopped";
    case CandidateOutcome::kFailed: return "FAILED";
  }
  return "?";
}

void check_race_options(const RaceOptions& o) {
  if (o.candidates < 1) invalid_argument("--candidates must be at least 1");
  if (o.model.empty()) invalid_argument("--model is required");
  if (o.out.empty()) invalid_argument("--out is required");
  if (o.main.demos.empty()) invalid_argument("--demos is required");
  if (o.first && o.first->demos.empty()) invalid_argument("--first-steps needs --first-demos");
  if (o.max_seconds < 0) invalid_argument("--max-seconds must not be negative");
  if (o.gate > 1) invalid_argument("--stop-at-success must be a success rate in [0, 1]");
  if (!has_flag(o.stage_flags, "--eval-task")) {
    invalid_argument(
        "--candidates needs --eval-task (the race picks its model by held-out success)");
  }
  if (has_flag(o.stage_flags, "--eval-only"))
    invalid_argument("--candidates trains: it cannot run with --eval-only");
  if (o.gate >= 0 && !has_flag(o.stage_flags, "--eval-every")) {
    invalid_argument(
        "--stop-at-success needs --eval-task and --eval-every N (it stops after an evaluation "
        "during training)");
  }
  if (fs::exists(o.out) && !(fs::is_directory(o.out) && fs::is_empty(o.out))) {
    if (!o.force)
      invalid_argument("--out " + o.out.string() +
                       " exists and is not empty (pass --force to replace it)");
    if (!fs::exists(o.out / "config.json")) {
      invalid_argument("--out " + o.out.string() +
                       " is not empty and holds no config.json; refusing to replace it");
    }
  }
}

std::vector<std::string> stage_arguments(const RaceOptions& o, int k, bool first,
                                         const fs::path& from, const fs::path& dir,
                                         int64_t seconds) {
  const RaceStage& s = first ? *o.first : o.main;
  std::vector<std::string> args = {"sft",
                                   "--model",
                                   from.string(),
                                   "--demos",
                                   s.demos,
                                   "--out",
                                   dir.string(),
                                   "--force",
                                   "--steps",
                                   std::to_string(s.steps),
                                   "--warmup",
                                   std::to_string(s.warmup),
                                   "--lr",
                                   number(s.lr),
                                   "--min-lr-ratio",
                                   number(s.min_lr_ratio),
                                   "--seed",
                                   std::to_string(candidate_seed(o, k)),
                                   "--threads",
                                   std::to_string(std::max(1, o.threads / o.candidates))};
  args.insert(args.end(), o.stage_flags.begin(), o.stage_flags.end());
  if (!first && o.gate >= 0) args.insert(args.end(), {"--stop-at-success", number(o.gate)});
  if (seconds > 0) args.insert(args.end(), {"--max-seconds", std::to_string(seconds)});
  return args;
}

RaceResult run_race(const RaceOptions& o, Printer& out) {
  check_race_options(o);
  out.linef(
      "sft: %d candidate(s) race to %s held-out success (%s%lld main steps; %s, %d thread(s) each)",
      o.candidates, o.gate >= 0 ? strprintf("%g", o.gate).c_str() : "the best",
      o.first ? strprintf("%lld first steps, then up to ", static_cast<long long>(o.first->steps))
                    .c_str()
              : "up to ",
      static_cast<long long>(o.main.steps),
      o.max_seconds > 0 ? strprintf("at most %lld s", static_cast<long long>(o.max_seconds)).c_str()
                        : "no time limit",
      std::max(1, o.threads / o.candidates));
  RaceResult r;
  r.candidates = race(o, out, r.winner);
  r.passed = r.winner >= 0;
  if (r.winner < 0) r.winner = best_candidate(r.candidates);
  if (r.winner >= 0) {
    fs::remove_all(o.out);
    fs::rename(candidate_dir(o, r.winner), o.out);
  }
  for (int k = 0; k < o.candidates; ++k) {
    fs::remove_all(candidate_dir(o, k));
    fs::remove_all(first_dir(o, k));
  }
  print_outcomes(o, r, out);
  return r;
}

}  // namespace ajet::sft
