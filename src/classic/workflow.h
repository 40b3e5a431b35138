// What one classic-mode episode runs once the launcher has claimed it: the built-in C++ agent of
// the task (tasks/builtin.h) over the episode's OpenAI endpoint, or an external command (any
// language): per episode, a process given OPENAI_BASE_URL, OPENAI_API_KEY, AJET_TASK and
// AJET_SAMPLING that prints its result as JSON on its last stdout line; in worker mode, long-lived
// processes that read one episode per JSON line on stdin and answer one result line each
// (workflow_worker.h). Either way the result is the `workflow_output` for end_episode. Never throws
// for a broken agent: the episode gets reward 0 and the reason in metadata (termination
// agent_error, or timeout).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/swarm_types.h"
#include "common/json.h"
#include "config/config.h"
#include "tasks/task.h"

namespace ajet::classic {

struct EpisodeContext {
  const tasks::Task* task = nullptr;
  client::Episode episode;
  std::string episode_type = "train";  // "train" | "eval"
  Json sampling = Json::object();      // request params (eval only)
  uint64_t env_seed = 0;               // frozenlake slips; recorded in the metadata
  std::function<bool()> cancelled;     // external commands are terminated when it says so
};

struct EpisodeReport {
  client::WorkflowOutput output;
  int64_t llm_calls = 0;
  int64_t completion_tokens = 0;
  std::string termination;  // metadata.termination when there is one
};

class Workflow {
 public:
  virtual ~Workflow() = default;
  virtual EpisodeReport run(const EpisodeContext& context) const = 0;
  virtual std::string describe() const = 0;
};

// The built-in agent of the task's env_type, else of `default_task`
// (ajet.task_reader.builtin.generator).
std::unique_ptr<Workflow> make_builtin_workflow(std::string default_task, int64_t max_tool_calls,
                                                int64_t max_steps);

// An external command as a workflow. It runs under /bin/sh -c in `cwd`; its stderr is appended to
// `stderr_log`. With `builtin_judge` (ajet.task_judge.judge_type: builtin) the reward comes from
// the task's built-in judge applied to the "answer" or "messages" the command printed; otherwise
// from its "reward".
struct CommandWorkflowOptions {
  std::string command;
  std::filesystem::path cwd;
  std::filesystem::path stderr_log;
  bool builtin_judge = false;
  std::string default_task;
  std::string mode = "per_episode";  // per_episode | worker
  int64_t workers = 1;               // worker mode: processes in the pool
  double timeout_s = 0;              // per episode; 0 = no limit
};
std::unique_ptr<Workflow> make_command_workflow(CommandWorkflowOptions options);

// ["/bin/sh", "-c", "(command) 2>>stderr_log"]: what both command workflows run.
std::vector<std::string> command_argv(const CommandWorkflowOptions& options);
// Why an episode past ajet.rollout.user_workflow_timeout got reward 0.
std::string timeout_message(double timeout_s, const std::string& what);

// A broken episode: reward 0, not a success, `termination` and `error` in its metadata.
EpisodeReport failed_report(const tasks::Task& task, const std::string& termination,
                            const std::string& error);

// The report of a command's parsed result (parse_command_result): its reward, or the built-in
// judge's verdict on its answer or messages. A judge that cannot read them fails the episode.
EpisodeReport command_report(const Json& parsed, const EpisodeContext& context,
                             const CommandWorkflowOptions& options);

// The workflow of a config: ajet.rollout.user_workflow empty or "builtin" → built-in agent;
// anything else is a shell command. `config_dir` is the command's working directory.
std::unique_ptr<Workflow> make_workflow(const config::Config& config,
                                        const std::filesystem::path& config_dir,
                                        const std::filesystem::path& exp_dir);

// Reads a command's result from its whole stdout: the last non-blank line must be a JSON number
// (the reward) or an object with "reward" (number) and optionally "is_success", "metadata",
// "log_metrics", "answer", "messages". Throws Error(kInvalidArgument) saying what was wrong.
Json parse_command_result(const std::string& stdout_text);

}  // namespace ajet::classic
