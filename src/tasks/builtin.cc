#include "tasks/builtin.h"

#include "common/error.h"
#include "tasks/calc.h"
#include "tasks/countdown.h"
#include "tasks/frozenlake.h"

namespace ajet::tasks {

std::string_view split_name(Split split) { return split == Split::kTrain ? "train" : "validation"; }

Split split_from_name(std::string_view name) {
  if (name == "train" || name == "training") return Split::kTrain;
  if (name == "val" || name == "validation") return Split::kValidation;
  invalid_argument("split must be train or validation (val), got '" + std::string(name) + "'");
}

OrderedJson demo_to_json(const Demo& demo) {
  OrderedJson j = OrderedJson::object();
  j["task_id"] = demo.task_id;
  j["env_type"] = demo.env_type;
  j["kind"] = demo.kind;
  j["reward"] = demo.judgement.reward;
  OrderedJson messages = OrderedJson::array();
  for (const text::ChatMessage& m : demo.messages) messages.push_back(text::to_openai_json(m));
  j["messages"] = std::move(messages);
  j["tools"] = demo.tools;
  if (demo.env_seed) j["env_seed"] = *demo.env_seed;
  return j;
}

EpisodeResult BuiltinTask::run_episode(const Task& task, ChatModel& model,
                                       const AgentOptions& options) const {
  try {
    return run_episode_unchecked(task, model, options);
  } catch (const std::exception& e) {
    // A broken task or a bug: the episode still ends cleanly, with the reason on record.
    EpisodeResult r;
    r.output.metadata["task_id"] = task.task_id;
    r.output.metadata["env_type"] = std::string(name());
    r.output.metadata["termination"] = "agent_error";
    r.output.metadata["error"] = e.what();
    r.output.log_metrics["success"] = 0.0;
    return r;
  }
}

std::vector<std::string> builtin_task_names() { return {"calc", "countdown", "frozenlake"}; }

const BuiltinTask& builtin_task(std::string_view name) {
  if (name == "calc") return calc_task();
  if (name == "countdown") return countdown_task();
  if (name == "frozenlake") return frozenlake_task();
  std::string known;
  for (const std::string& n : builtin_task_names()) known += (known.empty() ? "" : ", ") + n;
  fail(ErrorCode::kNotFound,
       "unknown built-in task '" + std::string(name) + "' (known: " + known + ")");
}

const BuiltinTask& builtin_task_for(const Task& task, std::string_view fallback) {
  if (!task.env_type.empty()) {
    for (const std::string& n : builtin_task_names()) {
      if (n == task.env_type) return builtin_task(n);
    }
  }
  if (fallback.empty()) {
    invalid_argument("task " + task.task_id + ": env_type '" + task.env_type +
                     "' is not a built-in task; name one (calc, countdown, frozenlake)");
  }
  return builtin_task(fallback);
}

std::vector<Demo> generate_demos(const BuiltinTask& kind, const std::vector<Task>& tasks,
                                 const DemoOptions& options) {
  if (!(options.correct_ratio >= 0 && options.correct_ratio <= 1)) {
    invalid_argument("correct_ratio must be in [0, 1], got " +
                     std::to_string(options.correct_ratio));
  }
  const std::vector<std::string> kinds = kind.error_kinds();
  std::vector<double> mix = options.error_mix;
  if (mix.empty()) mix.assign(kinds.size(), 1.0);
  if (mix.size() != kinds.size()) {
    std::string list;
    for (const std::string& k : kinds) list += (list.empty() ? "" : ",") + k;
    invalid_argument("error mix for " + std::string(kind.name()) + " needs " +
                     std::to_string(kinds.size()) + " weights (" + list + "), got " +
                     std::to_string(mix.size()));
  }
  double total = 0;
  for (double w : mix) {
    if (!(w >= 0)) invalid_argument("error mix weights must be >= 0");
    total += w;
  }
  if (total <= 0 && options.correct_ratio < 1)
    invalid_argument("error mix weights must not all be 0");
  std::vector<Demo> out;
  out.reserve(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    Rng rng(mix_seed(options.seed, i));
    const bool correct = rng.bernoulli(options.correct_ratio);
    const std::string demo_kind = correct ? "correct" : kinds[rng.weighted_index(mix)];
    out.push_back(kind.make_demo(tasks[i], demo_kind, rng));
  }
  return out;
}

}  // namespace ajet::tasks
