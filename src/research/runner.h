// Where trials run. The controller talks to a TrialRunner only: start a trial (or continue it after
// a restart), ask whether it ended, read the validations it has recorded, stop it. LocalRunner runs
// classic runs (`ajet --conf BASE --set ... --exp-dir ...`) as child processes; RemoteRunner runs
// the same child processes against running swarm servers (`--swarm-url`), one trial per server at a
// time. Runners never decide anything: pruning, retries and budgets are the controller's.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/subprocess.h"

namespace ajet::research {

struct TrialLaunch {
  int64_t trial = 0;
  std::string name;                // the experiment name (t001)
  std::filesystem::path exp_base;  // <study>/trials: the experiment directory is exp_base / name
  std::filesystem::path base_config;
  std::filesystem::path workdir;  // where the run starts (the base config's relative paths)
  std::vector<std::pair<std::string, std::string>>
      overrides;  // key -> YAML value, controller keys included
  std::vector<std::string> extra_flags;
  bool resume = false;  // continue the run its directory holds (from its newest checkpoint)
  // Only validate the checkpoint of this step (a run that lost that step's validation): a val_only
  // run in its own directory (<name>-val<step>), whose validation counts at this step.
  std::optional<int64_t> revalidate_step;

  std::filesystem::path exp_dir() const { return exp_base / name; }
  // Where this launch's run writes: exp_dir(), or the revalidation's own directory.
  std::filesystem::path run_dir() const {
    return revalidate_step ? exp_base / (name + "-val" + std::to_string(*revalidate_step))
                           : exp_dir();
  }
};

struct TrialEnd {
  TrialEnd() = default;
  TrialEnd(bool ok, std::string what) : success(ok), description(std::move(what)) {}

  bool success = false;     // exit code 0: every step ran
  std::string description;  // "exit code 1", "killed by signal 9 (Killed)"
  // Set when the run never started because its server did not answer (the remote runner's wait ran
  // out): the server's URL and how long it was waited for. The controller then reports an
  // unreachable server, not a crash (the retry rule is the same).
  std::string unreachable_server;
  double waited_s = 0;
};

// One validation a trial recorded: its step and its numbers under val/ names.
struct Validation {
  int64_t step = 0;
  Json metrics;  // {"val/sampled_success": 0.5, ...}
};

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  virtual std::string describe() const = 0;
  // Starts the trial and returns at once; throws Error when it cannot be started at all.
  virtual void start(const TrialLaunch& launch) = 0;
  // Has the trial's run ended by itself? nullopt while it runs.
  virtual std::optional<TrialEnd> poll(int64_t trial) = 0;
  // The validations of the run in the trial's directory (running or not), in step order: the
  // current run's, without records a resume will redo.
  virtual std::vector<Validation> validations(const TrialLaunch& launch) = 0;
  // The last RL step the run in the trial's directory recorded (0 before the first).
  virtual int64_t last_step(const TrialLaunch& launch) = 0;
  // Stops a running trial (clean stop first: the run saves a checkpoint) and waits until it is
  // gone.
  virtual void stop(int64_t trial) = 0;
  // The last lines of the trial's log (for a crash report).
  virtual std::string log_tail(const TrialLaunch& launch, size_t lines) = 0;
  // Waits up to `timeout` for any running trial to end (or returns at once when none runs).
  virtual void wait(std::chrono::milliseconds timeout) = 0;
};

// Reads a classic run's metrics.jsonl: validation records as val/ numbers; a
// {"kind":"resume","step":N} line drops the records of steps after N (the resumed run writes them
// again); a torn last line (a run killed mid-write) is skipped.
std::vector<Validation> read_classic_validations(const std::filesystem::path& metrics_jsonl);
// The last step of a classic run's train records (after the same resume rule), 0 when none.
int64_t read_classic_last_step(const std::filesystem::path& metrics_jsonl);

// Classic runs as child processes of the controller, each in its own process group (SIGKILL of the
// controller kills them: PR_SET_PDEATHSIG), output appended to <exp base>/<name>.log (beside the
// experiment directory: a new classic run moves everything in its directory aside).
class LocalRunner : public TrialRunner {
 public:
  explicit LocalRunner(std::filesystem::path ajet_binary,
                       std::chrono::milliseconds stop_grace = std::chrono::seconds(60));
  ~LocalRunner() override;
  std::string describe() const override;
  void start(const TrialLaunch& launch) override;
  std::optional<TrialEnd> poll(int64_t trial) override;
  std::vector<Validation> validations(const TrialLaunch& launch) override;
  int64_t last_step(const TrialLaunch& launch) override;
  void stop(int64_t trial) override;
  std::string log_tail(const TrialLaunch& launch, size_t lines) override;
  void wait(std::chrono::milliseconds timeout) override;

  // The command line a launch runs (for tests and the notebook).
  std::vector<std::string> command(const TrialLaunch& launch) const;

 protected:
  // Starts `argv` as the trial's child: the directories made, an earlier run of the directory
  // waited out, a header line and then the child's output appended to the trial's log.
  void spawn(const TrialLaunch& launch, const std::vector<std::string>& argv);
  bool has_child(int64_t trial) const { return running_.count(trial) > 0; }
  size_t children() const { return running_.size(); }

 private:
  std::filesystem::path ajet_;
  std::chrono::milliseconds stop_grace_;
  std::map<int64_t, Subprocess> running_;
};

// The log of a trial (beside its experiment directory; a new classic run moves its directory's
// files aside): one line appended, e.g. the remote runner's word on a server that did not answer.
void append_trial_log(const TrialLaunch& launch, const std::string& line);

struct RemoteRunnerOptions {
  std::vector<std::string>
      servers;  // swarm server URLs (http://HOST:PORT), each runs one trial at a time
  std::chrono::milliseconds unreachable{
      600'000};  // how long a server that does not answer is waited out
  std::chrono::milliseconds first_probe_delay{
      1'000};  // back-off: the delay after the first failed probe,
  std::chrono::milliseconds max_probe_delay{30'000};  // doubling up to this
  std::function<void(const std::string&)> say = [](const std::string&) {};
};

// Classic runs as LocalRunner's child processes, each driving a free server of the list
// (`ajet --conf BASE ... --swarm-url URL`): the front's engine is started for the trial and stopped
// at its end, the episodes and metrics.jsonl stay on this machine. Before a launch the server is
// probed (GET /get_engine_status); one that does not answer is waited out, probing with back-off,
// for `unreachable` (a line when the wait starts, one when it ends), then the trial is reported
// ended unsuccessfully with a description naming the URL, so the controller retries or fails it. A
// resumed trial goes back to the server it last ran on when that one is free (the front's newest
// checkpoint is then its own). Never blocks the controller: waiting trials are probed from poll().
class RemoteRunner : public LocalRunner {
 public:
  RemoteRunner(std::filesystem::path ajet_binary, RemoteRunnerOptions options,
               std::chrono::milliseconds stop_grace = std::chrono::seconds(60));
  std::string describe() const override;
  void start(const TrialLaunch& launch) override;
  std::optional<TrialEnd> poll(int64_t trial) override;
  void stop(int64_t trial) override;
  void wait(std::chrono::milliseconds timeout) override;

  // The server a trial holds (running or waiting for it), "" when none.
  std::string server_of(int64_t trial) const;

 private:
  struct Waiting {
    TrialLaunch launch;
    std::string server;
    std::chrono::steady_clock::time_point since, next_probe;
    std::chrono::milliseconds delay{0};
  };
  std::string pick_server(const TrialLaunch& launch) const;
  bool answers(const std::string& server) const;
  void launch_on(const TrialLaunch& launch, const std::string& server);

  RemoteRunnerOptions options_;
  std::map<int64_t, std::string> held_;         // trial -> server, while it runs or waits
  std::map<int64_t, Waiting> waiting_;          // trials whose server has not answered yet
  std::map<int64_t, std::string> last_server_;  // trial -> the server of its last launch
  std::map<std::string, bool> unreachable_;     // servers that did not answer at their last probe
};

}  // namespace ajet::research
