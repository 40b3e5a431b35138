// The research controller: plans a study, runs its trials through a TrialRunner in rounds, prunes
// them at rungs (asynchronous successive halving) and on plateaus, retries crashes a bounded number
// of times, keeps to the budgets, confirms the best configuration against the base on fresh seeds
// and concludes. Every decision is one journal transaction (with its reason and numbers) made
// before it is acted on, so a controller killed at any point resumes from the journal: finished
// trials are never rerun, interrupted ones continue from their checkpoints. Single-threaded: tick()
// is one pass of the loop and can be driven step by step in tests. The notebook is rewritten after
// each pass that decided anything.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "research/journal.h"
#include "research/proposer.h"
#include "research/runner.h"
#include "research/study.h"

namespace ajet::research {

// Exit codes of `ajet research run/resume` (also in finish.flag): 0 the study concluded with at
// least one trial that reached the objective step; 1 it concluded without one (every trial failed
// or was stopped early) or failed; 2 usage errors; 128 + the signal when interrupted (resume
// continues).
inline constexpr int kExitConcluded = 0;
inline constexpr int kExitNoResult = 1;

struct ControllerOptions {
  std::filesystem::path dir;  // the study directory
  std::function<void(const std::string&)> say = [](const std::string&) {};
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds notebook_interval{10000};  // also rewritten this often while trials run
};

// The journal's phases: search (rounds of trials) → confirm (the best and the base on fresh seeds)
// → done (concluded; finish.flag written).
inline constexpr const char* kPhaseSearch = "search";
inline constexpr const char* kPhaseConfirm = "confirm";
inline constexpr const char* kPhaseDone = "done";

class Controller {
 public:
  Controller(const Study& study, Journal& journal, TrialRunner& runner, Proposer& proposer,
             ControllerOptions options);

  // Writes the plan (first start only) and takes back what the journal says was running: a run that
  // reached the objective step is recorded as completed, any other continues with --resume.
  void start();
  // One pass: 1. read the live trials' validations and decide at rungs and plateaus, 2. handle the
  // trials that ended (complete, retry, fail), 3. keep to the budgets, 4. launch pending trials,
  // 5. when nothing runs or waits: plan a round, the confirmation, or conclude. False once done.
  bool tick();
  // start(), then tick() until done or `stop`; returns the exit code. On `stop` the running trials
  // are stopped cleanly and stay `running` in the journal, for resume.
  int run(const std::atomic<bool>& stop);
  void interrupt();

  std::string phase();
  double wall_seconds() const;  // the controller's running time over every start

 private:
  struct Live {
    TrialLaunch launch;
    std::chrono::steady_clock::time_point started;
    double runtime_before = 0;  // the trial's runtime_s when this launch started
  };

  // What a new validation point decides (nullopt: nothing to record).
  struct Verdict {
    std::string kind;  // promote, stop (a rung), plateau
    std::string reason;
    Json numbers;
    bool stop = false;
  };

  TrialLaunch make_launch(const TrialRow& t, bool resume) const;
  void launch(TrialRow t, bool resume, const std::string& why);
  void collect_validations(int64_t id, const TrialLaunch& launch);
  std::optional<Verdict> judge(const TrialRow& t, int64_t step, double value);
  void handle_end(int64_t id, const TrialEnd& end);
  void stop_trial(int64_t id, const std::string& kind, const std::string& reason,
                  const Json& numbers);
  void keep_budgets();
  void launch_pending();
  void plan_next();
  void plan_round(int64_t round);
  void plan_confirmation();
  void conclude(const std::string& why);
  void finish(int exit_code);
  double trial_runtime(int64_t id, const TrialRow& t) const;
  std::optional<double> metric_of(const Validation& v) const;
  int64_t search_trials();
  // A transaction that also stores the wall time and marks the notebook stale.
  void commit(const std::function<void()>& body);
  void write_notes();

  const Study& study_;
  Journal& journal_;
  TrialRunner& runner_;
  Proposer& proposer_;
  ControllerOptions options_;
  std::map<int64_t, Live> live_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_notes_ = std::chrono::steady_clock::now();
  double wall_before_ = 0;
  bool notes_stale_ = true;
};

}  // namespace ajet::research
