// End-to-end runs of `ajet --conf` (the real ajet binary, which starts the real ajet-swarm, which
// starts the real ajet-engine) on the micro model with the debug and torch backbones: counts and
// files, never speed. Plus the errors a user meets first: unknown backbone, missing file, wrong
// types.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "common/fs.h"
#include "common/json.h"
#include "classic_fixture.h"
#include "e2e/e2e_util.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;
using e2e::bin;
using e2e::Captured;
using e2e::run_capture;
using e2e::shell_quote;

TEST(ClassicRun, DebugBackboneRunsStepsValidatesAndWritesFiles) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "calc.yaml", classic_yaml(model));
  Captured r = run_ajet("--conf " + shell_quote((dir / "calc.yaml").string()) + " --exp-dir " +
                        shell_quote((dir / "exps").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const fs::path exp = dir / "exps" / "run";
  ASSERT_TRUE(fs::exists(exp / "metrics.jsonl")) << r.out;
  std::vector<Json> records = read_jsonl(exp / "metrics.jsonl");
  int train = 0, val = 0;
  for (const auto& rec : records) {
    if (rec["kind"] == "train") {
      train += 1;
      EXPECT_EQ(rec["step"].get<int64_t>(), train);
      EXPECT_EQ(rec["rollout"]["episodes"].get<int64_t>(), 4) << rec.dump();  // 2 tasks x 2 repeats
      EXPECT_EQ(rec["rollout"]["failed"].get<int64_t>(), 0);
      EXPECT_GE(rec["rollout"]["llm_calls"].get<int64_t>(), 4);
      EXPECT_EQ(rec["global_step"].get<int64_t>(), 0);  // debug: no training
      // Every episode really talked to the model: none ended on a failed or refused call.
      EXPECT_FALSE(rec["rollout"]["terminations"].contains("model_error")) << rec.dump();
      EXPECT_FALSE(rec["rollout"]["terminations"].contains("context_limit")) << rec.dump();
      EXPECT_GT(rec["rollout"]["completion_tokens"].get<int64_t>(), 0) << rec.dump();
    } else if (rec["kind"] == "validation") {
      val += 1;
      EXPECT_EQ(rec["validation"]["tasks"].get<int64_t>(), 3) << rec.dump();
      EXPECT_EQ(rec["validation"]["k"].get<int64_t>(), 2);
      EXPECT_EQ(rec["greedy_rollout"]["episodes"].get<int64_t>(), 3);
    }
  }
  EXPECT_EQ(train, 2) << r.out;
  EXPECT_EQ(val, 3) << r.out;  // before training, after step 1, after step 2
  // reward_curve.html: the front's dashboard with its series inlined (the train and validation
  // numbers)
  std::string html = read_file(exp / "reward_curve.html");
  EXPECT_NE(html.find("window.AJET_SNAPSHOT = "), std::string::npos);
  EXPECT_NE(html.find("\"rollout/reward_mean\":[["), std::string::npos);
  EXPECT_NE(html.find("\"val/greedy_success\":[["), std::string::npos);
  EXPECT_NE(html.find("\"val/sampled_success\":[["), std::string::npos);
  // A log (not a terminal) gets one line per step: the step's line, not the progress bar.
  EXPECT_NE(r.out.find("step 1/2  reward"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1/2 ["), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val @ step 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ajet: held-out success, step 0 -> 2: sampled "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("reward curve: " + (exp / "reward_curve.html").string()), std::string::npos)
      << r.out;
  // The front ran under the experiment directory and stopped cleanly.
  EXPECT_TRUE(fs::exists(exp / "train_config.yaml"));
  EXPECT_NE(read_file(exp / "swarm.log").find("ajet-swarm: stopped"), std::string::npos);
}

// The torch backbone through the whole stack: every step's batch is trained by the engine (one
// optimizer step per step) and the trainer's metrics reach metrics.jsonl and the step line.
TEST(ClassicRun, TorchBackboneTrainsEachStepThroughTheFront) {
  // Also with two data-parallel engine ranks, passed through to ajet-swarm start.
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE("engine ranks " + std::to_string(ranks));
    e2e::ScratchDir dir;
    const fs::path model = micro_model();
    std::string yaml = classic_yaml(model);
    yaml.replace(yaml.find("backbone: debug"), 15, "backbone: torch");
    yaml.replace(yaml.find("val_before_train: true"), 22, "val_before_train: false");
    write_file_atomic(dir / "torch.yaml", yaml);
    Captured r =
        run_ajet("--conf " + shell_quote((dir / "torch.yaml").string()) + " --exp-dir " +
                 shell_quote((dir / "exps").string()) +
                 (ranks > 1 ? " --swarm-flag=--engine-ranks=" + std::to_string(ranks) : ""));
    ASSERT_EQ(r.status, 0) << r.out;
    int train = 0;
    for (const auto& rec : read_jsonl(dir / "exps" / "run" / "metrics.jsonl")) {
      if (rec["kind"] != "train") continue;
      train += 1;
      EXPECT_EQ(rec["global_step"].get<int64_t>(), train)
          << rec.dump();  // one optimizer step per step
      EXPECT_TRUE(rec["trainer"].contains("loss"))
          << rec.dump();  // the trainer's metrics came back
      EXPECT_EQ(rec["rollout"]["episodes"].get<int64_t>(), 4);
    }
    EXPECT_EQ(train, 2) << r.out;
    EXPECT_NE(r.out.find("loss "), std::string::npos) << r.out;
    // The launcher's stop_engine saved step 2; the SIGINT that ends the front then has nothing new
    // to save (no second checkpoint at the end of a run).
    const std::string log = read_file(dir / "exps" / "run" / "swarm.log");
    EXPECT_NE(log.find("ajet-swarm: no step trained since the last checkpoint ("),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("global_step_2): nothing to save"), std::string::npos) << log;
    EXPECT_EQ(log.find("ajet-swarm: saving a checkpoint"), std::string::npos) << log;
    if (ranks > 1) {
      EXPECT_NE(log.find("2 data-parallel ranks"), std::string::npos) << log;
      EXPECT_NE(log.find("training on 2 data-parallel ranks"), std::string::npos) << log;
    }
  }
}

TEST(ClassicRun, ExternalCommandWorkflowReportsItsOwnReward) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  // An agent in shell: one chat call with the episode key, then its reward as JSON on the last
  // line.
  write_file_atomic(
      dir / "agent.sh",
      "#!/bin/sh\n"
      "set -e\n"
      "test -n \"$AJET_TASK\"\n"
      "curl -sf -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: application/json' "
      "-d "
      "'{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}' "
      "\"$OPENAI_BASE_URL/chat/completions\" > /dev/null\n"
      "echo 'agent log line'\n"
      "echo '{\"reward\": 0.5, \"is_success\": false, \"log_metrics\": {\"llm_calls\": 1}}'\n");
  fs::permissions(dir / "agent.sh", fs::perms::owner_all);
  std::string yaml = classic_yaml(model);
  yaml.replace(yaml.find("  rollout:\n"), 11, "  rollout:\n    user_workflow: \"sh agent.sh\"\n");
  write_file_atomic(dir / "cmd.yaml", yaml);
  Captured r = run_ajet("--conf " + shell_quote((dir / "cmd.yaml").string()) + " --exp-dir " +
                        shell_quote((dir / "exps").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<Json> records = read_jsonl(dir / "exps" / "run" / "metrics.jsonl");
  int train = 0;
  for (const auto& rec : records) {
    if (rec["kind"] != "train") continue;
    train += 1;
    EXPECT_EQ(rec["rollout"]["episodes"].get<int64_t>(), 4);
    EXPECT_DOUBLE_EQ(rec["rollout"]["reward_mean"].get<double>(), 0.5);
    EXPECT_EQ(rec["rollout"]["llm_calls"].get<int64_t>(), 4);
  }
  EXPECT_EQ(train, 2);
}

// Worker mode through the real front: a Python worker makes one chat call per episode with the
// request's key and sampling, every train and validation episode is served, and no more processes
// start than there are workers (each writes its pid to a file when it starts).
TEST(ClassicRun, WorkerModeServesTrainAndValidationEpisodesWithFewProcesses) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(
      dir / "worker.py",
      "import json, os, sys, urllib.request\n"
      "open('pids.txt', 'a').write(f'{os.getpid()}\\n')\n"
      "for line in sys.stdin:\n"
      "    req = json.loads(line)\n"
      "    body = {'model': req['model'], 'messages': [{'role': 'user', 'content': 'hi'}], "
      "'max_tokens': 3,\n"
      "            **req['sampling']}\n"
      "    r = urllib.request.Request(req['base_url'] + '/chat/completions', "
      "json.dumps(body).encode(),\n"
      "        {'Authorization': 'Bearer ' + req['api_key'], 'Content-Type': 'application/json'})\n"
      "    urllib.request.urlopen(r).read()\n"
      "    print(json.dumps({'reward': 0.5, 'log_metrics': {'llm_calls': 1}}), flush=True)\n");
  std::string yaml = classic_yaml(model);
  yaml.replace(
      yaml.find("  rollout:\n"), 11,
      "  rollout:\n    user_workflow: \"python3 worker.py\"\n    user_workflow_mode: worker\n"
      "    user_workflow_workers: 2\n");
  write_file_atomic(dir / "worker.yaml", yaml);
  Captured r = run_ajet("--conf " + shell_quote((dir / "worker.yaml").string()) + " --exp-dir " +
                        shell_quote((dir / "exps").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 worker processes"), std::string::npos) << r.out;
  int train = 0, val = 0;
  for (const auto& rec : read_jsonl(dir / "exps" / "run" / "metrics.jsonl")) {
    if (rec["kind"] == "train") {
      train += 1;
      EXPECT_EQ(rec["rollout"]["episodes"].get<int64_t>(), 4) << rec.dump();
      EXPECT_EQ(rec["rollout"]["failed"].get<int64_t>(), 0) << rec.dump();
      EXPECT_DOUBLE_EQ(rec["rollout"]["reward_mean"].get<double>(), 0.5) << rec.dump();
      EXPECT_EQ(rec["rollout"]["llm_calls"].get<int64_t>(), 4) << rec.dump();
    } else if (rec["kind"] == "validation") {
      val += 1;
      EXPECT_EQ(rec["greedy_rollout"]["episodes"].get<int64_t>(), 3) << rec.dump();
      // The worker passed the request's sampling: the sampled episodes were sampled.
      EXPECT_GT(rec["sampled_requests"]["calls"].get<int64_t>(), 0) << rec.dump();
      EXPECT_EQ(rec["sampled_requests"]["sampled_calls"], rec["sampled_requests"]["calls"])
          << rec.dump();
    }
  }
  EXPECT_EQ(train, 2) << r.out;
  EXPECT_EQ(val, 3) << r.out;
  EXPECT_EQ(r.out.find("ran greedy"), std::string::npos) << r.out;
  // 8 train and 27 validation episodes, on at most 2 processes (a crash would have added one).
  std::istringstream pids(read_file(dir / "pids.txt"));
  int processes = 0;
  for (std::string line; std::getline(pids, line);) processes += line.empty() ? 0 : 1;
  EXPECT_GE(processes, 1);
  EXPECT_LE(processes, 2) << read_file(dir / "pids.txt");
}

// An agent that ignores AJET_SAMPLING turns sampled validation greedy without a word: ajet reads
// the sampled episodes' requests back and warns once per validation, with a metric; an agent that
// passes it gets no warning.
TEST(ClassicRun, WarnsWhenSampledValidationGotOnlyGreedyRequests) {
  const fs::path model = micro_model();
  for (const bool passes_sampling : {false, true}) {
    SCOPED_TRACE(passes_sampling ? "passes AJET_SAMPLING" : "ignores AJET_SAMPLING");
    e2e::ScratchDir dir;
    write_file_atomic(
        dir / "agent.sh",
        std::string("#!/bin/sh\nset -e\n") +
            (passes_sampling ? "s=${AJET_SAMPLING#?}; s=${s%?}\n" : "s=\n") +
            "body='{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
            "\"max_tokens\":3'${s:+,$s}'}'\n"
            "curl -sf -H \"Authorization: Bearer $OPENAI_API_KEY\" -H 'Content-Type: "
            "application/json' "
            "-d \"$body\" \"$OPENAI_BASE_URL/chat/completions\" > /dev/null\n"
            "echo 1\n");
    std::string yaml = classic_yaml(model);
    yaml.replace(yaml.find("  rollout:\n"), 11, "  rollout:\n    user_workflow: \"sh agent.sh\"\n");
    yaml.replace(yaml.find("    val_before_train: true\n"), 27,
                 "    val_before_train: true\n    val_only: true\n");
    write_file_atomic(dir / "greedy.yaml", yaml);
    Captured r = run_ajet("--conf " + shell_quote((dir / "greedy.yaml").string()) + " --exp-dir " +
                          shell_quote((dir / "exps").string()));
    ASSERT_EQ(r.status, 0) << r.out;
    int val = 0;
    for (const auto& rec : read_jsonl(dir / "exps" / "run" / "metrics.jsonl")) {
      if (rec["kind"] != "validation") continue;
      val += 1;
      const Json& check = rec["sampled_requests"];
      EXPECT_GT(check["calls"].get<int64_t>(), 0) << rec.dump();
      EXPECT_EQ(check["sampled_calls"].get<int64_t>(),
                passes_sampling ? check["calls"].get<int64_t>() : 0)
          << rec.dump();
    }
    EXPECT_EQ(val, 1) << r.out;
    if (passes_sampling) {
      EXPECT_EQ(r.out.find("ran greedy"), std::string::npos) << r.out;
    } else {
      const size_t at = r.out.find("ran greedy");
      ASSERT_NE(at, std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("ran greedy", at + 1), std::string::npos)
          << "warned more than once: " << r.out;
      EXPECT_NE(r.out.find("AJET_SAMPLING"), std::string::npos) << r.out;  // names the fix
    }
  }
}

// Dynamic sampling (rollout_until_finish_enough_non_dummy_tasks): a step samples task batches until
// train_batch_size groups have unequal rewards, at most max_num_gen_batches, and the batch the
// front forms holds every episode sampled. The agent gives a constant reward on two tasks in three
// and a reward that depends on the episode on the others, so some steps need more than one batch.
TEST(ClassicRun, DynamicSamplingSamplesUntilEnoughGroupsCarryASignal) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "agent.sh",
                    "#!/bin/sh\n"
                    "h=$(printf '%s' \"$AJET_TASK\" | cksum | cut -d' ' -f1)\n"
                    "last=${AJET_ENV_SEED#${AJET_ENV_SEED%?}}\n"
                    "if [ $((h % 3)) -eq 0 ]; then r=$((last % 2)); else r=1; fi\n"
                    "echo \"{\\\"reward\\\": $r}\"\n");
  std::string yaml = classic_yaml(
      model,
      "  swarm_mode_sample_collection_method: rollout_until_finish_enough_non_dummy_tasks\n");
  yaml.replace(yaml.find("  rollout:\n"), 11, "  rollout:\n    user_workflow: \"sh agent.sh\"\n");
  yaml.replace(yaml.find("num_repeat: 2"), 13, "num_repeat: 4");
  yaml.replace(yaml.find("num_training_tasks: 6"), 21, "num_training_tasks: 40");
  yaml.replace(yaml.find("total_training_steps: 2"), 23, "total_training_steps: 4");
  yaml.replace(yaml.find("    val_before_train: true\n"), 27,
               "    val_before_train: false\n    algorithm:\n      max_num_gen_batches: 3\n");
  yaml.replace(yaml.find("test_freq: 1"), 12, "test_freq: 0");
  write_file_atomic(dir / "ds.yaml", yaml);
  Captured r = run_ajet("--conf " + shell_quote((dir / "ds.yaml").string()) + " --exp-dir " +
                        shell_quote((dir / "exps").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  int train = 0, more_than_one = 0;
  int64_t episodes = 0;
  for (const auto& rec : read_jsonl(dir / "exps" / "run" / "metrics.jsonl")) {
    if (rec["kind"] != "train") continue;
    train += 1;
    const Json& s = rec["sampling"];
    const int64_t batches = s["gen_batches"].get<int64_t>(),
                  informative = s["informative_groups"].get<int64_t>();
    EXPECT_GE(batches, 1) << rec.dump();
    EXPECT_LE(batches, 3) << rec.dump();
    EXPECT_EQ(s["groups"].get<int64_t>(), batches * 2) << rec.dump();
    // It stopped early only with enough signal, and sampled on only without it.
    if (batches < 3) {
      EXPECT_GE(informative, 2) << rec.dump();
    }
    if (batches > 1) {
      EXPECT_LE(informative, 1 + 2) << rec.dump();  // fewer than 2 before the last batch
    }
    EXPECT_LE(informative, s["groups"].get<int64_t>()) << rec.dump();
    EXPECT_EQ(rec["rollout"]["episodes"].get<int64_t>(), batches * 2 * 4) << rec.dump();
    more_than_one += batches > 1 ? 1 : 0;
    episodes += rec["rollout"]["episodes"].get<int64_t>();
  }
  EXPECT_EQ(train, 4) << r.out;
  EXPECT_GT(more_than_one, 0)
      << "every step was done after one batch: the agent's rewards do not exercise the rule";
  // The front formed one batch per step, holding every episode the step sampled.
  const std::string log = read_file(dir / "exps" / "run" / "swarm.log");
  size_t fired = 0;
  for (size_t at = log.find("rollout_until_any_client_agree_sync_weight fired");
       at != std::string::npos;
       at = log.find("rollout_until_any_client_agree_sync_weight fired", at + 1)) {
    fired += 1;
  }
  EXPECT_EQ(fired, 4u) << log;
}

TEST(ClassicRun, SigintStopsCleanly) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  std::string yaml = classic_yaml(model);
  yaml.replace(yaml.find("total_training_steps: 2"), 23, "total_training_steps: 100000");
  write_file_atomic(dir / "long.yaml", yaml);
  const fs::path out = dir / "out.txt";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::string conf = (dir / "long.yaml").string(), exps = (dir / "exps").string(),
                ajet = bin("ajet").string();
    ::execl(ajet.c_str(), ajet.c_str(), "--conf", conf.c_str(), "--exp-dir", exps.c_str(),
            (char*)nullptr);
    ::_exit(127);
  }
  const fs::path metrics = dir / "exps" / "run" / "metrics.jsonl";
  // Wait for the first finished step (an observable file), then interrupt.
  bool stepped = e2e::eventually(
      [&] {
        return fs::exists(metrics) &&
               read_file(metrics).find("\"kind\":\"train\"") != std::string::npos;
      },
      std::chrono::seconds(180));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_TRUE(e2e::eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; },
                              std::chrono::seconds(60)))
      << read_file(out);
  ASSERT_TRUE(stepped) << read_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(out);
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_file(out);
  EXPECT_NE(read_file(dir / "exps" / "run" / "swarm.log").find("ajet-swarm: stopped"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "exps" / "run" / "reward_curve.html"));
}

TEST(ClassicErrors, UnknownBackboneMissingFileAndBadTypesNameTheProblem) {
  e2e::ScratchDir dir;
  const fs::path model = micro_model();
  write_file_atomic(dir / "ok.yaml", classic_yaml(model));
  Captured r = run_ajet("--conf " + shell_quote((dir / "ok.yaml").string()) + " --backbone turbo");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--backbone"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("turbo"), std::string::npos) << r.out;

  r = run_ajet("--conf " + shell_quote((dir / "ok.yaml").string()) +
               " --set ajet.rollout.nmu_repeat=3");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("ajet.rollout.nmu_repeat"), std::string::npos) << r.out;
  r = run_ajet("--conf " + shell_quote((dir / "ok.yaml").string()) + " --set rollout.num_repeat=0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("ajet.rollout.num_repeat"), std::string::npos) << r.out;

  r = run_ajet("--conf " + shell_quote((dir / "nope.yaml").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("nope.yaml"), std::string::npos) << r.out;

  std::string yaml = classic_yaml(model);
  yaml.replace(yaml.find("num_repeat: 2"), 13, "num_repeat: many");
  write_file_atomic(dir / "bad.yaml", yaml);
  r = run_ajet("--conf " + shell_quote((dir / "bad.yaml").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("ajet.rollout.num_repeat"), std::string::npos) << r.out;

  write_file_atomic(dir / "nomodel.yaml", classic_yaml(dir / "missing-model"));
  r = run_ajet("--conf " + shell_quote((dir / "nomodel.yaml").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("ajet.model.path"), std::string::npos) << r.out;

  yaml = classic_yaml(model);
  yaml.replace(yaml.find("type: builtin"), 13, "type: random_dummy");
  write_file_atomic(dir / "dummy.yaml", yaml);
  r = run_ajet("--conf " + shell_quote((dir / "dummy.yaml").string()));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("random_dummy"), std::string::npos) << r.out;

  r = run_ajet("--backbone debug");
  EXPECT_EQ(WEXITSTATUS(r.status), 2);
  EXPECT_NE(r.out.find("--conf"), std::string::npos) << r.out;

  // Subcommands still work next to the main entry.
  r = run_ajet("tasks generate --task calc --n 1 --seed 1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"task_id\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ajet::classic
