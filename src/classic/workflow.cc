#include "classic/workflow.h"

#include <fmt/format.h>

#include <chrono>
#include <sstream>

#include "classic/http_chat_model.h"
#include "classic/workflow_worker.h"
#include "common/error.h"
#include "common/json.h"
#include "common/subprocess.h"
#include "tasks/builtin.h"
#include "text/messages.h"

namespace ajet::classic {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class BuiltinWorkflow : public Workflow {
 public:
  BuiltinWorkflow(std::string default_task, int64_t max_tool_calls, int64_t max_steps)
      : default_task_(std::move(default_task)),
        max_tool_calls_(max_tool_calls),
        max_steps_(max_steps) {}

  EpisodeReport run(const EpisodeContext& ctx) const override {
    const tasks::Task& task = *ctx.task;
    const tasks::BuiltinTask* kind = nullptr;
    try {
      kind = &tasks::builtin_task_for(task, default_task_);
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", e.what());
    }
    HttpChatModel model(ctx.episode.base_url, ctx.episode.api_key,
                        ctx.episode_type == "eval" ? ctx.sampling : Json::object(), ctx.env_seed);
    tasks::AgentOptions options;
    if (max_tool_calls_ > 0) options.max_tool_calls = max_tool_calls_;
    if (max_steps_ > 0) options.max_steps = max_steps_;
    options.env_seed = ctx.env_seed;
    tasks::EpisodeResult result = kind->run_episode(task, model, options);
    EpisodeReport r;
    r.output.reward = result.output.reward;
    r.output.is_success = result.output.is_success;
    r.output.metadata = plain_json(result.output.metadata);
    r.output.metadata["env_seed"] = ctx.env_seed;
    r.output.log_metrics = plain_json(result.output.log_metrics);
    r.llm_calls = model.calls();
    r.completion_tokens = model.completion_tokens();
    if (r.output.metadata.contains("termination") && r.output.metadata["termination"].is_string()) {
      r.termination = r.output.metadata["termination"].get<std::string>();
    }
    return r;
  }
  std::string describe() const override { return "built-in agent (" + default_task_ + ")"; }

 private:
  std::string default_task_;
  int64_t max_tool_calls_;
  int64_t max_steps_;
};

// A process per episode: the episode's endpoint, key, task and sampling in its environment.
class CommandWorkflow : public Workflow {
 public:
  explicit CommandWorkflow(CommandWorkflowOptions options) : options_(std::move(options)) {}

  EpisodeReport run(const EpisodeContext& ctx) const override {
    const tasks::Task& task = *ctx.task;
    SpawnOptions spawn;
    spawn.argv = command_argv(options_);
    spawn.env = {{"OPENAI_BASE_URL", ctx.episode.base_url},
                 {"OPENAI_API_KEY", ctx.episode.api_key},
                 {"AJET_TASK", tasks::task_to_json(task).dump()},
                 {"AJET_EPISODE_TYPE", ctx.episode_type},
                 {"AJET_SAMPLING", ctx.sampling.dump()},
                 {"AJET_ENV_SEED", std::to_string(ctx.env_seed)}};
    spawn.cwd = options_.cwd;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.timeout_s);
    bool timed_out = false;
    CommandResult result;
    try {
      result = run_command(spawn, [&] {
        if (ctx.cancelled && ctx.cancelled()) return true;
        timed_out = options_.timeout_s > 0 && std::chrono::steady_clock::now() >= deadline;
        return timed_out;
      });
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error",
                           std::string("workflow command could not run: ") + e.what());
    }
    if (timed_out)
      return failed_report(task, "timeout",
                           timeout_message(options_.timeout_s, "workflow command"));
    if (result.cancelled) return failed_report(task, "agent_error", "cancelled");
    if (!exited_cleanly(result.status)) {
      return failed_report(task, "agent_error",
                           "workflow command " + describe_exit(result.status) + " (stderr in " +
                               options_.stderr_log.string() + ")");
    }
    Json parsed;
    try {
      parsed = parse_command_result(result.output);
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", e.what());
    }
    return command_report(parsed, ctx, options_);
  }
  std::string describe() const override { return "command: " + options_.command; }

 private:
  CommandWorkflowOptions options_;
};

}  // namespace

std::vector<std::string> command_argv(const CommandWorkflowOptions& options) {
  return {"/bin/sh", "-c",
          "(" + options.command + ") 2>>" + shell_quote(options.stderr_log.string())};
}

std::string timeout_message(double timeout_s, const std::string& what) {
  return what + " took longer than ajet.rollout.user_workflow_timeout (" +
         fmt::format("{:g}", timeout_s) + " s); stopped";
}

EpisodeReport failed_report(const tasks::Task& task, const std::string& termination,
                            const std::string& error) {
  EpisodeReport r;
  r.output.reward = 0;
  r.output.is_success = false;
  r.output.metadata =
      Json{{"task_id", task.task_id}, {"termination", termination}, {"error", error}};
  r.termination = termination;
  return r;
}

EpisodeReport command_report(const Json& parsed, const EpisodeContext& ctx,
                             const CommandWorkflowOptions& options) {
  const tasks::Task& task = *ctx.task;
  EpisodeReport r;
  r.output.reward = parsed.value("reward", 0.0);
  if (parsed.contains("is_success") && parsed["is_success"].is_boolean())
    r.output.is_success = parsed["is_success"].get<bool>();
  r.output.metadata = parsed.contains("metadata") && parsed["metadata"].is_object()
                          ? parsed["metadata"]
                          : Json::object();
  r.output.log_metrics = parsed.contains("log_metrics") && parsed["log_metrics"].is_object()
                             ? parsed["log_metrics"]
                             : Json::object();
  if (options.builtin_judge) {
    try {
      const tasks::BuiltinTask& kind = tasks::builtin_task_for(task, options.default_task);
      tasks::Judgement j;
      if (parsed.contains("messages")) {
        std::vector<text::ChatMessage> messages;
        const tasks::OrderedJson ordered(parsed["messages"]);  // a value converted, not re-parsed
        for (size_t i = 0; i < ordered.size(); ++i) {
          messages.push_back(
              text::parse_chat_message(ordered[i], "messages[" + std::to_string(i) + "]"));
        }
        j = kind.judge_episode(task, messages);
      } else {
        j = kind.judge_answer(task, parsed.value("answer", std::string()));
      }
      r.output.reward = j.reward;
      r.output.is_success = j.is_success;
      r.output.metadata["judge_reason"] = j.reason;
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", std::string("built-in judge: ") + e.what());
    }
  }
  r.output.metadata["env_seed"] = ctx.env_seed;
  if (r.output.metadata.contains("termination") && r.output.metadata["termination"].is_string()) {
    r.termination = r.output.metadata["termination"].get<std::string>();
  }
  if (r.output.log_metrics.contains("llm_calls") && r.output.log_metrics["llm_calls"].is_number()) {
    r.llm_calls = r.output.log_metrics["llm_calls"].get<int64_t>();
  }
  return r;
}

Json parse_command_result(const std::string& stdout_text) {
  std::istringstream in(stdout_text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  if (last.empty())
    invalid_argument(
        "workflow command printed nothing on stdout (expected its result as JSON on the last "
        "line)");
  std::optional<Json> parsed = try_parse_json(last);
  if (!parsed)
    invalid_argument("workflow command's last stdout line is not JSON: '" + last.substr(0, 200) +
                     "'");
  const Json& j = *parsed;
  if (j.is_number()) return Json{{"reward", j.get<double>()}};
  if (!j.is_object())
    invalid_argument("workflow command's result must be a number or an object, got " +
                     j.dump().substr(0, 100));
  if (j.contains("reward") && !j["reward"].is_number()) {
    invalid_argument("workflow command's result: field 'reward' must be a number, got " +
                     j["reward"].dump());
  }
  if (!j.contains("reward") && !j.contains("answer") && !j.contains("messages")) {
    invalid_argument(
        "workflow command's result has no 'reward' (nor 'answer'/'messages' for a built-in "
        "judge): " +
        last.substr(0, 200));
  }
  return j;
}

std::unique_ptr<Workflow> make_builtin_workflow(std::string default_task, int64_t max_tool_calls,
                                                int64_t max_steps) {
  return std::make_unique<BuiltinWorkflow>(std::move(default_task), max_tool_calls, max_steps);
}

std::unique_ptr<Workflow> make_command_workflow(CommandWorkflowOptions options) {
  if (options.mode == "worker") return make_worker_workflow(std::move(options));
  return std::make_unique<CommandWorkflow>(std::move(options));
}

std::unique_ptr<Workflow> make_workflow(const config::Config& config,
                                        const std::filesystem::path& config_dir,
                                        const std::filesystem::path& exp_dir) {
  const std::string& w = config.rollout.user_workflow;
  const std::string default_task = config.task_reader.builtin.generator;
  if (w.empty() || w == "builtin") return make_builtin_workflow(default_task, -1, -1);
  CommandWorkflowOptions options;
  options.command = w;
  options.cwd = config_dir;
  options.stderr_log = exp_dir / "workflow_stderr.log";
  options.builtin_judge = config::uses_builtin_judge(config.task_judge);
  options.default_task = default_task;
  options.mode = config.rollout.user_workflow_mode;
  options.workers = config.rollout.user_workflow_workers > 0 ? config.rollout.user_workflow_workers
                                                             : config.rollout.max_env_worker;
  options.timeout_s = config.rollout.user_workflow_timeout;
  return make_command_workflow(std::move(options));
}

}  // namespace ajet::classic
