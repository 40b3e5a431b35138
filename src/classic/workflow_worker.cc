#include "classic/workflow_worker.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/subprocess.h"
#include "tasks/task.h"

namespace ajet::classic {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll =
    std::chrono::milliseconds(100);  // how often a waiting episode checks stop and timeout

// Forks from one thread that lives as long as the pool: PR_SET_PDEATHSIG (common/subprocess.h) ties
// a child to the thread that spawned it, and the episode runner's threads end with every step.
class Spawner {
 public:
  Spawner() : thread_([this] { loop(); }) {}
  ~Spawner() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Blocks until the spawner thread has started it; rethrows Subprocess::spawn's error.
  Subprocess spawn(const SpawnOptions& options) {
    std::packaged_task<Subprocess()> task([&options] { return Subprocess::spawn(options); });
    std::future<Subprocess> started = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return started.get();
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<Subprocess()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return done_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Subprocess()>> queue_;
  bool done_ = false;
  std::thread thread_;  // last: started once the members above exist
};

class WorkerWorkflow : public Workflow {
 public:
  explicit WorkerWorkflow(CommandWorkflowOptions options)
      : options_(std::move(options)), slots_(size_t(std::max<int64_t>(1, options_.workers))) {}

  // End of file on stdin asks every worker to exit; those still running 2 s later are terminated.
  ~WorkerWorkflow() override {
    for (Slot& slot : slots_) slot.process.close_input();
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    const auto to_log = [this](std::string line) { copy_to_log(line); };
    for (Slot& slot : slots_) {
      while (slot.process.valid() && !slot.process.exited() && Clock::now() < deadline) {
        slot.process.wait_some(kPoll, to_log);
      }
      if (slot.process.valid()) slot.process.terminate(std::chrono::milliseconds(500), to_log);
    }
  }

  EpisodeReport run(const EpisodeContext& ctx) const override {
    Slot& slot = acquire();
    struct Release {
      const WorkerWorkflow& pool;
      Slot& slot;
      ~Release() { pool.release(slot); }
    } release{*this, slot};
    return serve(slot, ctx);
  }

  std::string describe() const override {
    return "command, " + std::to_string(slots_.size()) + " worker processes: " + options_.command;
  }

 private:
  struct Slot {
    Subprocess process;  // not valid() until its first episode, and after it was stopped
    int64_t starts = 0;
    bool busy = false;  // held by one run(): only that thread touches `process`
  };

  // A free slot, a running worker first (a cold one only when none is free): a pool larger than the
  // episodes in flight starts no more workers than it needs.
  Slot& acquire() const {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      Slot* cold = nullptr;
      for (Slot& slot : slots_) {
        if (slot.busy) continue;
        if (slot.process.valid()) {
          slot.busy = true;
          return slot;
        }
        if (cold == nullptr) cold = &slot;
      }
      if (cold != nullptr) {
        cold->busy = true;
        return *cold;
      }
      free_.wait(lock);
    }
  }

  void release(Slot& slot) const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot.busy = false;
    }
    free_.notify_one();
  }

  // 1. The request on a live worker's stdin (one that exited while idle is started again first);
  // 2. its first JSON line on stdout, unless it exits, the run stops or the timeout passes first
  //    (then it is stopped, started again for the next episode, and this episode fails);
  // 3. that line read as a per-episode command's result.
  EpisodeReport serve(Slot& slot, const EpisodeContext& ctx) const {
    const tasks::Task& task = *ctx.task;
    const std::string request = worker_request(ctx) + "\n";
    bool sent = false;
    for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
      if (!slot.process.valid() || slot.process.try_reap()) {
        stop(slot);
        try {
          start(slot);
        } catch (const std::exception& e) {
          return failed_report(task, "agent_error",
                               std::string("workflow worker could not start: ") + e.what());
        }
      }
      sent = slot.process.write_input(request);
      if (!sent) stop(slot);
    }
    if (!sent)
      return failed_report(task, "agent_error",
                           "workflow worker exited before it read its episode" + where());

    std::optional<std::string> answer;
    const auto on_line = [&](std::string line) {
      if (answer || line.find_first_not_of(" \t\r") == std::string::npos) {
        if (answer) copy_to_log(line);
        return;
      }
      if (try_parse_json(line)) {
        answer = std::move(line);
      } else {
        copy_to_log(line);
      }
    };
    const auto deadline = Clock::now() + std::chrono::duration<double>(options_.timeout_s);
    while (!answer) {
      const bool exited = slot.process.wait_some(kPoll, on_line);
      if (answer) break;
      if (exited) {
        const std::string how = describe_exit(*slot.process.status());
        stop(slot);
        return failed_report(
            task, "agent_error",
            "workflow worker " + how + " before it answered" + where() + "; started again");
      }
      if (ctx.cancelled && ctx.cancelled()) {
        stop(slot);
        return failed_report(task, "agent_error", "cancelled");
      }
      if (options_.timeout_s > 0 && Clock::now() >= deadline) {
        stop(slot);
        return failed_report(
            task, "timeout",
            timeout_message(options_.timeout_s, "workflow worker") + " and started again");
      }
    }
    Json parsed;
    try {
      parsed = parse_command_result(*answer);
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", e.what());
    }
    return command_report(parsed, ctx, options_);
  }

  void start(Slot& slot) const {
    SpawnOptions spawn;
    spawn.argv = command_argv(options_);
    spawn.env = {{"AJET_WORKFLOW_MODE", "worker"}};
    spawn.cwd = options_.cwd;
    spawn.pipe_stdin = true;
    if (slot.starts > 0)
      log().warn("classic: starting a workflow worker again (start {} of its slot)",
                 slot.starts + 1);
    slot.process = spawner_.spawn(spawn);
    slot.starts += 1;
  }

  void stop(Slot& slot) const {
    if (slot.process.valid())
      slot.process.terminate(std::chrono::milliseconds(1000),
                             [this](std::string line) { copy_to_log(line); });
    slot.process = Subprocess();
  }

  // A worker's stdout that is not its answer (stray prints) goes where its stderr goes.
  void copy_to_log(const std::string& line) const {
    if (line.empty()) return;
    std::lock_guard<std::mutex> lock(log_mu_);
    std::ofstream(options_.stderr_log, std::ios::app) << "[worker stdout] " << line << "\n";
  }

  std::string where() const { return " (stderr in " + options_.stderr_log.string() + ")"; }

  CommandWorkflowOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable free_;
  mutable std::vector<Slot> slots_;
  mutable std::mutex log_mu_;
  mutable Spawner spawner_;
};

}  // namespace

std::string worker_request(const EpisodeContext& ctx) {
  // Ordered, as AJET_TASK is: a tool's parameters reach the prompt in the order the task gives
  // them.
  tasks::OrderedJson request;
  request["base_url"] = ctx.episode.base_url;
  request["api_key"] = ctx.episode.api_key;
  request["model"] = "agentjet";
  request["task"] = tasks::task_to_json(*ctx.task);
  request["episode_type"] = ctx.episode_type;
  request["sampling"] =
      tasks::OrderedJson(ctx.sampling);  // converted, not re-parsed (its keys sorted)
  request["env_seed"] = ctx.env_seed;
  return request.dump();
}

std::unique_ptr<Workflow> make_worker_workflow(CommandWorkflowOptions options) {
  return std::make_unique<WorkerWorkflow>(std::move(options));
}

}  // namespace ajet::classic
