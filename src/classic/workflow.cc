#include "classic/workflow.h"

#include <sstream>

#include "classic/http_chat_model.h"
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

EpisodeReport failed_report(const tasks::Task& task, const std::string& termination, const std::string& error) {
  EpisodeReport r;
  r.output.reward = 0;
  r.output.is_success = false;
  r.output.metadata = Json{{"task_id", task.task_id}, {"termination", termination}, {"error", error}};
  r.termination = termination;
  return r;
}

class BuiltinWorkflow : public Workflow {
 public:
  BuiltinWorkflow(std::string default_task, int64_t max_tool_calls, int64_t max_steps)
      : default_task_(std::move(default_task)), max_tool_calls_(max_tool_calls), max_steps_(max_steps) {}

  EpisodeReport run(const EpisodeContext& ctx) const override {
    const tasks::Task& task = *ctx.task;
    const tasks::BuiltinTask* kind = nullptr;
    try {
      kind = &tasks::builtin_task_for(task, default_task_);
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", e.what());
    }
    HttpChatModel model(ctx.episode.base_url, ctx.episode.api_key,
                        ctx.episode_type == "eval" ? ctx.sampling : Json::object());
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

class CommandWorkflow : public Workflow {
 public:
  CommandWorkflow(std::string command, std::filesystem::path cwd, std::filesystem::path stderr_log, bool judge,
                  std::string default_task)
      : command_(std::move(command)), cwd_(std::move(cwd)), stderr_log_(std::move(stderr_log)),
        builtin_judge_(judge), default_task_(std::move(default_task)) {}

  EpisodeReport run(const EpisodeContext& ctx) const override {
    const tasks::Task& task = *ctx.task;
    SpawnOptions spawn;
    spawn.argv = {"/bin/sh", "-c", "(" + command_ + ") 2>>" + shell_quote(stderr_log_.string())};
    spawn.env = {{"OPENAI_BASE_URL", ctx.episode.base_url},
                 {"OPENAI_API_KEY", ctx.episode.api_key},
                 {"AJET_TASK", tasks::task_to_json(task).dump()},
                 {"AJET_EPISODE_TYPE", ctx.episode_type},
                 {"AJET_SAMPLING", ctx.sampling.dump()},
                 {"AJET_ENV_SEED", std::to_string(ctx.env_seed)}};
    spawn.cwd = cwd_;
    CommandResult result;
    try {
      result = run_command(spawn, ctx.cancelled);
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", std::string("workflow command could not run: ") + e.what());
    }
    if (result.cancelled) return failed_report(task, "agent_error", "cancelled");
    if (!exited_cleanly(result.status)) {
      return failed_report(task, "agent_error",
                           "workflow command " + describe_exit(result.status) + " (stderr in " +
                               stderr_log_.string() + ")");
    }
    Json parsed;
    try {
      parsed = parse_command_result(result.output);
    } catch (const std::exception& e) {
      return failed_report(task, "agent_error", e.what());
    }
    EpisodeReport r;
    r.output.reward = parsed.value("reward", 0.0);
    if (parsed.contains("is_success") && parsed["is_success"].is_boolean()) r.output.is_success = parsed["is_success"].get<bool>();
    r.output.metadata = parsed.contains("metadata") && parsed["metadata"].is_object() ? parsed["metadata"] : Json::object();
    r.output.log_metrics =
        parsed.contains("log_metrics") && parsed["log_metrics"].is_object() ? parsed["log_metrics"] : Json::object();
    if (builtin_judge_) {
      try {
        const tasks::BuiltinTask& kind = tasks::builtin_task_for(task, default_task_);
        tasks::Judgement j;
        if (parsed.contains("messages")) {
          std::vector<text::ChatMessage> messages;
          const tasks::OrderedJson ordered(parsed["messages"]);  // a value converted, not re-parsed
          for (size_t i = 0; i < ordered.size(); ++i) {
            messages.push_back(text::parse_chat_message(ordered[i], "messages[" + std::to_string(i) + "]"));
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
  std::string describe() const override { return "command: " + command_; }

 private:
  std::string command_;
  std::filesystem::path cwd_;
  std::filesystem::path stderr_log_;
  bool builtin_judge_;
  std::string default_task_;
};

}  // namespace

Json parse_command_result(const std::string& stdout_text) {
  std::istringstream in(stdout_text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  if (last.empty()) invalid_argument("workflow command printed nothing on stdout (expected its result as JSON on the last line)");
  std::optional<Json> parsed = try_parse_json(last);
  if (!parsed) invalid_argument("workflow command's last stdout line is not JSON: '" + last.substr(0, 200) + "'");
  const Json& j = *parsed;
  if (j.is_number()) return Json{{"reward", j.get<double>()}};
  if (!j.is_object()) invalid_argument("workflow command's result must be a number or an object, got " + j.dump().substr(0, 100));
  if (j.contains("reward") && !j["reward"].is_number()) {
    invalid_argument("workflow command's result: field 'reward' must be a number, got " + j["reward"].dump());
  }
  if (!j.contains("reward") && !j.contains("answer") && !j.contains("messages")) {
    invalid_argument("workflow command's result has no 'reward' (nor 'answer'/'messages' for a built-in judge): " +
                     last.substr(0, 200));
  }
  return j;
}

std::unique_ptr<Workflow> make_builtin_workflow(std::string default_task, int64_t max_tool_calls, int64_t max_steps) {
  return std::make_unique<BuiltinWorkflow>(std::move(default_task), max_tool_calls, max_steps);
}

std::unique_ptr<Workflow> make_command_workflow(std::string command, std::filesystem::path cwd,
                                                std::filesystem::path stderr_log, bool builtin_judge,
                                                std::string default_task) {
  return std::make_unique<CommandWorkflow>(std::move(command), std::move(cwd), std::move(stderr_log), builtin_judge,
                                           std::move(default_task));
}

std::unique_ptr<Workflow> make_workflow(const config::Config& config, const std::filesystem::path& config_dir,
                                        const std::filesystem::path& exp_dir) {
  const std::string& w = config.rollout.user_workflow;
  const std::string default_task = config.task_reader.builtin.generator;
  if (w.empty() || w == "builtin") return make_builtin_workflow(default_task, -1, -1);
  return make_command_workflow(w, config_dir, exp_dir / "workflow_stderr.log",
                               config::uses_builtin_judge(config.task_judge), default_task);
}

}  // namespace ajet::classic
