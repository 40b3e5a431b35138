// `ajet research` end to end: real studies of real classic runs (the real ajet, ajet-swarm and
// ajet-engine on the micro model, debug backbone). The trials' workflow is a command whose reward
// is a searched parameter (`echo 0.8`), so which trial is best, which is pruned at the rung and
// which plateaus is known in advance and no assertion depends on sampling or timing. The controller
// is killed with SIGKILL at its N-th journal transaction (the test hook AJET_RESEARCH_KILL_AT)
// again and again, and resumed each time; the study must end exactly as an uninterrupted one did.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "classic/classic_fixture.h"
#include "client/swarm_client.h"
#include "common/fs.h"
#include "http/response.h"
#include "http/router.h"
#include "http/server.h"
#include "research/journal.h"
#include "research/runner.h"

namespace ajet::research {
namespace {
namespace fs = std::filesystem;
using e2e::shell_quote;

std::string base_yaml(const fs::path& model) {
  return "ajet:\n"
         "  experiment_name: base\n"
         "  backbone: debug\n"
         "  model:\n"
         "    path: " +
         model.string() +
         "\n"
         "  data: {max_prompt_length: 640, max_response_length: 384, train_batch_size: 2}\n"
         "  rollout: {max_env_worker: 4, max_model_len: 1024, max_response_length_in_one_turn: 12, "
         "num_repeat: 2,\n"
         "            temperature: 1.0, user_workflow: \"echo 0.5\"}\n"
         "  task_reader:\n"
         "    type: builtin\n"
         "    builtin: {generator: calc, num_training_tasks: 6, num_validation_tasks: 3, seed: 5}\n"
         "  trainer_common: {total_training_steps: 2, test_freq: 1, val_pass_n: 2, logger: "
         "[console, jsonl]}\n"
         "  engine: {threads: 1, kv_cache_memory_mb: 16}\n";
}

// Four configurations (the base's `echo 0.5` and three more), objective at step 4, a rung at 2.
const char* kStudy =
    "question: which workflow reward is best?\n"
    "base: base.yaml\n"
    "objective: {metric: val/greedy_reward, step: 4}\n"
    "early_stopping: {rungs: [2], eta: 2}\n"
    "search:\n"
    "  wf: {key: ajet.rollout.user_workflow, choice: [\"echo 0.2\", \"echo 0.8\", \"echo 0.5\", "
    "\"echo 0.9\"]}\n"
    "budget: {trials: 4, wall_seconds: 3600, trial_seconds: 600, max_attempts: 2}\n"
    "round_size: 4\n"
    "seeds: {search: 1, confirm: [2, 3]}\n";

struct StudyDirs {
  fs::path study_file;
  fs::path dir;
};

StudyDirs write_study(const e2e::ScratchDir& scratch, const std::string& study,
                      const std::string& name) {
  write_file_atomic(scratch / "base.yaml", base_yaml(classic::micro_model()));
  write_file_atomic(scratch / (name + ".yaml"), study);
  return {scratch / (name + ".yaml"), scratch / ("studies/" + name)};
}

e2e::Captured research(const std::string& args, const std::string& env = "") {
  return e2e::run_capture("cd " + shell_quote(fs::temp_directory_path().string()) + " && " + env +
                          " " + shell_quote(e2e::bin("ajet").string()) + " research " + args);
}

int exit_code(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

struct Outcome {
  std::map<std::string, std::string> status;  // trial name -> status
  std::map<std::string, double> result;
  std::string conclusion;
};

Outcome read_outcome(const fs::path& dir) {
  Journal j(dir / "journal.sqlite");
  Outcome o;
  for (const TrialRow& t : j.trials()) {
    o.status[t.name] =
        t.status + (t.params.count("wf") ? " " + t.params.at("wf").get<std::string>() : "");
    if (t.result) o.result[t.name] = *t.result;
  }
  o.conclusion = j.meta("conclusion").value_or("");
  return o;
}

// Every trial ended once, was started fresh once, and nothing ran it again after it ended; no
// trial's experiment directory holds an earlier run moved aside (what a fresh rerun would leave).
void expect_nothing_redone(const fs::path& dir) {
  Journal j(dir / "journal.sqlite");
  std::map<int64_t, int> ends, launches;
  std::map<int64_t, int64_t> end_at;
  for (const Decision& d : j.decisions()) {
    if (!d.trial) continue;
    if (d.kind == "complete" || d.kind == "stop" || d.kind == "fail" || d.kind == "plateau") {
      ++ends[*d.trial];
      end_at[*d.trial] = d.id;
    }
    if (d.kind == "launch") ++launches[*d.trial];
    if ((d.kind == "launch" || d.kind == "resume" || d.kind == "retry") && end_at.count(*d.trial)) {
      ADD_FAILURE() << "decision " << d.id << " (" << d.kind << ") after trial " << *d.trial
                    << " ended";
    }
  }
  for (const TrialRow& t : j.trials()) {
    EXPECT_EQ(ends[t.id], 1) << t.name;
    EXPECT_EQ(launches[t.id], 1) << t.name;
    EXPECT_FALSE(fs::exists(dir / "trials" / t.name / "earlier"))
        << t.name << " was rerun from scratch";
  }
}

TEST(ResearchE2E, AStudyKilledAtManyPointsEndsAsAnUninterruptedOne) {
  e2e::ScratchDir scratch;
  const StudyDirs s = write_study(scratch, kStudy, "wf");
  const e2e::Captured clean = research("run " + shell_quote(s.study_file.string()) + " --dir " +
                                       shell_quote(s.dir.string()));
  ASSERT_EQ(exit_code(clean.status), 0) << clean.out;
  const Outcome want = read_outcome(s.dir);
  // The base (0.5) continues at the rung (first there); of the others, those below the top half of
  // the trials at the rung so far stop; 0.9 is best and beats the base on both fresh seeds.
  ASSERT_EQ(want.status.size(), 8u) << clean.out;
  EXPECT_EQ(want.status.at("t001"), "completed echo 0.5");
  EXPECT_NE(want.conclusion.find("Best configuration"), std::string::npos) << want.conclusion;
  EXPECT_NE(want.conclusion.find("wf = echo 0.9"), std::string::npos) << want.conclusion;
  EXPECT_NE(want.conclusion.find("= 0.9 vs 0.5"), std::string::npos) << want.conclusion;
  expect_nothing_redone(s.dir);
  const Json flag = parse_json(read_file(s.dir / "finish.flag"), "finish.flag");
  EXPECT_EQ(flag["exit_code"], 0);
  const std::string notebook = read_file(s.dir / "notebook.md");
  EXPECT_NE(notebook.find("## Decision log"), std::string::npos);
  EXPECT_TRUE(fs::exists(s.dir / "plots" / "param_wf.svg"));
  const e2e::Captured status = research("status " + shell_quote(s.dir.string()));
  EXPECT_EQ(exit_code(status.status), 0) << status.out;
  EXPECT_NE(status.out.find("phase: done"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("budget left: 0 of 4 search trials"), std::string::npos) << status.out;
  // A finished study resumed says so and exits with its code, running nothing.
  const e2e::Captured again = research("resume " + shell_quote(s.dir.string()));
  EXPECT_EQ(exit_code(again.status), 0) << again.out;
  EXPECT_NE(again.out.find("the study is done"), std::string::npos) << again.out;

  // Killed after its k-th transaction (or just before committing it), resumed, killed again ...
  for (const auto& [k, before] : std::vector<std::pair<int, bool>>{{3, false}, {4, true}}) {
    const fs::path dir = scratch / ("studies/killed-" + std::to_string(k));
    const std::string env = "AJET_RESEARCH_KILL_AT=" + std::to_string(k) +
                            (before ? " AJET_RESEARCH_KILL_BEFORE_COMMIT=1" : "");
    e2e::Captured r = research(
        "run " + shell_quote(s.study_file.string()) + " --dir " + shell_quote(dir.string()), env);
    int kills = 0;
    while (exit_code(r.status) == 137 && kills < 300) {
      ++kills;
      r = research("resume " + shell_quote(dir.string()), env);
    }
    ASSERT_EQ(exit_code(r.status), 0) << "k=" << k << " after " << kills << " kills:\n" << r.out;
    EXPECT_GT(kills, 5) << "k=" << k;
    const Outcome got = read_outcome(dir);
    EXPECT_EQ(got.status, want.status) << "k=" << k;
    EXPECT_EQ(got.result, want.result) << "k=" << k;
    EXPECT_EQ(got.conclusion, want.conclusion) << "k=" << k;
    expect_nothing_redone(dir);
  }
}

TEST(ResearchE2E, ACrashIsRetriedThenRecordedAndAPlateauStopsATrial) {
  e2e::ScratchDir scratch;
  // `kill -9 $PPID`: the workflow kills its ajet (a crash mid-run, at the first validation).
  const std::string study =
      "base: base.yaml\n"
      "objective: {metric: val/greedy_reward, step: 6}\n"
      "early_stopping: {rungs: [2], eta: 2, plateau_patience: 1}\n"
      "search:\n"
      "  wf: {key: ajet.rollout.user_workflow, choice: [\"echo 0.5\", \"echo 0.3\", \"kill -9 "
      "$PPID\"]}\n"
      "budget: {trials: 3, max_attempts: 2}\n"
      "round_size: 3\n";
  const StudyDirs s = write_study(scratch, study, "crash");
  const e2e::Captured r = research("run " + shell_quote(s.study_file.string()) + " --dir " +
                                   shell_quote(s.dir.string()));
  // No trial reached step 6 (the base plateaued, 0.3 was pruned, the crash failed): exit code 1.
  ASSERT_EQ(exit_code(r.status), 1) << r.out;
  Journal j(s.dir / "journal.sqlite");
  std::map<std::string, TrialRow> by_wf;
  for (const TrialRow& t : j.trials()) by_wf[t.params.at("wf").get<std::string>()] = t;
  ASSERT_EQ(by_wf.size(), 3u) << r.out;
  EXPECT_EQ(by_wf["echo 0.5"].status, kStopped);
  EXPECT_NE(by_wf["echo 0.5"].reason.find("plateau"), std::string::npos)
      << by_wf["echo 0.5"].reason;
  EXPECT_EQ(by_wf["echo 0.3"].status, kStopped);
  EXPECT_NE(by_wf["echo 0.3"].reason.find("rung 2"), std::string::npos) << by_wf["echo 0.3"].reason;
  const TrialRow& crash = by_wf["kill -9 $PPID"];
  EXPECT_EQ(crash.status, kFailed);
  EXPECT_EQ(crash.attempts, 2);
  EXPECT_NE(crash.reason.find("killed by signal 9"), std::string::npos) << crash.reason;
  EXPECT_NE(crash.error.find("=== research: resume"), std::string::npos)
      << crash.error;  // the log tail
  const Json flag = parse_json(read_file(s.dir / "finish.flag"), "finish.flag");
  EXPECT_EQ(flag["exit_code"], 1);
  EXPECT_NE(read_file(s.dir / "notebook.md").find("Crashes and unreachable servers: log tails"),
            std::string::npos);
  expect_nothing_redone(s.dir);
}

// The LLM researcher in a real study: a scripted OpenAI-compatible endpoint (a real HTTP server in
// this process, standing in for the model) answers by what it is asked. Its round-1 candidates are
// run in its order, its hypotheses and prose reach the notebook; a second study whose model answers
// nonsense still concludes, on the built-in search.
TEST(ResearchE2E, TheLlmResearcherProposesAndAMalformedOneFallsBack) {
  std::mutex mu;
  std::vector<std::string> asked;
  bool nonsense = false;
  http::Router router;
  router.post("/v1/chat/completions", [&](http::Request request, http::Respond respond) {
    const std::string prompt = parse_json(request.body, "request")["messages"][1]["content"];
    std::string content;
    {
      std::lock_guard lock(mu);
      asked.push_back(prompt);
      if (nonsense) {
        content = "{\"candidates\": [{\"wf\": \"rm -rf /\"}], \"hypotheses\": 7";
      } else if (prompt.find("hypotheses this study tests") != std::string::npos) {
        content = "{\"hypotheses\": [\"A higher echoed reward wins.\"]}";
      } else if (prompt.find("Propose the") != std::string::npos) {
        content =
            "{\"candidates\": [{\"wf\": \"echo 0.9\"}, {\"wf\": \"echo 0.2\"}, {\"wf\": \"echo "
            "0.8\"}], \"why\": \"span it\"}";
      } else {
        content = "The echoed reward decides everything here.";
      }
    }
    Json message = {{"role", "assistant"}, {"content", content}};
    respond(http::json_response(
        {{"id", "x"},
         {"object", "chat.completion"},
         {"model", "scripted"},
         {"choices",
          Json::array({{{"index", 0}, {"message", message}, {"finish_reason", "stop"}}})}}));
  });
  http::HttpServer server(http::ServerOptions{}, std::move(router));
  server.start();
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/v1";

  e2e::ScratchDir scratch;
  const StudyDirs s = write_study(scratch, kStudy, "llm");
  const e2e::Captured r = research("run " + shell_quote(s.study_file.string()) + " --dir " +
                                   shell_quote(s.dir.string()) + " --llm-url " + shell_quote(url) +
                                   " --llm-model scripted");
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  EXPECT_NE(r.out.find("candidates from LLM researcher (scripted at " + url), std::string::npos)
      << r.out;
  {
    Journal j(s.dir / "journal.sqlite");
    std::vector<std::string> wf;
    for (const TrialRow& t : j.trials())
      if (t.role == "search") wf.push_back(t.params.at("wf").get<std::string>());
    EXPECT_EQ(wf, (std::vector<std::string>{"echo 0.9", "echo 0.2", "echo 0.8"}));
    EXPECT_EQ(j.meta("conclusion_prose").value_or(""),
              "The echoed reward decides everything here.");
  }
  const std::string notebook = read_file(s.dir / "notebook.md");
  EXPECT_NE(notebook.find("(LLM) A higher echoed reward wins."), std::string::npos) << notebook;
  // The model's reasons for its candidates are in the decision log, in the round they chose.
  const size_t round_row =
      notebook.find("| round |  | round 1: 3 candidates and the base config from LLM researcher");
  ASSERT_NE(round_row, std::string::npos) << notebook;
  EXPECT_NE(notebook.substr(round_row, notebook.find('\n', round_row) - round_row)
                .find("The proposer's reasons: span it"),
            std::string::npos)
      << notebook;
  {
    std::lock_guard lock(mu);
    ASSERT_GE(asked.size(), 3u);
    nonsense = true;
  }

  const StudyDirs s2 = write_study(scratch, kStudy, "llm_nonsense");
  const e2e::Captured r2 = research(
      "run " + shell_quote(s2.study_file.string()) + " --dir " + shell_quote(s2.dir.string()),
      "OPENAI_BASE_URL=" + shell_quote(url) + " AJET_RESEARCH_MODEL=scripted");
  ASSERT_EQ(exit_code(r2.status), 0) << r2.out;
  EXPECT_NE(r2.out.find("LLM researcher, hypotheses: the reply's {...} is not valid JSON"),
            std::string::npos)
      << r2.out;
  EXPECT_NE(r2.out.find("from the built-in search"), std::string::npos) << r2.out;
  Journal j2(s2.dir / "journal.sqlite");
  EXPECT_EQ(j2.trials().front().status, kCompleted);
  server.stop();
}

// A study whose trials run on a running swarm server (runner: remote): each trial drives that front
// through the command API (config synced, engine started, the episodes run here, engine stopped),
// one after the other; every trial is counted once, the notebook is written and the front is left
// free.
TEST(ResearchE2E, RemoteTrialsRunOnARunningSwarmServer) {
  e2e::ScratchDir scratch;
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{scratch / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const std::string study =
      "base: base.yaml\n"
      "objective: {metric: val/greedy_reward, step: 2}\n"
      "search:\n"
      "  wf: {key: ajet.rollout.user_workflow, choice: [\"echo 0.2\", \"echo 0.8\"]}\n"
      "budget: {trials: 2}\n"
      "round_size: 2\n"
      "seeds: {search: 1, confirm: []}\n"
      "runner: {type: remote, servers: [" +
      front.url() + "]}\n";
  const StudyDirs s = write_study(scratch, study, "remote");
  const e2e::Captured r = research("run " + shell_quote(s.study_file.string()) + " --dir " +
                                   shell_quote(s.dir.string()));
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  const Outcome got = read_outcome(s.dir);
  ASSERT_EQ(got.status.size(), 2u) << r.out;
  for (const auto& [name, status] : got.status)
    EXPECT_EQ(status.rfind("completed", 0), 0u) << name << ": " << status;
  expect_nothing_redone(s.dir);
  for (const char* name : {"t001", "t002"}) {
    const std::string log = read_file(s.dir / "trials" / (std::string(name) + ".log"));
    EXPECT_NE(log.find("--swarm-url " + front.url()), std::string::npos) << log;
    EXPECT_TRUE(fs::exists(scratch / "front" / "experiments" / name / "train_config.yaml")) << name;
    EXPECT_FALSE(fs::exists(s.dir / "trials" / name / "swarm"))
        << name << " started a front of its own";
  }
  const std::string notebook = read_file(s.dir / "notebook.md");
  EXPECT_NE(
      notebook.find(
          "**Trials run as:** classic runs (ajet --conf ... --swarm-url) on 1 swarm server(s): " +
          front.url()),
      std::string::npos)
      << notebook;
  EXPECT_EQ(parse_json(read_file(s.dir / "finish.flag"), "finish.flag")["exit_code"], 0);
  EXPECT_EQ(client::SwarmClient(front.url()).get_engine_status().status, client::kOffline);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
}

// The controller SIGKILLed while a remote trial runs on a real front, then `ajet research resume`:
// the trial that had finished is not run again, the interrupted one goes back to the same front and
// continues where its metrics.jsonl ends (the debug backbone trains no checkpoint:
// docs/research.md, "Resumed trials"), every trial is counted once, and the front is left with its
// engine stopped. The kill comes when the second trial has recorded a training step (waited on in
// its metrics.jsonl) and holds its next episodes.
TEST(ResearchE2E, ARemoteStudyKilledMidTrialResumesOnTheSameFront) {
  e2e::ScratchDir scratch;
  e2e::SwarmProcess front(e2e::SwarmProcess::Options{scratch / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  // The candidate (t002, after the base) holds its episodes once its run has recorded a training
  // step, while the file `hold` exists (removed after the kill, and with the scratch directory):
  // the kill always finds it mid-run, whatever the machine's speed.
  const fs::path t2_metrics =
      scratch / "studies" / "remote_kill" / "trials" / "t002" / "metrics.jsonl";
  const fs::path hold = scratch / "hold";
  write_file_atomic(hold, "");
  const std::string gated = "grep -q kind.:.train " + t2_metrics.string() + " && while [ -e " +
                            hold.string() + " ]; do sleep 0.05; done; echo 0.8";
  const std::string study =
      "base: base.yaml\n"
      "objective: {metric: val/greedy_reward, step: 8}\n"
      "search:\n"
      "  wf: {key: ajet.rollout.user_workflow, choice: [\"" +
      gated +
      "\"]}\n"
      "budget: {trials: 2}\n"
      "round_size: 2\n"
      "seeds: {search: 1, confirm: []}\n"
      "runner: {type: remote, servers: [" +
      front.url() + "]}\n";
  const StudyDirs s = write_study(scratch, study, "remote_kill");
  const fs::path out = scratch / "controller.out";
  Subprocess controller = Subprocess::spawn(
      SpawnOptions{{"/bin/sh", "-c", "exec \"$@\" >\"$AJET_TEST_OUT\" 2>&1 </dev/null", "sh",
                    e2e::bin("ajet").string(), "research", "run", s.study_file.string(), "--dir",
                    s.dir.string()},
                   {{"AJET_TEST_OUT", out.string()}},
                   fs::temp_directory_path()});
  ASSERT_EQ(s.dir / "trials" / "t002" / "metrics.jsonl", t2_metrics);
  const bool mid_trial = e2e::eventually(
      [&] { return read_classic_last_step(t2_metrics) >= 1 || controller.try_reap(); },
      std::chrono::seconds(300));
  ASSERT_TRUE(mid_trial && !controller.exited())
      << "the controller ended before t002 trained a step:\n"
      << (fs::exists(out) ? read_file(out) : "");
  ASSERT_EQ(::kill(controller.pid(), SIGKILL), 0);
  EXPECT_EQ(exit_code(controller.wait()), 128 + SIGKILL);
  const int64_t trained_before = read_classic_last_step(t2_metrics);
  ASSERT_LT(trained_before, 8) << "t002 finished before the kill";
  fs::remove(hold);
  {
    const e2e::Captured st = research("status " + shell_quote(s.dir.string()));
    EXPECT_NE(st.out.find("trials: 1 running (t002), 0 pending, 1 completed"), std::string::npos)
        << st.out;
  }

  const e2e::Captured r = research("resume " + shell_quote(s.dir.string()));
  ASSERT_EQ(exit_code(r.status), 0) << read_file(out) << "--- resume:\n" << r.out;
  const Outcome got = read_outcome(s.dir);
  ASSERT_EQ(got.status.size(), 2u) << r.out;
  for (const auto& [name, status] : got.status)
    EXPECT_EQ(status.rfind("completed", 0), 0u) << name << ": " << status;
  EXPECT_EQ(got.status.at("t001"), "completed echo 0.5");  // the base
  EXPECT_NEAR(got.result.at("t001"), 0.5, 1e-6);
  EXPECT_EQ(got.status.at("t002"), "completed " + gated);
  EXPECT_NEAR(got.result.at("t002"), 0.8, 1e-6);
  expect_nothing_redone(s.dir);
  {
    Journal j(s.dir / "journal.sqlite");
    int resumes = 0;
    for (const Decision& d : j.decisions()) {
      if (d.kind != "resume") continue;
      EXPECT_EQ(d.trial.value_or(-1), j.trials().at(1).id) << d.reason;
      EXPECT_NE(d.reason.find("the controller restarted"), std::string::npos) << d.reason;
      ++resumes;
    }
    EXPECT_EQ(resumes, 1);
    EXPECT_EQ(j.trials().at(0).launches, 1);
    EXPECT_EQ(j.trials().at(1).launches, 2);
    std::set<int64_t> steps;
    for (const Point& p : j.points(j.trials().at(1).id)) steps.insert(p.step);
    EXPECT_EQ(steps, (std::set<int64_t>{0, 8}));
  }
  // t001 ran once; t002 was started, then resumed on the same front, which still had the killed
  // run's engine going: the resumed run stopped it before syncing its own config, and went on from
  // the steps its metrics.jsonl holds rather than from step 0.
  const std::string log1 = read_file(s.dir / "trials" / "t001.log");
  EXPECT_EQ(log1.find("=== research: resume"), std::string::npos) << log1;
  const std::string log2 = read_file(s.dir / "trials" / "t002.log");
  const size_t resumed = log2.find("=== research: resume");
  ASSERT_NE(resumed, std::string::npos) << log2;
  const std::string after = log2.substr(resumed);
  EXPECT_NE(after.substr(0, after.find('\n')).find("--swarm-url " + front.url()), std::string::npos)
      << after;
  EXPECT_NE(after.substr(0, after.find('\n')).find("--resume"), std::string::npos) << after;
  EXPECT_NE(after.find("stopping it so this run's config can be synced"), std::string::npos)
      << after;
  EXPECT_EQ(after.find("starting the run again from step 0"), std::string::npos) << after;
  EXPECT_EQ(read_file(s.dir / "trials" / "t002.server"), front.url() + "\n");
  EXPECT_FALSE(fs::exists(s.dir / "trials" / "t002" / "earlier"));
  const std::string metrics = read_file(t2_metrics);
  // One resume marker, after the steps the killed run trained (none of them trained again).
  std::vector<int64_t> resumed_at;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    const std::optional<Json> rec = try_parse_json(line);
    if (rec && rec->is_object() && rec->value("kind", "") == "resume")
      resumed_at.push_back(rec->value("step", int64_t(-1)));
  }
  ASSERT_EQ(resumed_at.size(), 1u) << metrics;
  EXPECT_GE(resumed_at[0], trained_before) << metrics;
  EXPECT_EQ(read_classic_last_step(t2_metrics), 8);
  // The front is left usable: its engine stopped, its process up.
  EXPECT_EQ(client::SwarmClient(front.url()).get_engine_status().status, client::kOffline);
  EXPECT_FALSE(e2e::process_gone(front.pid()));
  EXPECT_EQ(parse_json(read_file(s.dir / "finish.flag"), "finish.flag")["exit_code"], 0);
}

// A trial server that does not answer is waited out for budget.unreachable_seconds, then the trial
// ends unsuccessfully naming the URL: with one attempt it is recorded as failed and the study ends
// cleanly (exit 1, no result); with a second attempt and a live server beside it, the retry runs
// there and the study concludes.
TEST(ResearchE2E, AnUnreachableTrialServerIsWaitedOutThenReported) {
  e2e::ScratchDir scratch;
  e2e::ClosedPort dead;
  const std::string base_study =
      "base: base.yaml\n"
      "objective: {metric: val/greedy_reward, step: 2}\n"
      "search:\n"
      "  wf: {key: ajet.rollout.user_workflow, choice: [\"echo 0.2\", \"echo 0.8\"]}\n"
      "seeds: {search: 1, confirm: []}\n";
  const StudyDirs s =
      write_study(scratch,
                  base_study +
                      "budget: {trials: 1, max_attempts: 1, unreachable_seconds: 1}\n"
                      "runner: {type: remote, servers: [" +
                      dead.url() + "]}\n",
                  "dead");
  e2e::Captured r = research("run " + shell_quote(s.study_file.string()) + " --dir " +
                             shell_quote(s.dir.string()));
  ASSERT_EQ(exit_code(r.status), 1) << r.out;
  EXPECT_NE(
      r.out.find("t001: the trial server " + dead.url() + " does not answer; waiting up to 1 s"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("t001: giving up: the trial server " + dead.url() + " did not answer"),
            std::string::npos)
      << r.out;
  {
    Journal j(s.dir / "journal.sqlite");
    ASSERT_EQ(j.trials().size(), 1u);
    const TrialRow t = j.trials().front();
    EXPECT_EQ(t.status, kFailed);
    // Said as an unreachable server (its URL and the wait), not as a crash.
    const std::string said =
        "server unreachable: the trial server " + dead.url() +
        " did not answer for 1 s "
        "(budget.unreachable_seconds), so the run did not start; gave up after 1 attempt(s)";
    EXPECT_EQ(t.reason, said);
    EXPECT_EQ(t.reason.find("crashed"), std::string::npos) << t.reason;
    EXPECT_NE(t.error.find("giving up"), std::string::npos) << t.error;  // the trial log's tail
    bool failed = false;
    for (const Decision& d : j.decisions()) {
      if (d.kind != "fail") continue;
      failed = true;
      EXPECT_EQ(d.reason, said);
      EXPECT_EQ(d.numbers["unreachable_server"], dead.url());
      EXPECT_GE(d.numbers["waited_s"].get<double>(), 1.0);
    }
    EXPECT_TRUE(failed);
    const std::string notebook = read_file(s.dir / "notebook.md");
    EXPECT_NE(notebook.find("| fail | t001 | " + said + " |"), std::string::npos)
        << notebook;  // the decision log
    EXPECT_NE(notebook.find(said + " (failed attempts: 1)"), std::string::npos)
        << notebook;  // the trials table
    EXPECT_EQ(notebook.find("crashed 1 times"), std::string::npos) << notebook;
    const e2e::Captured st = research("status " + shell_quote(s.dir.string()));
    EXPECT_EQ(exit_code(st.status), 0) << st.out;
    EXPECT_NE(st.out.find("failed: t001: " + said), std::string::npos) << st.out;
  }
  EXPECT_EQ(parse_json(read_file(s.dir / "finish.flag"), "finish.flag")["exit_code"], 1);

  e2e::SwarmProcess front(e2e::SwarmProcess::Options{scratch / "front", {}, "", {}});
  ASSERT_FALSE(front.url().empty());
  const StudyDirs s2 =
      write_study(scratch,
                  base_study +
                      "budget: {trials: 1, max_attempts: 2, unreachable_seconds: 1}\n"
                      "runner: {type: remote, servers: [" +
                      dead.url() + ", " + front.url() + "]}\n",
                  "retry");
  r = research("run " + shell_quote(s2.study_file.string()) + " --dir " +
               shell_quote(s2.dir.string()));
  ASSERT_EQ(exit_code(r.status), 0) << r.out;
  Journal j(s2.dir / "journal.sqlite");
  ASSERT_EQ(j.trials().size(), 1u);
  EXPECT_EQ(j.trials().front().status, kCompleted);
  EXPECT_EQ(j.trials().front().attempts, 1);
  bool retried = false;
  for (const Decision& d : j.decisions()) {
    if (d.kind != "retry") continue;
    retried = true;
    EXPECT_EQ(
        d.reason.rfind(
            "server unreachable: the trial server " + dead.url() + " did not answer for 1 s", 0),
        0u)
        << d.reason;
    EXPECT_NE(d.reason.find("attempt 2 of 2"), std::string::npos) << d.reason;
  }
  EXPECT_TRUE(retried) << r.out;
  EXPECT_NE(r.out.find("research: t001 server unreachable: the trial server " + dead.url()),
            std::string::npos)
      << r.out;
  EXPECT_NE(read_file(s2.dir / "trials" / "t001.log").find("--swarm-url " + front.url()),
            std::string::npos);
}

TEST(ResearchE2E, UsageErrorsExitTwoAndNameTheProblem) {
  e2e::ScratchDir scratch;
  e2e::Captured r = research("");
  EXPECT_EQ(exit_code(r.status), 2) << r.out;
  r = research("run " + shell_quote((scratch / "missing.yaml").string()));
  EXPECT_EQ(exit_code(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("no study file"), std::string::npos) << r.out;
  const StudyDirs s = write_study(scratch, std::string(kStudy) + "parallell: 2\n", "typo");
  r = research("run " + shell_quote(s.study_file.string()) + " --dir " +
               shell_quote(s.dir.string()));
  EXPECT_EQ(exit_code(r.status), 2) << r.out;
  EXPECT_NE(r.out.find("did you mean 'parallel'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(s.dir)) << "a refused study leaves nothing behind";
  r = research("resume " + shell_quote((scratch / "nothing").string()));
  EXPECT_EQ(exit_code(r.status), 2) << r.out;
  r = research("status " + shell_quote((scratch / "nothing").string()));
  EXPECT_EQ(exit_code(r.status), 2) << r.out;
}

}  // namespace
}  // namespace ajet::research
