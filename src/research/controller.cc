#include "research/controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/clock.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "config/load.h"
#include "research/notebook.h"

namespace ajet::research {
namespace fs = std::filesystem;
namespace {

constexpr size_t kLogTailLines = 20;

bool is_search(const TrialRow& t) { return t.role == "search" || t.role == "base"; }

std::string number_text(double v) { return fmt::format("{:.4g}", v); }

// The base config's own values of the searched keys (for the table's diffs and the plots).
Params base_params(const Study& study) {
  Params out;
  try {
    const Json base = config::to_json(config::load_config_file(study.base).config);
    for (const Param& p : study.space) {
      std::string pointer = "/" + p.key;
      std::replace(pointer.begin(), pointer.end(), '.', '/');
      const Json::json_pointer ptr(pointer);
      if (base.contains(ptr) && !base.at(ptr).is_null()) out[p.name] = base.at(ptr);
    }
  } catch (const std::exception& e) {
    log().warn("research: cannot read the base config's values: {}", e.what());
  }
  return out;
}

}  // namespace

Controller::Controller(const Study& study, Journal& journal, TrialRunner& runner,
                       Proposer& proposer, ControllerOptions options)
    : study_(study),
      journal_(journal),
      runner_(runner),
      proposer_(proposer),
      options_(std::move(options)) {
  if (const auto w = journal_.meta_double("wall_s")) wall_before_ = *w;
}

double Controller::wall_seconds() const { return wall_before_ + seconds_since(started_); }

std::string Controller::phase() { return journal_.meta("phase").value_or(kPhaseSearch); }

void Controller::commit(const std::function<void()>& body) {
  journal_.transaction([&] {
    body();
    journal_.set_meta("wall_s", fmt::format("{:.3f}", wall_seconds()));
  });
  notes_stale_ = true;
}

int64_t Controller::search_trials() {
  int64_t n = 0;
  for (const TrialRow& t : journal_.trials()) n += is_search(t) ? 1 : 0;
  return n;
}

std::optional<double> Controller::metric_of(const Validation& v) const {
  const Json m = v.metrics.value(study_.objective.metric, Json());
  if (!m.is_number()) return std::nullopt;
  return m.get<double>();
}

double Controller::trial_runtime(int64_t id, const TrialRow& t) const {
  const auto it = live_.find(id);
  return it == live_.end() ? t.runtime_s
                           : it->second.runtime_before + seconds_since(it->second.started);
}

TrialLaunch Controller::make_launch(const TrialRow& t, bool resume) const {
  TrialLaunch l;
  l.trial = t.id;
  l.name = t.name;
  l.exp_base = options_.dir / "trials";
  l.base_config = study_.base;
  l.workdir = study_.workdir;
  l.extra_flags = study_.runner.ajet_flags;
  l.resume = resume;
  l.revalidate_step = t.revalidate;
  const int64_t every = validation_interval(study_);
  l.overrides = {
      {"ajet.experiment_name", t.name},
      {"ajet.experiment_dir", "auto"},
      {"ajet.trainer_common.total_training_steps", std::to_string(study_.objective.step)},
      {"ajet.trainer_common.test_freq", std::to_string(every)},
      {"ajet.trainer_common.save_freq", std::to_string(every)},
      {"ajet.trainer_common.val_before_train", "true"},
      {"ajet.trainer_common.max_training_seconds", "null"}};
  for (auto& kv : trial_overrides(study_, t.params, t.seed)) l.overrides.push_back(std::move(kv));
  return l;
}

// ---- start: the plan, and the trials a dead controller left running
// --------------------------------

void Controller::start() {
  fs::create_directories(options_.dir / "trials");
  if (!journal_.meta("phase")) {
    commit([&] {
      journal_.set_meta("phase", kPhaseSearch);
      journal_.set_meta("round", "0");
      Json plan = {{"hypotheses", proposer_.hypotheses(study_)},
                   {"proposer", proposer_.name()},
                   {"runner", runner_.describe()}};
      const std::vector<std::string> notes = proposer_.take_notes();
      journal_.set_meta("plan", plan.dump());
      journal_.add_decision(
          "plan", std::nullopt,
          fmt::format(
              "study planned: up to {} trials in rounds of {}, {} on {} at step {}; rungs {}, "
              "keep the top 1/{} at each; then the best and the base on seeds {}",
              study_.budget.trials, study_.round_size, study_.objective.maximize ? "max" : "min",
              study_.objective.metric, study_.objective.step,
              study_.stopping.rungs.empty()
                  ? "none"
                  : fmt::format("{}", fmt::join(study_.stopping.rungs, ", ")),
              study_.stopping.eta, fmt::format("{}", fmt::join(study_.confirm_seeds, ", "))),
          notes.empty() ? Json::object() : Json{{"proposer_notes", notes}});
    });
  }
  for (TrialRow t : journal_.trials()) {
    if (t.status != kRunning) continue;
    // Its process died with the previous controller (PR_SET_PDEATHSIG). What did it get done?
    collect_validations(t.id, make_launch(t, true));
    if (journal_.trial(t.id).status != kRunning) continue;  // a point it left decided its end
    bool reached = false;
    for (const Point& p : journal_.points(t.id))
      reached = reached || p.step == study_.objective.step;
    if (reached) {
      handle_end(t.id, TrialEnd{true, "ended while the controller was away"});
      continue;
    }
    launch(t, true, "the controller restarted; the trial continues from its newest checkpoint");
  }
}

void Controller::launch(TrialRow t, bool resume, const std::string& why) {
  commit([&] {
    t.status = kRunning;
    t.launches += 1;
    journal_.update_trial(t);
    journal_.add_decision(t.revalidate ? "validate"
                          : resume     ? "resume"
                                       : "launch",
                          t.id, why, {{"launch", t.launches}, {"seed", t.seed}});
  });
  const TrialLaunch l = make_launch(t, resume);
  options_.say(
      fmt::format("research: {} {} ({})", resume ? "continuing" : "starting", t.name, why));
  live_[t.id] = Live{l, std::chrono::steady_clock::now(), t.runtime_s};
  try {
    runner_.start(l);
  } catch (const Error& e) {
    live_.erase(t.id);
    handle_end(t.id, TrialEnd{false, std::string("could not start: ") + e.what()});
  }
}

// ---- 1. validations: rungs and plateaus
// -----------------------------------------------------------

void Controller::collect_validations(int64_t id, const TrialLaunch& launch) {
  std::vector<Validation> vs = runner_.validations(launch);
  std::set<int64_t> known;
  for (const Point& p : journal_.points(id)) known.insert(p.step);
  for (const Validation& v : vs) {
    const auto value = metric_of(v);
    if (!value || known.count(v.step)) continue;
    TrialRow t = journal_.trial(id);
    if (t.status != kRunning) return;
    // The point and what it decides are one transaction: a controller killed between them would
    // otherwise find the point known and never decide on it.
    const std::optional<Verdict> verdict = judge(t, v.step, *value);
    const bool stop = verdict && verdict->stop;
    commit([&] {
      journal_.add_point(id, v.step, *value);
      if (v.step == study_.objective.step) t.result = *value;
      t.runtime_s = trial_runtime(id, t);
      if (stop) {
        t.status = kStopped;
        t.reason = verdict->reason;
      }
      journal_.update_trial(t);
      if (verdict && verdict->numbers.contains("rung")) {
        journal_.add_rung(id, verdict->numbers["rung"].get<int64_t>(), *value, v.step);
      }
      if (verdict) journal_.add_decision(verdict->kind, id, verdict->reason, verdict->numbers);
    });
    if (stop) {
      options_.say(fmt::format("research: {} {}: {}",
                               verdict->kind == "stop" ? "stopping" : verdict->kind, t.name,
                               verdict->reason));
      runner_.stop(id);
      live_.erase(id);
      return;
    }
  }
}

std::optional<Controller::Verdict> Controller::judge(const TrialRow& t, int64_t step,
                                                     double value) {
  if (!is_search(t)) return std::nullopt;  // confirmation runs always finish
  const std::vector<Point> mine_so_far = journal_.points(t.id);
  // The rung this point crosses: normally its own step; after a resume that lost the rung's own
  // validation (a run killed between a step and its validation continues after that step), the rung
  // is decided at the first point past it.
  int64_t previous = -1;
  for (const Point& p : mine_so_far) {
    if (p.step < step) previous = std::max(previous, p.step);
  }
  std::optional<int64_t> rung;
  for (int64_t r : study_.stopping.rungs) {
    if (r > previous && r <= step) rung = r;  // the last rung crossed (several: one decision)
  }
  std::optional<Verdict> promoted;
  if (rung) {
    const int64_t at = *rung;
    // Asynchronous successive halving: compare with every search trial that reached this rung so
    // far; continue when among the top max(1, n / eta).
    std::vector<double> peers;
    for (const auto& [trial, v] : journal_.rung_values(at)) {
      if (trial != t.id) peers.push_back(study_.objective.maximize ? v : -v);
    }
    const double mine = study_.objective.maximize ? value : -value;
    peers.push_back(mine);
    std::sort(peers.rbegin(), peers.rend());
    const int64_t n = int64_t(peers.size());
    const int64_t keep = std::max<int64_t>(1, n / study_.stopping.eta);
    const int64_t better =
        int64_t(std::count_if(peers.begin(), peers.end(), [&](double x) { return x > mine; }));
    const double cutoff =
        study_.objective.maximize ? peers[size_t(keep - 1)] : -peers[size_t(keep - 1)];
    const Json numbers = {{"rung", at},         {"step", step},        {"value", value},
                          {"rank", better + 1}, {"trials_at_rung", n}, {"keep", keep},
                          {"cutoff", cutoff}};
    if (better >= keep) {
      return Verdict{"stop",
                     fmt::format("rung {}: {} = {} ranks {} of {}, below the top {} (cutoff {})",
                                 at, study_.objective.metric, number_text(value), better + 1, n,
                                 keep, number_text(cutoff)),
                     numbers, true};
    }
    promoted = Verdict{"promote",
                       fmt::format("rung {}: {} = {} ranks {} of {} (top {} continue; cutoff {})",
                                   at, study_.objective.metric, number_text(value), better + 1, n,
                                   keep, number_text(cutoff)),
                       numbers, false};
  }
  // (A rung first crossed at the objective step is still decided, so a resumed study ends as an
  // uninterrupted one would; a plateau there no longer saves anything.)
  if (step >= study_.objective.step) return promoted;
  // Plateau: the best of the last `patience` validations against the best before them.
  const int64_t patience = study_.stopping.plateau_patience;
  std::vector<Point> pts;
  for (const Point& p : mine_so_far) {
    if (p.step < step) pts.push_back(p);
  }
  pts.push_back(Point{t.id, step, value});
  if (patience > 0 && int64_t(pts.size()) >= patience + 1) {
    auto better = [&](double a, double b) { return study_.objective.maximize ? a > b : a < b; };
    const size_t split = pts.size() - size_t(patience);
    double earlier = pts[0].value, recent = pts[split].value;
    for (size_t i = 0; i < split; ++i)
      earlier = better(pts[i].value, earlier) ? pts[i].value : earlier;
    for (size_t i = split; i < pts.size(); ++i)
      recent = better(pts[i].value, recent) ? pts[i].value : recent;
    const double gain = study_.objective.maximize ? recent - earlier : earlier - recent;
    if (gain <= study_.stopping.plateau_min_delta) {
      Verdict v{
          "plateau",
          fmt::format(
              "plateau at step {}: the best of the last {} validations ({}) is not better than the "
              "earlier best ({}) by more than {}{}",
              step, patience, number_text(recent), number_text(earlier),
              study_.stopping.plateau_min_delta, promoted ? " (" + promoted->reason + ")" : ""),
          {{"earlier_best", earlier},
           {"recent_best", recent},
           {"gain", gain},
           {"patience", patience},
           {"min_delta", study_.stopping.plateau_min_delta},
           {"step", step}},
          true};
      if (promoted)
        v.numbers["rung"] = promoted->numbers["rung"];  // the rung result is recorded too
      return v;
    }
  }
  return promoted;
}

void Controller::stop_trial(int64_t id, const std::string& kind, const std::string& reason,
                            const Json& numbers) {
  TrialRow t = journal_.trial(id);
  commit([&] {
    t.status = kStopped;
    t.reason = reason;
    t.runtime_s = trial_runtime(id, t);
    journal_.update_trial(t);
    journal_.add_decision(kind, id, reason, numbers);
  });
  options_.say(
      fmt::format("research: {} {}: {}", kind == "stop" ? "stopping" : kind, t.name, reason));
  runner_.stop(id);
  live_.erase(id);
}

// ---- 2. trials that ended
// ---------------------------------------------------------------------------

void Controller::handle_end(int64_t id, const TrialEnd& end) {
  TrialRow t = journal_.trial(id);
  const TrialLaunch l = make_launch(t, true);
  t.runtime_s = trial_runtime(id, t);
  live_.erase(id);
  std::optional<double> final_value;
  int64_t last_step = -1;
  for (const Point& p : journal_.points(id)) {
    if (p.step == study_.objective.step) final_value = p.value;
    last_step = std::max(last_step, p.step);
  }
  if (end.success) {
    commit([&] {
      if (final_value) {
        t.status = kCompleted;
        t.result = final_value;
        t.reason = "";
        journal_.add_decision(
            "complete", id,
            fmt::format("{} at step {} = {} ({:.0f} s)", study_.objective.metric,
                        study_.objective.step, number_text(*final_value), t.runtime_s),
            {{"value", *final_value}, {"runtime_s", t.runtime_s}});
      } else if (!t.revalidate && runner_.last_step(l) >= study_.objective.step) {
        // The run trained to the objective step but has no validation there: it was killed between
        // the step and its validation, and its resume went on after the step. Validate that step's
        // checkpoint instead of calling the trial stopped.
        t.revalidate = study_.objective.step;
        journal_.add_decision(
            "revalidate", id,
            fmt::format("the run reached step {} but lost that step's validation (killed between "
                        "the two); validating the step's checkpoint",
                        study_.objective.step),
            {{"step", study_.objective.step}});
      } else {
        t.status = kStopped;
        t.reason = fmt::format("the run ended at step {} before the objective step {}", last_step,
                               study_.objective.step);
        journal_.add_decision("stop", id, t.reason, {{"last_step", last_step}});
      }
      journal_.update_trial(t);
    });
    if (t.status == kRunning && t.revalidate && !final_value) {
      launch(journal_.trial(id), true,
             fmt::format("validating the step-{} checkpoint", *t.revalidate));
      return;
    }
    options_.say(fmt::format("research: {} {}", t.name,
                             final_value ? "completed: " + number_text(*final_value) : t.reason));
    return;
  }
  t.attempts += 1;
  t.error = runner_.log_tail(l, kLogTailLines);
  // What went wrong, in the log's words: a crash, or a trial server that never answered (the run
  // did not start; the same retry rule).
  const bool unreachable = !end.unreachable_server.empty();
  Json numbers = {{"attempts", t.attempts}, {"exit", end.description}};
  if (unreachable) {
    numbers["unreachable_server"] = end.unreachable_server;
    numbers["waited_s"] = end.waited_s;
  }
  const std::string what =
      unreachable ? fmt::format(
                        "server unreachable: the trial server {} did not answer for {:.0f} s "
                        "(budget.unreachable_seconds), so the run did not start",
                        end.unreachable_server, end.waited_s)
                  : fmt::format("crashed ({})", end.description);
  if (t.attempts < study_.budget.max_attempts) {
    commit([&] {
      journal_.update_trial(t);
      journal_.add_decision(
          "retry", id,
          fmt::format("{}; attempt {} of {}, continuing from its newest checkpoint{}", what,
                      t.attempts + 1, study_.budget.max_attempts,
                      unreachable ? " (a server that answered is picked first)" : ""),
          numbers);
    });
    options_.say(fmt::format("research: {} {}; retrying", t.name, what));
    launch(journal_.trial(id), true,
           unreachable ? "retry after an unreachable trial server" : "retry after a crash");
    return;
  }
  commit([&] {
    t.status = kFailed;
    t.reason = unreachable ? fmt::format("{}; gave up after {} attempt(s)", what, t.attempts)
                           : fmt::format("crashed {} times; last: {}", t.attempts, end.description);
    journal_.update_trial(t);
    journal_.add_decision("fail", id, t.reason, numbers);
  });
  options_.say(fmt::format("research: {} failed: {}", t.name, t.reason));
}

// ---- 3. budgets
// ---------------------------------------------------------------------------------------

void Controller::keep_budgets() {
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (int64_t id : ids) {
    const TrialRow t = journal_.trial(id);
    const double runtime = trial_runtime(id, t);
    if (runtime > study_.budget.trial_seconds) {
      stop_trial(id, "stop",
                 fmt::format("ran {:.0f} s, past budget.trial_seconds ({:.0f} s)", runtime,
                             study_.budget.trial_seconds),
                 {{"runtime_s", runtime}, {"trial_seconds", study_.budget.trial_seconds}});
    }
  }
  if (wall_seconds() > study_.budget.wall_seconds && phase() != kPhaseDone) {
    std::vector<int64_t> left;
    for (const auto& [id, live] : live_) left.push_back(id);
    for (int64_t id : left) {
      stop_trial(
          id, "stop",
          fmt::format("the study's wall budget ({:.0f} s) is spent", study_.budget.wall_seconds),
          {{"wall_s", wall_seconds()}});
    }
    commit([&] {
      for (TrialRow t : journal_.trials()) {
        if (t.status != kPending) continue;
        t.status = kStopped;
        t.reason = "never started: the wall budget was spent";
        journal_.update_trial(t);
      }
    });
    conclude(fmt::format("the wall budget ({:.0f} s) is spent", study_.budget.wall_seconds));
  }
}

// ---- 4. launches
// --------------------------------------------------------------------------------------

void Controller::launch_pending() {
  for (const TrialRow& t : journal_.trials()) {
    if (int64_t(live_.size()) >= study_.parallel) return;
    if (t.status != kPending) continue;
    launch(t, t.launches > 0,
           t.role == "confirm" ? "confirmation run" : fmt::format("round {}", t.round));
  }
}

// ---- 5. rounds, confirmation, conclusion
// ----------------------------------------------------------

void Controller::plan_next() {
  const std::string ph = phase();
  if (ph == kPhaseSearch) {
    const int64_t round = journal_.meta_int("round").value_or(0);
    // A new round only when the trial budget allows one and the wall budget leaves room for it and
    // the confirmation (each estimated from the trials' mean running time so far).
    double mean = 0;
    int64_t n = 0;
    for (const TrialRow& t : journal_.trials()) {
      if (t.status == kCompleted) {
        mean += t.runtime_s;
        ++n;
      }
    }
    mean = n ? mean / double(n) : 0;
    const int64_t left = study_.budget.trials - search_trials();
    const int64_t size = std::min(left, study_.round_size);
    const double need =
        mean * (std::ceil(double(size) / double(study_.parallel)) +
                std::ceil(2.0 * double(study_.confirm_seeds.size()) / double(study_.parallel)));
    if (left > 0 && (round == 0 || wall_seconds() + need <= study_.budget.wall_seconds)) {
      plan_round(round + 1);
      return;
    }
    if (left > 0) {
      commit([&] {
        journal_.add_decision(
            "stop_search", std::nullopt,
            fmt::format(
                "no round {}: {:.0f} s left of the wall budget, a round and the confirmation "
                "need about {:.0f} s",
                round + 1, study_.budget.wall_seconds - wall_seconds(), need),
            {{"wall_s", wall_seconds()}, {"need_s", need}});
      });
    }
    plan_confirmation();
    return;
  }
  if (ph == kPhaseConfirm) conclude("the confirmation runs ended");
}

void Controller::plan_round(int64_t round) {
  const std::vector<TrialRow> trials = journal_.trials();
  const int64_t left = study_.budget.trials - search_trials();
  const bool with_base =
      round == 1 && std::none_of(trials.begin(), trials.end(),
                                 [](const TrialRow& t) { return t.role == "base"; });
  const int64_t wanted = std::min(left, study_.round_size) - (with_base ? 1 : 0);
  const Params base = base_params(study_);
  ProposalRequest req{&study_, round, wanted, trials, journal_.points()};
  if (with_base) {  // the base runs in this round: a candidate equal to it would be a repeat
    TrialRow b;
    b.role = "base";
    b.params = base;
    req.trials.push_back(b);
  }
  std::vector<Params> proposed;
  std::vector<std::string> dropped;
  std::string rationale;  // the proposer's reasons for its candidates, for the round's decision
  if (wanted > 0) {
    try {
      proposed = proposer_.propose(req);
      rationale = proposer_.rationale();
    } catch (const std::exception& e) {
      dropped.push_back(std::string("the proposer failed: ") + e.what());
    }
  }
  const std::vector<std::string> proposer_notes = proposer_.take_notes();
  // Every proposal is checked against the space and against the trials so far; the built-in search
  // fills what is missing.
  std::vector<Params> accepted;
  std::vector<Params> seen;
  for (const TrialRow& t : req.trials) seen.push_back(t.params);
  auto take = [&](const Params& p) {
    if (int64_t(accepted.size()) >= wanted) return;
    try {
      check_params(study_, p);
    } catch (const Error& e) {
      dropped.push_back(e.what());
      return;
    }
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) {
      dropped.push_back("a repeat of an earlier trial");
      return;
    }
    seen.push_back(p);
    accepted.push_back(p);
  };
  for (const Params& p : proposed) take(p);
  if (int64_t(accepted.size()) < wanted) {
    BuiltinProposer builtin;
    req.count = wanted - int64_t(accepted.size());
    for (const Params& p : accepted) {
      TrialRow fake;
      fake.params = p;
      req.trials.push_back(fake);
    }
    for (const Params& p : builtin.propose(req)) take(p);
  }
  if (accepted.empty() && !with_base) {
    commit([&] {
      journal_.add_decision(
          "stop_search", std::nullopt,
          fmt::format("round {} has no new candidate (the space is used up)", round),
          {{"dropped", dropped}, {"proposer_notes", proposer_notes}});
    });
    plan_confirmation();
    return;
  }
  commit([&] {
    int64_t number = int64_t(trials.size());
    auto add = [&](const std::string& role, const Params& params) {
      TrialRow t;
      t.name = fmt::format("t{:03d}", ++number);
      t.round = round;
      t.role = role;
      t.params = params;
      t.seed = study_.search_seed;
      journal_.add_trial(t);
    };
    if (with_base) add("base", base);
    for (const Params& p : accepted) add("search", p);
    journal_.set_meta("round", std::to_string(round));
    Json numbers = {{"candidates", accepted.size()}, {"dropped", dropped}};
    if (!rationale.empty()) numbers["rationale"] = rationale;
    if (!proposer_notes.empty()) numbers["proposer_notes"] = proposer_notes;
    journal_.add_decision(
        "round", std::nullopt,
        fmt::format("round {}: {} candidates{} from {}{}{}", round, accepted.size(),
                    with_base ? " and the base config" : "", proposer_.name(),
                    dropped.empty() ? "" : fmt::format(" ({} proposals dropped)", dropped.size()),
                    rationale.empty() ? "" : ". The proposer's reasons: " + rationale),
        numbers);
  });
  options_.say(
      fmt::format("research: round {}: {} trials", round, accepted.size() + (with_base ? 1 : 0)));
}

void Controller::plan_confirmation() {
  const std::vector<TrialRow> trials = journal_.trials();
  const TrialRow* best = nullptr;
  const TrialRow* base = nullptr;
  for (const TrialRow& t : trials) {
    if (t.role == "base") base = &t;
    if (!is_search(t) || t.status != kCompleted || !t.result) continue;
    if (!best ||
        (study_.objective.maximize ? *t.result > *best->result : *t.result < *best->result))
      best = &t;
  }
  if (!best) {
    conclude("no trial reached the objective step");
    return;
  }
  if (best->role == "base" || study_.confirm_seeds.empty() || !base) {
    commit([&] {
      journal_.set_meta("phase", kPhaseConfirm);
      journal_.set_meta("best", std::to_string(best->id));
      journal_.add_decision(
          "confirm", best->id,
          best->role == "base"
              ? "the base config is the best of the search: nothing to confirm"
              : "no confirmation seeds (or no base run): the search's best stands unconfirmed",
          {{"best", best->name}});
    });
    conclude("search ended");
    return;
  }
  commit([&] {
    int64_t number = int64_t(trials.size());
    for (int64_t seed : study_.confirm_seeds) {
      for (const TrialRow* of : {best, base}) {
        TrialRow t;
        t.name = fmt::format("{}-seed{}", of->name, seed);
        t.round = 0;
        t.role = "confirm";
        t.confirms = of->id;
        t.params = of->params;
        t.seed = seed;
        journal_.add_trial(t);
        ++number;
      }
    }
    journal_.set_meta("phase", kPhaseConfirm);
    journal_.set_meta("best", std::to_string(best->id));
    journal_.add_decision(
        "confirm", best->id,
        fmt::format(
            "best of the search: {} ({} = {}); it and the base ({} = {}) run again on seeds {}",
            best->name, study_.objective.metric, number_text(*best->result), base->name,
            base->result ? number_text(*base->result) : "-", fmt::join(study_.confirm_seeds, ", ")),
        {{"best", best->name}, {"best_value", *best->result}, {"base", base->name}});
  });
  options_.say(fmt::format("research: confirming {} against the base on seeds {}", best->name,
                           fmt::join(study_.confirm_seeds, ", ")));
}

void Controller::conclude(const std::string& why) {
  const std::vector<TrialRow> trials = journal_.trials();
  std::optional<int64_t> best_id;
  if (const auto b = journal_.meta_int("best")) best_id = *b;
  const TrialRow* best = nullptr;
  const TrialRow* base = nullptr;
  for (const TrialRow& t : trials) {
    if (best_id && t.id == *best_id) best = &t;
    if (t.role == "base") base = &t;
  }
  std::string text;
  Json numbers = Json::object();
  int exit_code = kExitConcluded;
  if (!best) {
    text = "No trial reached the objective step, so there is no best configuration (" + why + ").";
    exit_code = kExitNoResult;
  } else {
    std::vector<std::string> diff;
    for (const auto& [name, value] : best->params) {
      if (!base || base->params.count(name) == 0 || base->params.at(name) != value)
        diff.push_back(name + " = " + value_text(value));
    }
    const std::string config_text = best->role == "base" ? "the base config"
                                    : diff.empty()
                                        ? best->name
                                        : fmt::format("{} ({})", best->name, fmt::join(diff, ", "));
    numbers["best"] = best->name;
    numbers["best_search_value"] = best->result ? Json(*best->result) : Json();
    // The confirmation: per seed, the best's and the base's value at the objective step.
    std::vector<std::string> rows;
    double sum_best = 0, sum_base = 0;
    int64_t pairs = 0, wins = 0;
    std::vector<int64_t> seeds;
    for (int64_t seed : study_.confirm_seeds) {
      std::optional<double> b, a;
      for (const TrialRow& t : trials) {
        if (t.role != "confirm" || t.seed != seed || t.status != kCompleted) continue;
        if (t.confirms == best->id) b = t.result;
        if (base && t.confirms == base->id) a = t.result;
      }
      if (!b || !a) continue;
      ++pairs;
      sum_best += *b;
      sum_base += *a;
      const bool won = study_.objective.maximize ? *b > *a : *b < *a;
      wins += won ? 1 : 0;
      seeds.push_back(seed);
      rows.push_back(fmt::format("seed {}: {} vs base {}", seed, number_text(*b), number_text(*a)));
    }
    if (best->role == "base") {
      text = fmt::format(
          "The base config stays best: no candidate beat its {} = {} at step {} on the search "
          "seed.",
          study_.objective.metric, best->result ? number_text(*best->result) : "-",
          study_.objective.step);
    } else if (pairs == 0) {
      text = fmt::format(
          "Best of the search: {} with {} = {} at step {} (seed {}); not confirmed on fresh seeds "
          "({}).",
          config_text, study_.objective.metric, best->result ? number_text(*best->result) : "-",
          study_.objective.step, study_.search_seed, why);
    } else {
      const double mb = sum_best / double(pairs), ma = sum_base / double(pairs);
      const bool beats = (study_.objective.maximize ? mb > ma : mb < ma) && wins == pairs;
      numbers["confirm_best_mean"] = mb;
      numbers["confirm_base_mean"] = ma;
      numbers["confirm_seeds"] = seeds;
      numbers["wins"] = wins;
      numbers["beats_base"] = beats;
      text = fmt::format(
          "{}: {} {} the base config on fresh seeds {}: {} at step {} = {} vs {} (mean of {}; {}). "
          "Search seed {}: {}.",
          beats ? "Best configuration" : "Not confirmed", config_text,
          beats ? "beats" : fmt::format("won on {} of {} seeds against", wins, pairs),
          fmt::join(seeds, ", "), study_.objective.metric, study_.objective.step, number_text(mb),
          number_text(ma), pairs, fmt::join(rows, "; "), study_.search_seed,
          best->result ? number_text(*best->result) : "-");
    }
  }
  ConclusionFacts facts{text};
  std::optional<std::string> prose;
  try {
    prose = proposer_.conclusion_prose(facts);
  } catch (const std::exception& e) {
    log().warn("research: the proposer's conclusion failed: {}", e.what());
  }
  if (const std::vector<std::string> notes = proposer_.take_notes(); !notes.empty())
    numbers["proposer_notes"] = notes;
  commit([&] {
    journal_.set_meta("conclusion", text);
    if (prose) journal_.set_meta("conclusion_prose", *prose);
    journal_.set_meta("phase", kPhaseDone);
    journal_.set_meta("exit_code", std::to_string(exit_code));
    journal_.add_decision("conclude", best ? std::optional<int64_t>(best->id) : std::nullopt,
                          why + ". " + text, numbers);
  });
  options_.say("research: " + text);
  finish(exit_code);
}

void Controller::finish(int exit_code) {
  write_notes();
  const Json flag = {{"state", kPhaseDone},
                     {"exit_code", exit_code},
                     {"conclusion", journal_.meta("conclusion").value_or("")},
                     {"notebook", (options_.dir / "notebook.md").string()}};
  write_file_atomic(options_.dir / "finish.flag", flag.dump(2) + "\n");
}

void Controller::write_notes() {
  write_notebook(options_.dir, study_, journal_, wall_seconds());
  notes_stale_ = false;
  last_notes_ = std::chrono::steady_clock::now();
}

// ---- the loop
// ------------------------------------------------------------------------------------------

bool Controller::tick() {
  if (phase() == kPhaseDone) return false;
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (int64_t id : ids) {
    if (live_.count(id) == 0) continue;
    collect_validations(id, live_.at(id).launch);
    if (live_.count(id) == 0) continue;
    if (const std::optional<TrialEnd> end = runner_.poll(id)) {
      collect_validations(id,
                          live_.at(id).launch);  // what it wrote between the last read and its exit
      if (live_.count(id)) handle_end(id, *end);
    }
  }
  keep_budgets();
  if (phase() == kPhaseDone) return false;
  launch_pending();
  if (live_.empty()) {
    plan_next();
    if (phase() != kPhaseDone) launch_pending();
  }
  // After every decision; and now and then while trials run, for their curves and running times.
  if (notes_stale_ || std::chrono::steady_clock::now() - last_notes_ > options_.notebook_interval)
    write_notes();
  return phase() != kPhaseDone;
}

void Controller::interrupt() {
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (int64_t id : ids) {
    runner_.stop(id);
    const TrialRow t = journal_.trial(id);
    const double runtime = trial_runtime(id, t);
    commit([&] {
      TrialRow u = t;
      u.runtime_s = runtime;
      journal_.update_trial(u);
      journal_.add_decision("interrupt", id,
                            "the controller was asked to stop; resume continues this trial",
                            {{"runtime_s", runtime}});
    });
    live_.erase(id);
  }
  write_notes();
}

int Controller::run(const std::atomic<bool>& stop) {
  start();
  while (!stop) {
    if (!tick()) break;
    if (stop) break;
    runner_.wait(options_.poll_interval);
  }
  if (phase() != kPhaseDone) {
    interrupt();
    return -1;
  }
  return static_cast<int>(journal_.meta_int("exit_code").value_or(1));
}

}  // namespace ajet::research
