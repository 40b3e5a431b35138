// The command workflows without a front: worker mode (ajet.rollout.user_workflow_mode: worker)
// serves many episodes per process, restarts a worker that crashed or passed the timeout (its
// episode gets reward 0 with the reason, as a broken per-episode command does), and stops its
// workers at the end; per-episode mode honours the timeout too. The workers are small Python
// scripts; no test depends on how fast anything runs (a timeout test waits for a worker that never
// answers).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "classic/workflow.h"
#include "classic/workflow_worker.h"
#include "common/fs.h"
#include "common/json.h"
#include "e2e/e2e_util.h"
#include "tasks/task.h"

namespace ajet::classic {
namespace {

namespace fs = std::filesystem;

// Answers each request line with its task id, its sampling and its pid; task "crash" exits with 3,
// task "hang" never answers, task "chatty" prints a log line on stdout before its answer.
constexpr const char* kWorker = R"PY(import json, os, sys, time
for line in sys.stdin:
    req = json.loads(line)
    tid = req["task"]["task_id"]
    if tid == "crash":
        os._exit(3)
    if tid == "hang":
        time.sleep(3600)
    if tid == "chatty":
        print("a log line, not JSON", flush=True)
    print(json.dumps({"reward": 1, "is_success": True, "metadata": {
        "pid": os.getpid(), "task_id": tid, "sampling": req["sampling"], "model": req["model"],
        "base_url": req["base_url"], "api_key": req["api_key"], "episode_type": req["episode_type"],
        "mode": os.environ.get("AJET_WORKFLOW_MODE", "")}}), flush=True)
)PY";

tasks::Task task(const std::string& id) {
  tasks::Task t;
  t.task_id = id;
  t.main_query = "2+2=?";
  return t;
}

struct WorkerSetup {
  e2e::ScratchDir dir;
  CommandWorkflowOptions options;

  explicit WorkerSetup(int64_t workers, double timeout_s = 0, const std::string& mode = "worker") {
    write_file_atomic(dir / "worker.py", kWorker);
    options.command = "python3 worker.py";
    options.cwd = dir.path();
    options.stderr_log = dir / "workflow_stderr.log";
    options.mode = mode;
    options.workers = workers;
    options.timeout_s = timeout_s;
  }
};

EpisodeReport run_episode(const Workflow& w, const tasks::Task& t,
                          const std::string& type = "train", Json sampling = Json::object()) {
  EpisodeContext ctx;
  ctx.task = &t;
  ctx.episode.base_url = "http://127.0.0.1:9/v1";
  ctx.episode.api_key = "key-" + t.task_id;
  ctx.episode_type = type;
  ctx.sampling = std::move(sampling);
  ctx.cancelled = [] { return false; };
  return w.run(ctx);
}

// Running (or stopped), not a zombie: /proc/<pid>/stat's state field.
bool running(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z';
}

// A worker may be the grandchild of the shell its slot started: the signal that ends the shell's
// group reaches it too, but it dies (and init reaps it) on its own schedule: still running 30 s
// later is alive.
bool outlives_its_stop(int64_t pid) {
  for (int i = 0; i < 300 && running(pid); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return running(pid);
}

TEST(WorkflowWorker, ServesManyEpisodesPerProcessFromManyThreads) {
  WorkerSetup setup(2);
  std::set<int64_t> pids;
  {
    auto workflow = make_command_workflow(setup.options);
    EXPECT_NE(workflow->describe().find("2 worker processes"), std::string::npos)
        << workflow->describe();
    std::vector<tasks::Task> tasks;
    for (int i = 0; i < 12; ++i) tasks.push_back(task("t" + std::to_string(i)));
    std::vector<EpisodeReport> reports(tasks.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {  // more episodes in flight than workers: they wait for a free one
      threads.emplace_back([&] {
        for (size_t i = next++; i < tasks.size(); i = next++) {
          reports[i] =
              run_episode(*workflow, tasks[i], "eval", Json{{"temperature", 1.0}, {"top_p", 1.0}});
        }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < reports.size(); ++i) {
      const Json& m = reports[i].output.metadata;
      SCOPED_TRACE(m.dump());
      EXPECT_DOUBLE_EQ(reports[i].output.reward, 1.0);
      EXPECT_EQ(m["task_id"], tasks[i].task_id);  // each answer reached its own episode
      EXPECT_EQ(m["api_key"], "key-" + tasks[i].task_id);
      EXPECT_EQ(m["base_url"], "http://127.0.0.1:9/v1");
      EXPECT_EQ(m["model"], "agentjet");
      EXPECT_EQ(m["episode_type"], "eval");
      EXPECT_EQ(m["sampling"], (Json{{"temperature", 1.0}, {"top_p", 1.0}}));
      EXPECT_EQ(m["mode"], "worker");
      pids.insert(m["pid"].get<int64_t>());
    }
    EXPECT_GE(pids.size(), 1u);
    EXPECT_LE(pids.size(), 2u) << "more processes than workers: 12 episodes, 2 workers";
    for (int64_t pid : pids)
      EXPECT_TRUE(running(pid)) << "worker " << pid << " ended between episodes";
  }
  // The workflow is gone: so are its workers.
  for (int64_t pid : pids)
    EXPECT_FALSE(outlives_its_stop(pid)) << "worker " << pid << " outlived the workflow";
}

TEST(WorkflowWorker, CrashedWorkerFailsItsEpisodeAndIsStartedAgain) {
  WorkerSetup setup(1);
  auto workflow = make_command_workflow(setup.options);
  const tasks::Task ok1 = task("ok1"), crash = task("crash"), ok2 = task("ok2");
  const EpisodeReport a = run_episode(*workflow, ok1);
  const EpisodeReport b = run_episode(*workflow, crash);
  const EpisodeReport c = run_episode(*workflow, ok2);
  EXPECT_DOUBLE_EQ(a.output.reward, 1.0);
  // What a broken per-episode command gets: reward 0, agent_error, the reason.
  EXPECT_DOUBLE_EQ(b.output.reward, 0.0);
  EXPECT_EQ(b.output.is_success, std::optional<bool>(false));
  EXPECT_EQ(b.termination, "agent_error");
  EXPECT_EQ(b.output.metadata["termination"], "agent_error");
  EXPECT_NE(b.output.metadata["error"].get<std::string>().find("exit code 3"), std::string::npos)
      << b.output.metadata.dump();
  EXPECT_EQ(b.output.metadata["task_id"], "crash");
  // The next episode ran on a new worker.
  EXPECT_DOUBLE_EQ(c.output.reward, 1.0);
  EXPECT_NE(c.output.metadata["pid"], a.output.metadata["pid"]);
}

TEST(WorkflowWorker, WorkerPastTheTimeoutIsStoppedAndItsEpisodeFails) {
  WorkerSetup setup(1, /*timeout_s=*/0.5);
  auto workflow = make_command_workflow(setup.options);
  const tasks::Task ok1 = task("ok1"), hang = task("hang"), ok2 = task("ok2");
  const EpisodeReport a = run_episode(*workflow, ok1);
  const EpisodeReport b = run_episode(*workflow, hang);  // never answers: waits for the timeout
  const EpisodeReport c = run_episode(*workflow, ok2);
  EXPECT_DOUBLE_EQ(a.output.reward, 1.0);
  EXPECT_DOUBLE_EQ(b.output.reward, 0.0);
  EXPECT_EQ(b.termination, "timeout");
  EXPECT_NE(b.output.metadata["error"].get<std::string>().find("user_workflow_timeout"),
            std::string::npos)
      << b.output.metadata.dump();
  EXPECT_FALSE(outlives_its_stop(a.output.metadata["pid"].get<int64_t>()))
      << "the hung worker was not stopped";
  EXPECT_DOUBLE_EQ(c.output.reward, 1.0);
  EXPECT_NE(c.output.metadata["pid"], a.output.metadata["pid"]);
}

TEST(WorkflowWorker, StdoutLinesThatAreNotJsonGoToTheLog) {
  WorkerSetup setup(1);
  auto workflow = make_command_workflow(setup.options);
  const tasks::Task chatty = task("chatty"), ok = task("ok");
  EXPECT_DOUBLE_EQ(run_episode(*workflow, chatty).output.reward, 1.0);
  const EpisodeReport next = run_episode(*workflow, ok);
  EXPECT_EQ(next.output.metadata["task_id"], "ok");  // answers stay paired with their episodes
  EXPECT_NE(read_file(setup.options.stderr_log).find("a log line, not JSON"), std::string::npos);
}

TEST(WorkflowWorker, CommandThatIsNoWorkerFailsEachEpisodeWithTheReason) {
  WorkerSetup setup(1);
  setup.options.command = "echo 'not a worker' >&2; exit 5";
  auto workflow = make_command_workflow(setup.options);
  for (const char* id : {"a", "b"}) {
    const tasks::Task t = task(id);
    const EpisodeReport r = run_episode(*workflow, t);
    EXPECT_DOUBLE_EQ(r.output.reward, 0.0);
    EXPECT_EQ(r.termination, "agent_error");
    EXPECT_NE(r.output.metadata["error"].get<std::string>().find("workflow worker"),
              std::string::npos)
        << r.output.metadata.dump();
  }
  EXPECT_NE(read_file(setup.options.stderr_log).find("not a worker"), std::string::npos);
}

TEST(WorkflowWorker, PerEpisodeCommandPastTheTimeoutFails) {
  WorkerSetup setup(1, /*timeout_s=*/0.5, "per_episode");
  setup.options.command = "sleep 3600";
  auto workflow = make_command_workflow(setup.options);
  const tasks::Task t = task("slow");
  const EpisodeReport r = run_episode(*workflow, t);
  EXPECT_DOUBLE_EQ(r.output.reward, 0.0);
  EXPECT_EQ(r.termination, "timeout");
}

TEST(WorkflowWorker, RequestLineCarriesTheTaskInItsOrder) {
  tasks::Task t = task("t1");
  t.metadata = tasks::OrderedJson::parse(R"({"zeta": 1, "alpha": 2})");
  EpisodeContext ctx;
  ctx.task = &t;
  ctx.episode.base_url = "http://h/v1";
  ctx.episode.api_key = "k";
  ctx.sampling = Json{{"temperature", 0.0}};
  const std::string line = worker_request(ctx);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_LT(line.find("\"zeta\""), line.find("\"alpha\"")) << line;
  const Json j = Json::parse(line);
  EXPECT_EQ(j["task"]["task_id"], "t1");
  EXPECT_EQ(j["sampling"], (Json{{"temperature", 0.0}}));
  EXPECT_EQ(j["api_key"], "k");
}

}  // namespace
}  // namespace ajet::classic
