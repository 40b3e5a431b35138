// The research controller's pieces without processes: the study file's checks, the journal, the
// built-in proposer and the scheduler driven tick by tick against a scripted TrialRunner (each poll
// advances a trial by one validation, so nothing depends on timing).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "research/controller.h"
#include "research/journal.h"
#include "research/notebook.h"
#include "research/proposer.h"
#include "research/runner.h"
#include "research/study.h"
#include "support/scratch_dir.h"

namespace ajet::research {
namespace {
namespace fs = std::filesystem;

using TempDir = ajet::test_support::ScratchDir;

const char* kBase =
    "ajet:\n  model:\n    path: /no/model\n  trainer_common:\n    optim:\n      lr: 1.0e-4\n";

// A study over lr (log-uniform) and kl_loss_coef (choice), objective at step 8 with a rung at 4.
std::string study_text(const std::string& extra = "",
                       const std::string& stopping = "early_stopping: {rungs: [4], eta: 2}\n") {
  return "question: does lr matter?\n"
         "base: base.yaml\n"
         "objective: {metric: val/sampled_success, step: 8}\n" +
         stopping +
         "search:\n"
         "  lr: {key: ajet.trainer_common.optim.lr, log_uniform: [1.0e-5, 1.0e-3]}\n"
         "  kl: {key: ajet.trainer_common.kl_loss_coef, choice: [0.0, 0.01]}\n"
         "budget: {trials: 4, wall_seconds: 100000, trial_seconds: 100000, max_attempts: 2}\n"
         "round_size: 4\n"
         "seeds: {search: 1, confirm: [2, 3]}\n" +
         extra;
}

Study parse(const TempDir& dir, const std::string& text) {
  write_file_atomic(dir / "base.yaml", kBase);
  return parse_study(text, dir / "study.yaml", dir.path());
}

std::string parse_error(const TempDir& dir, const std::string& text) {
  try {
    parse(dir, text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(StudyFile, ParsesTheSpaceObjectiveAndBudgets) {
  TempDir dir;
  const Study s = parse(dir, study_text());
  EXPECT_EQ(s.question, "does lr matter?");
  ASSERT_EQ(s.space.size(), 2u);
  EXPECT_EQ(s.space[0].kind, Param::Kind::kLogUniform);
  EXPECT_EQ(s.space[1].choices.size(), 2u);
  EXPECT_EQ(s.objective.step, 8);
  EXPECT_EQ(validation_interval(s), 4);
  EXPECT_EQ(s.budget.trials, 4);
  EXPECT_EQ(s.confirm_seeds, (std::vector<int64_t>{2, 3}));
  const auto o = trial_overrides(s, {{"lr", 0.0002}, {"kl", 0.01}}, 7);
  std::map<std::string, std::string> m(o.begin(), o.end());
  EXPECT_EQ(m["ajet.trainer_common.optim.lr"], "0.0002");
  EXPECT_EQ(m["ajet.engine.seed"], "7");
  EXPECT_EQ(m["ajet.task_reader.shuffle_seed"], "7");
}

// Every study file under examples/research reads and checks against its base config, as `ajet
// research run` would before it starts anything.
TEST(StudyFile, TheExampleStudiesLoad) {
  int n = 0;
  for (const auto& entry :
       fs::directory_iterator(fs::path(AJET_SOURCE_DIR) / "examples/research")) {
    if (entry.path().extension() != ".yaml") continue;
    n += 1;
    try {
      const Study s = load_study(entry.path(), AJET_SOURCE_DIR);
      EXPECT_FALSE(s.space.empty()) << entry.path();
    } catch (const Error& e) {
      ADD_FAILURE() << entry.path() << ": " << e.what();
    }
  }
  EXPECT_GE(n, 1);
}

TEST(StudyFile, ErrorsNameTheKeyAndWhatWasExpected) {
  TempDir dir;
  EXPECT_NE(parse_error(dir, study_text("parallell: 2\n")).find("did you mean 'parallel'"),
            std::string::npos);
  std::string e =
      parse_error(dir,
                  "base: base.yaml\nobjective: {metric: val/x, step: 4}\nbudget: {trails: 3}\n"
                  "search:\n  r: {key: ajet.rollout.num_repeat, int: [2, 8]}\n");
  EXPECT_NE(e.find("budget.trails"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'trials'"), std::string::npos) << e;
  e = parse_error(dir,
                  "base: base.yaml\nobjective: {metric: val/x, step: 4}\n"
                  "search:\n  lr: {key: ajet.trainer_common.optim.lrr, uniform: [0.1, 0.2]}\n");
  EXPECT_NE(e.find("search.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'ajet.trainer_common.optim.lr'"), std::string::npos) << e;
  e = parse_error(dir,
                  "base: base.yaml\nobjective: {metric: val/x, step: 4}\n"
                  "search:\n  lr: {key: ajet.trainer_common.optim.lr, log_uniform: [0, 0.2]}\n");
  EXPECT_NE(e.find("above 0"), std::string::npos) << e;
  e = parse_error(dir,
                  "base: base.yaml\nobjective: {metric: val/x, step: 4}\n"
                  "search:\n  r: {key: ajet.rollout.num_repeat, choice: [4, 0]}\n");
  EXPECT_NE(e.find("search.r"), std::string::npos) << e;  // num_repeat 0 is not a valid config
  e = parse_error(dir,
                  "base: base.yaml\nobjective: {metric: reward, step: 4}\nsearch:\n"
                  "  r: {key: ajet.rollout.num_repeat, int: [2, 8]}\n");
  EXPECT_NE(e.find("objective.metric"), std::string::npos) << e;
  e = parse_error(dir, study_text("", "early_stopping: {rungs: [8]}\n"));
  EXPECT_NE(e.find("early_stopping.rungs"), std::string::npos) << e;
  e = parse_error(
      dir,
      "base: base.yaml\nobjective: {metric: val/x, step: 4}\nseeds: {search: 2, confirm: [2, 3]}\n"
      "search:\n  r: {key: ajet.rollout.num_repeat, int: [2, 8]}\n");
  EXPECT_NE(e.find("fresh seeds"), std::string::npos) << e;
  e = parse_error(dir,
                  "base: base.yaml\nobjective: {metric: val/x, step: 4}\n"
                  "search:\n  s: {key: ajet.trainer_common.total_training_steps, int: [2, 8]}\n");
  EXPECT_NE(e.find("set by the controller"), std::string::npos) << e;
  e = parse_error(dir,
                  "base: nope.yaml\nobjective: {metric: val/x, step: 4}\n"
                  "search:\n  r: {key: ajet.rollout.num_repeat, int: [2, 8]}\n");
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
}

TEST(StudyFile, TheRemoteRunnerNeedsServersAndNoMoreTrialsAtATimeThanServers) {
  TempDir dir;
  const Study s = parse(
      dir,
      study_text(
          "runner: {type: remote, servers: [\"http://10.0.0.5:10086/\", http://10.0.0.6:10086]}\n"
          "parallel: 2\n"));
  EXPECT_EQ(s.runner.type, "remote");
  EXPECT_EQ(s.runner.servers,
            (std::vector<std::string>{"http://10.0.0.5:10086", "http://10.0.0.6:10086"}));
  std::string e =
      parse_error(dir, study_text("runner: {type: remote, servers: [http://a:1]}\nparallel: 2\n"));
  EXPECT_NE(e.find("parallel: 2 trials at a time, but runner.servers lists 1 server"),
            std::string::npos)
      << e;
  e = parse_error(dir, study_text("runner: {type: remote, sever: [http://a:1]}\n"));
  EXPECT_NE(e.find("runner.sever: unknown key (did you mean 'servers'?)"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {type: remote}\n"));
  EXPECT_NE(e.find("runner.servers: missing"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {type: remote, servers: []}\n"));
  EXPECT_NE(e.find("runner.servers: expected a list of swarm server URLs"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {type: remote, servers: [10.0.0.5:10086]}\n"));
  EXPECT_NE(e.find("runner.servers[0]: expected http://HOST:PORT, got '10.0.0.5:10086'"),
            std::string::npos)
      << e;
  e = parse_error(dir, study_text("runner: {type: remote, servers: [http://a:1, http://a:1/]}\n"));
  EXPECT_NE(e.find("runner.servers[1]: repeats http://a:1"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {servers: [http://a:1]}\n"));
  EXPECT_NE(e.find("runner.servers: only for type: remote"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {type: cluster}\n"));
  EXPECT_NE(e.find("runner.type: expected local"), std::string::npos) << e;
  EXPECT_NE(e.find("got 'cluster'"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {ajet_flags: [--swarm-url, http://a:1]}\n"));
  EXPECT_NE(e.find("--swarm-url is set by the controller"), std::string::npos) << e;
  e = parse_error(dir, study_text("runner: {ajet_flags: [--force-restart]}\n"));
  EXPECT_NE(e.find("--force-restart is set by the controller"), std::string::npos) << e;
  e = parse_error(
      dir, study_text(
               "runner: {type: remote, servers: [http://a:1], ajet_flags: [--swarm-flag=--x]}\n"));
  EXPECT_NE(e.find("--swarm-flag=--x starts a front"), std::string::npos) << e;
}

TEST(StudyFile, ErrorsNameTheLine) {
  TempDir dir;
  const std::string file = (dir / "study.yaml").string();
  std::string e = parse_error(dir,
                              "base: base.yaml\n"
                              "objective: {metric: val/x, step: 4}\n"
                              "search:\n"
                              "  lr: {key: ajet.trainer_common.optim.lr, log_uniform: [0, 0.2]}\n");
  EXPECT_NE(e.find(file + ":4: search.lr.log_uniform: a log-uniform range must be above 0"),
            std::string::npos)
      << e;
  e = parse_error(dir, study_text("parallel: 1e3x\n"));
  EXPECT_NE(e.find(file + ":11: parallel: expected an integer, got '1e3x'"), std::string::npos)
      << e;
  e = parse_error(dir, "base: base.yaml\nobjective:\n  metric: val/x\n  step: 0\n");
  EXPECT_NE(e.find(file + ":4: objective.step: must be between 1 and 1000000, got 0"),
            std::string::npos)
      << e;
  // Checked against the base config: the line of the searched or fixed key.
  e = parse_error(dir, study_text("fixed:\n  ajet.rollout.num_repeat: abc\n"));
  EXPECT_NE(e.find(file + ":12: fixed.ajet.rollout.num_repeat: "), std::string::npos) << e;
}

TEST(StudyFile, ValuesAreTypedByTheConfigsRules) {
  TempDir dir;
  const Study s = parse(dir,
                        "base: base.yaml\nobjective: {metric: val/x, step: 4}\nsearch:\n"
                        "  kl: {key: ajet.trainer_common.use_kl_loss, choice: [yes, no]}\n"
                        "  group: {key: ajet.rollout.num_repeat, int: [2, 1e1]}\n"
                        "fixed: {ajet.trainer_common.val_only: off, ajet.project_name: '5'}\n");
  EXPECT_EQ(s.space[0].choices, (std::vector<Json>{true, false}));
  EXPECT_EQ(s.space[1].high, 10.0);  // "1e1" is an integer: it is integral
  EXPECT_EQ(s.fixed.at("ajet.trainer_common.val_only"), Json(false));
  EXPECT_EQ(s.fixed.at("ajet.project_name"), Json("5"));  // quoted: text
  const auto o = trial_overrides(s, {{"kl", true}, {"group", 4}}, 1);
  std::map<std::string, std::string> m(o.begin(), o.end());
  EXPECT_EQ(m["ajet.trainer_common.use_kl_loss"], "true");
  EXPECT_EQ(m["ajet.trainer_common.val_only"], "false");
}

TEST(StudyFile, AnAliasBombIsRefusedBeforeItIsRead) {
  TempDir dir;
  // Nine levels of nine aliases: ~600 bytes that name one string 9^9 (~387 million) times.
  std::string defs;
  for (int i = 1; i <= 9; ++i) {
    defs += "    a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) defs += std::string(j ? ", " : "") + "*a" + std::to_string(i - 1);
    defs += "]\n";
  }
  const std::string text = study_text("fixed:\n  ajet.task_reader.builtin.params:\n" + defs);
  const std::string e = parse_error(dir, "question: &a0 lol\n" + text.substr(text.find('\n') + 1));
  EXPECT_NE(e.find("a study file expands to more than 16 MiB (YAML aliases repeat one node"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find((dir / "study.yaml").string() + ":"), std::string::npos) << e;
}

TEST(StudyFile, ParamsAreCheckedAgainstTheSpace) {
  TempDir dir;
  const Study s = parse(dir, study_text());
  EXPECT_NO_THROW(check_params(s, {{"lr", 1e-4}, {"kl", 0.01}}));
  EXPECT_THROW(check_params(s, {{"lr", 1e-2}, {"kl", 0.01}}), Error);           // out of range
  EXPECT_THROW(check_params(s, {{"lr", 1e-4}, {"kl", 0.5}}), Error);            // not a choice
  EXPECT_THROW(check_params(s, {{"lr", 1e-4}}), Error);                         // missing
  EXPECT_THROW(check_params(s, {{"lr", 1e-4}, {"kl", 0.0}, {"x", 1}}), Error);  // unknown
  EXPECT_THROW(check_params(s, {{"lr", "fast"}, {"kl", 0.0}}), Error);          // not a number
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    const Params p = random_params(s, rng);
    EXPECT_NO_THROW(check_params(s, p));
    EXPECT_NO_THROW(check_params(s, nearby_params(s, p, rng)));
  }
}

TEST(Journal, TransactionsAreAllOrNothingAndPointsAreRecordedOnce) {
  TempDir dir;
  {
    Journal j(dir / "j.sqlite");
    j.transaction([&] {
      TrialRow t;
      t.name = "t001";
      t.params = {{"lr", 0.001}};
      j.add_trial(t);
      j.add_decision("round", std::nullopt, "first", {{"n", 1}});
    });
    EXPECT_THROW(j.transaction([&] {
      j.set_meta("phase", "done");
      throw Error(ErrorCode::kInternal, "boom");
    }),
                 Error);
    EXPECT_FALSE(j.meta("phase"));
    j.transaction([&] {
      EXPECT_TRUE(j.add_point(1, 4, 0.5));
      EXPECT_FALSE(j.add_point(1, 4, 0.9));  // the first value stays
    });
  }
  Journal j(dir / "j.sqlite");  // reopened: everything committed is there
  ASSERT_EQ(j.trials().size(), 1u);
  EXPECT_EQ(j.trials()[0].params.at("lr"), 0.001);
  ASSERT_EQ(j.points().size(), 1u);
  EXPECT_EQ(j.points()[0].value, 0.5);
  ASSERT_EQ(j.decisions().size(), 1u);
  EXPECT_EQ(j.decisions()[0].numbers["n"], 1);
}

TEST(Journal, NumericMetaValuesAreReadWholeAndAWrongOneIsNamed) {
  TempDir dir;
  Journal j(dir / "j.sqlite");
  EXPECT_FALSE(j.meta_int("round"));
  j.set_meta("round", "12");
  j.set_meta("wall_s", "3.250");
  EXPECT_EQ(j.meta_int("round"), 12);
  EXPECT_DOUBLE_EQ(*j.meta_double("wall_s"), 3.25);
  // What std::stoll read before as 12 or threw "stoll" for: each is now an error naming the key,
  // the value and the file.
  for (const std::string bad : {"12x", "", "x", "1e3"}) {
    j.set_meta("round", bad);
    try {
      j.meta_int("round");
      ADD_FAILURE() << "'" << bad << "' was read as an integer";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("meta 'round' is '" + bad + "', not an integer"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find((dir / "j.sqlite").string()), std::string::npos)
          << e.what();
    }
  }
  j.set_meta("wall_s", "fast");
  EXPECT_THROW(j.meta_double("wall_s"), Error);
}

// A scripted runner: a trial's validations are a function of its lr and seed; each poll advances
// the trial by one validation (its "checkpoint" survives restarts: progress_ is shared state). A
// trial whose lr is in crash_lrs crashes at every launch.
struct FakeWorld {
  std::map<std::string, size_t> progress;  // by trial name
  std::vector<std::string> log;            // "start t001", "resume t001", "stop t001"
  std::set<double> crash_lrs;
  std::set<double> flat_lrs;  // curves that never improve (plateau)
  std::set<double>
      lose_final_lrs;  // runs that lose their last validation (killed between step and validation)
  std::set<std::string> revalidated;
};

class FakeRunner : public TrialRunner {
 public:
  FakeRunner(FakeWorld& w, int64_t steps, int64_t every) : w_(w), steps_(steps), every_(every) {}
  std::string describe() const override { return "fake"; }
  static double lr_of(const TrialLaunch& l) {
    for (const auto& [k, v] : l.overrides) {
      if (k == "ajet.trainer_common.optim.lr") return std::stod(v);
    }
    return 1e-4;  // the base
  }
  static int64_t seed_of(const TrialLaunch& l) {
    int64_t seed = 0;
    for (const auto& [k, v] : l.overrides) {
      if (k == "ajet.engine.seed") seed = std::stoll(v);
    }
    return seed;
  }
  // Success grows with the step, fastest at lr 5e-4 (the base's 1e-4: q = 0.65, 5e-5: q = 0.5);
  // seeds add a small offset.
  double value(const TrialLaunch& l, int64_t step) const {
    const double lr = lr_of(l);
    if (w_.flat_lrs.count(lr)) return 0.3;
    const double q = 1 - std::abs(std::log10(lr / 5e-4)) / 2;
    return 0.2 + double(step) * 0.05 * q + 0.001 * double(seed_of(l));
  }
  void start(const TrialLaunch& l) override {
    w_.log.push_back((l.revalidate_step ? "validate " : l.resume ? "resume " : "start ") + l.name);
    launches_[l.trial] = l;
    running_.insert(l.trial);
  }
  std::optional<TrialEnd> poll(int64_t trial) override {
    if (!running_.count(trial)) return TrialEnd{false, "not running"};
    const TrialLaunch& l = launches_[trial];
    if (l.revalidate_step) {
      if (w_.revalidated.insert(l.name).second) return std::nullopt;
      running_.erase(trial);
      w_.log.push_back("end " + l.name);
      return TrialEnd{true, "exit code 0"};
    }
    if (w_.crash_lrs.count(lr_of(l))) {
      running_.erase(trial);
      return TrialEnd{false, "exit code 1"};
    }
    size_t& p = w_.progress[l.name];
    const size_t total = size_t(steps_ / every_) + 1;
    if (p < total) {
      ++p;
      return std::nullopt;
    }
    running_.erase(trial);
    w_.log.push_back("end " + l.name);
    return TrialEnd{true, "exit code 0"};
  }
  std::vector<Validation> validations(const TrialLaunch& l) override {
    std::vector<Validation> out;
    if (l.revalidate_step) {
      if (w_.revalidated.count(l.name)) {
        out.push_back(Validation{*l.revalidate_step,
                                 Json{{"val/sampled_success", value(l, *l.revalidate_step)}}});
      }
      return out;
    }
    const size_t p = w_.progress.count(l.name) ? w_.progress[l.name] : 0;
    for (size_t i = 0; i < p; ++i) {
      const int64_t step = int64_t(i) * every_;
      if (step == steps_ && w_.lose_final_lrs.count(lr_of(l))) continue;
      out.push_back(Validation{step, Json{{"val/sampled_success", value(l, step)}}});
    }
    return out;
  }
  int64_t last_step(const TrialLaunch& l) override {
    const size_t p = w_.progress.count(l.name) ? w_.progress[l.name] : 0;
    return p == 0 ? 0 : int64_t(p - 1) * every_;
  }
  void stop(int64_t trial) override {
    if (running_.erase(trial)) w_.log.push_back("stop " + launches_[trial].name);
  }
  std::string log_tail(const TrialLaunch& l, size_t) override {
    return "the tail of " + l.name + "'s log";
  }
  void wait(std::chrono::milliseconds) override {}

 private:
  FakeWorld& w_;
  int64_t steps_, every_;
  std::map<int64_t, TrialLaunch> launches_;
  std::set<int64_t> running_;
};

// A proposer with fixed candidates (and a malformed one it should not be trusted with).
class ListProposer : public Proposer {
 public:
  explicit ListProposer(std::vector<Params> list) : list_(std::move(list)) {}
  std::string name() const override { return "list"; }
  std::vector<std::string> hypotheses(const Study&) override { return {"lr matters"}; }
  std::vector<Params> propose(const ProposalRequest& r) override {
    std::vector<Params> out;
    while (next_ < list_.size() && int64_t(out.size()) < r.count + 1) out.push_back(list_[next_++]);
    return out;
  }
  std::optional<std::string> conclusion_prose(const ConclusionFacts&) override {
    return std::nullopt;
  }

 private:
  std::vector<Params> list_;
  size_t next_ = 0;
};

int run_to_end(Controller& c, int max_ticks = 1000) {
  c.start();
  for (int i = 0; i < max_ticks; ++i) {
    if (!c.tick()) return i;
  }
  ADD_FAILURE() << "the study did not end";
  return max_ticks;
}

std::map<std::string, TrialRow> by_name(Journal& j) {
  std::map<std::string, TrialRow> m;
  for (const TrialRow& t : j.trials()) m[t.name] = t;
  return m;
}

TEST(Controller, HalvesAtTheRungConfirmsTheBestAndConcludes) {
  TempDir dir;
  const Study s = parse(dir, study_text());
  Journal j(dir / "journal.sqlite");
  FakeWorld w;
  FakeRunner runner(w, 8, 4);
  // The base (lr 1e-4) first; then a worse, a better and a malformed candidate (dropped; the
  // built-in search fills its place).
  ListProposer proposer(
      {{{"lr", 5e-5}, {"kl", 0.0}}, {{"lr", 5e-4}, {"kl", 0.0}}, {{"lr", 1.0}, {"kl", 0.0}}});
  Controller c(s, j, runner, proposer, ControllerOptions{dir / "study"});
  run_to_end(c);
  const auto trials = by_name(j);
  ASSERT_EQ(trials.size(), 8u);  // 4 search trials + 2 x (best, base) on seeds 2 and 3
  EXPECT_EQ(trials.at("t001").role, "base");
  EXPECT_EQ(trials.at("t001").status, kCompleted);  // first at the rung: continues
  EXPECT_EQ(trials.at("t002").status, kStopped);    // 5e-5 below the base at the rung
  EXPECT_NE(trials.at("t002").reason.find("rung 4"), std::string::npos);
  EXPECT_EQ(trials.at("t003").status, kCompleted);  // 5e-4: best
  EXPECT_TRUE(trials.count("t003-seed2") && trials.count("t001-seed3"));
  EXPECT_EQ(j.meta("phase"), std::optional<std::string>(kPhaseDone));
  EXPECT_EQ(j.meta("exit_code"), std::optional<std::string>("0"));
  const std::string conclusion = j.meta("conclusion").value_or("");
  EXPECT_NE(conclusion.find("Best configuration: t003"), std::string::npos) << conclusion;
  EXPECT_NE(conclusion.find("seeds 2, 3"), std::string::npos) << conclusion;
  bool dropped = false;
  for (const Decision& d : j.decisions()) {
    if (d.kind == "round") dropped = d.numbers["dropped"].size() == 1;
  }
  EXPECT_TRUE(dropped) << "the malformed proposal is dropped and said so";
  EXPECT_TRUE(fs::exists(dir / "study" / "finish.flag"));
  const std::string notebook = read_file(dir / "study" / "notebook.md");
  for (const char* part : {"## Plan", "## Trials", "## Decision log", "## Conclusion",
                           "plots/curves.svg", "plots/param_lr.svg"}) {
    EXPECT_NE(notebook.find(part), std::string::npos) << part;
  }
  EXPECT_NE(read_file(dir / "study" / "plots" / "param_kl.svg").find("<svg"), std::string::npos);
  const std::string status = status_text(s, j);
  EXPECT_NE(status.find("best so far: t003"), std::string::npos) << status;
}

TEST(Controller, ACrashingTrialIsRetriedThenRecordedAsFailed) {
  TempDir dir;
  const Study s = parse(dir, study_text());
  Journal j(dir / "journal.sqlite");
  FakeWorld w;
  w.crash_lrs = {5e-5};
  FakeRunner runner(w, 8, 4);
  ListProposer proposer({{{"lr", 5e-5}, {"kl", 0.0}}});
  Controller c(s, j, runner, proposer, ControllerOptions{dir / "study"});
  run_to_end(c);
  const TrialRow t = by_name(j).at("t002");
  EXPECT_EQ(t.status, kFailed);
  EXPECT_EQ(t.attempts, 2);
  EXPECT_EQ(t.error, "the tail of t002's log");
  EXPECT_EQ(std::count(w.log.begin(), w.log.end(), "start t002"), 1);
  EXPECT_EQ(std::count(w.log.begin(), w.log.end(), "resume t002"),
            1);  // the retry continues the run
  int retries = 0, fails = 0;
  for (const Decision& d : j.decisions()) {
    retries += d.kind == "retry" && d.trial == t.id;
    fails += d.kind == "fail" && d.trial == t.id;
  }
  EXPECT_EQ(retries, 1);
  EXPECT_EQ(fails, 1);
  EXPECT_NE(read_file(dir / "study" / "notebook.md").find("the tail of t002's log"),
            std::string::npos);
}

TEST(Controller, ARunThatLostItsLastValidationIsValidatedFromItsCheckpoint) {
  TempDir dir;
  const Study s = parse(dir, study_text());
  Journal j(dir / "journal.sqlite");
  FakeWorld w;
  w.lose_final_lrs = {5e-4};
  FakeRunner runner(w, 8, 4);
  ListProposer proposer({{{"lr", 5e-4}, {"kl", 0.0}}});
  Controller c(s, j, runner, proposer, ControllerOptions{dir / "study"});
  run_to_end(c);
  const TrialRow t = by_name(j).at("t002");
  EXPECT_EQ(t.status, kCompleted);
  ASSERT_TRUE(t.result);
  EXPECT_NEAR(*t.result, 0.2 + 8 * 0.05 + 0.001, 1e-9);
  EXPECT_EQ(std::count(w.log.begin(), w.log.end(), "validate t002"), 1);
  int revalidations = 0;
  for (const Decision& d : j.decisions())
    revalidations += d.kind == "revalidate" && d.trial == t.id;
  EXPECT_EQ(revalidations, 1);
}

TEST(Controller, APlateauStopsAFlatTrialButNotAnImprovingOne) {
  TempDir dir;
  const Study s = parse(dir, study_text("", "early_stopping: {plateau_patience: 2}\n"));
  Journal j(dir / "journal.sqlite");
  FakeWorld w;
  w.flat_lrs = {5e-4};
  FakeRunner runner(w, 8, 2);
  ListProposer proposer({{{"lr", 5e-4}, {"kl", 0.0}}, {{"lr", 2e-4}, {"kl", 0.0}}});
  Controller c(s, j, runner, proposer, ControllerOptions{dir / "study"});
  run_to_end(c);
  const auto trials = by_name(j);
  // Flat at 0.3 (above the base's 0.22 at step 2, so the rung keeps it); after 2 more validations
  // without gain it stops.
  EXPECT_EQ(trials.at("t002").status, kStopped);
  EXPECT_NE(trials.at("t002").reason.find("plateau"), std::string::npos)
      << trials.at("t002").reason;
  EXPECT_EQ(trials.at("t001").status, kCompleted);
  EXPECT_EQ(trials.at("t003").status, kCompleted);
}

TEST(Controller, ARestartAtAnyTickRerunsNothingAndCountsEveryTrialOnce) {
  // The same study, with the controller destroyed (as if SIGKILLed: no interrupt) after every k
  // ticks and a new one started on the same journal; the runs' progress survives (their
  // checkpoints).
  for (int k : {1, 2, 3, 5}) {
    TempDir dir;
    const Study s = parse(dir, study_text());
    Journal j(dir / "journal.sqlite");
    FakeWorld w;
    bool done = false;
    for (int restart = 0; restart < 500 && !done; ++restart) {
      FakeRunner runner(w, 8, 4);
      BuiltinProposer proposer;
      Controller c(s, j, runner, proposer, ControllerOptions{dir / "study"});
      c.start();
      for (int i = 0; i < k && !done; ++i) done = !c.tick();
    }
    ASSERT_TRUE(done) << "k=" << k;
    std::map<int64_t, int> ends, fresh_starts;
    for (const Decision& d : j.decisions()) {
      if (!d.trial) continue;
      if (d.kind == "complete" || d.kind == "stop" || d.kind == "fail" || d.kind == "plateau")
        ++ends[*d.trial];
      if (d.kind == "launch") ++fresh_starts[*d.trial];
    }
    for (const TrialRow& t : j.trials()) {
      EXPECT_EQ(ends[t.id], 1) << "k=" << k << " " << t.name;
      EXPECT_EQ(fresh_starts[t.id], 1) << "k=" << k << " " << t.name;
      EXPECT_TRUE(t.status == kCompleted || t.status == kStopped) << t.name << " " << t.status;
    }
    // Nothing started after its trial ended.
    std::set<std::string> ended;
    for (const std::string& line : w.log) {
      const std::string verb = line.substr(0, line.find(' ')),
                        name = line.substr(line.find(' ') + 1);
      if (verb == "start" || verb == "resume") {
        EXPECT_FALSE(ended.count(name)) << "k=" << k << ": " << line;
      }
      if (verb == "end" || verb == "stop") ended.insert(name);
    }
    EXPECT_EQ(j.meta("phase"), std::optional<std::string>(kPhaseDone));
  }
}

TEST(Notebook, ChartsAreSelfContainedSvg) {
  const std::string line = svg_line_chart("a <b>", "step", "y", {{"t1", {{0, 0.1}, {4, 0.5}}}});
  EXPECT_EQ(line.rfind("<svg", 0), 0u);
  EXPECT_NE(line.find("a &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(line.find("<script"), std::string::npos);
  const std::string scatter =
      svg_scatter("s", "lr", "y", {{"done", {{1e-5, 0.2}, {1e-3, 0.4}}}}, true, {});
  EXPECT_NE(scatter.find("<circle"), std::string::npos);
}

// A study's curves chart holds the search trials and the confirmation runs (12 lines in the shipped
// example): no two may share a colour and a dash pattern.
TEST(Notebook, EveryLineOfAChartLooksDifferent) {
  std::vector<Series> series;
  for (int i = 0; i < 20; ++i)
    series.push_back({"t" + std::to_string(i), {{0, 0.1 * i}, {8, 0.05 * i}}});
  const std::string svg = svg_line_chart("curves", "step", "y", series);
  std::set<std::string> styles;
  size_t at = 0;
  int lines = 0;
  while ((at = svg.find("<polyline", at)) != std::string::npos) {
    const size_t end = svg.find("points=", at);
    styles.insert(svg.substr(at, end - at));  // stroke colour, width and dash, in the tag's order
    ++lines;
    at = end;
  }
  EXPECT_EQ(lines, 20);
  EXPECT_EQ(styles.size(), 20u);
}

}  // namespace
}  // namespace ajet::research
