// The built-in tasks (calc, countdown, frozenlake) behind one interface: a seeded generator with
// train/validation splits that are disjoint by construction, a judge, a built-in agent (the episode
// loop) and an SFT demonstration maker. The launcher, `ajet sft`, `ajet tasks` and swarm clients
// all go through this interface; nothing here knows about HTTP, processes or tensors.
//
// Splits: every generated problem has a canonical key (calc: the expression; countdown: sorted
// numbers and target; frozenlake: the map). stable_hash(key) alone decides whether the problem
// belongs to the validation split (a `holdout_fraction` share of all problems, 0.1 by default) or
// to the training split, so a held-out problem can never be generated for training, whatever the
// seeds or counts. Keep `holdout_fraction` the same for both splits. task_id is derived from the
// key, so the same problem always has the same id.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/agent.h"
#include "tasks/rng.h"
#include "tasks/task.h"

namespace ajet::tasks {

enum class Split { kTrain, kValidation };
std::string_view split_name(Split split);  // "train", "validation"
// Accepts "train"/"training" and "val"/"validation"; throws naming the value otherwise.
Split split_from_name(std::string_view name);

struct GenerateOptions {
  Split split = Split::kTrain;
  int64_t count = 100;
  uint64_t seed = 1;
  // Task-specific settings (docs/tasks.md); an unknown key is an error naming it and the known
  // ones.
  OrderedJson params = OrderedJson::object();
};

// A finished SFT demonstration: a complete conversation and what the judge makes of it.
struct Demo {
  std::string task_id{};
  std::string env_type{};
  std::string kind{};  // "correct" or one of the task's error kinds
  std::vector<text::ChatMessage> messages{};
  std::vector<OrderedJson> tools{};
  std::optional<uint64_t> env_seed{};  // frozenlake: the seed the conversation was played with
  Judgement judgement{};
};

// {"task_id", "env_type", "kind", "reward", "messages": [OpenAI messages], "tools": [...],
// "env_seed"?}
OrderedJson demo_to_json(const Demo& demo);

class BuiltinTask {
 public:
  virtual ~BuiltinTask() = default;
  virtual std::string_view name() const = 0;
  // Error kinds of imperfect demos, in the order error_mix weights refer to.
  virtual std::vector<std::string> error_kinds() const = 0;

  // `count` distinct problems of the split, deterministic in (seed, params). Throws
  // Error(kInvalidArgument) for bad params or when the problem space is too small for `count`.
  virtual std::vector<Task> generate(const GenerateOptions& options) const = 0;

  // Reward of a whole conversation (what the agent said, in order). Throws Error(kInvalidArgument)
  // only when the task itself is unusable (e.g. metadata without the answer).
  virtual Judgement judge_episode(const Task& task, const std::vector<text::ChatMessage>& messages,
                                  const AgentOptions& options = {}) const = 0;
  // Reward of a bare answer: calc/countdown the final assistant text; frozenlake the moves
  // ("Down Down Right" or "<action>Down</action>..."), replayed from the start.
  virtual Judgement judge_answer(const Task& task, std::string_view answer,
                                 const AgentOptions& options = {}) const = 0;

  // The built-in agent: runs one episode against `model`. Never throws: a broken model reply or a
  // broken task ends the episode with reward 0 and a termination reason in output.metadata.
  EpisodeResult run_episode(const Task& task, ChatModel& model,
                            const AgentOptions& options = {}) const;

  // One demonstration of `kind` ("correct" or an error kind) for a training task.
  virtual Demo make_demo(const Task& task, std::string_view kind, Rng& rng) const = 0;

 protected:
  virtual EpisodeResult run_episode_unchecked(const Task& task, ChatModel& model,
                                              const AgentOptions& options) const = 0;
};

// The registered tasks: "calc", "countdown", "frozenlake".
std::vector<std::string> builtin_task_names();
// Throws Error(kNotFound) naming the known tasks.
const BuiltinTask& builtin_task(std::string_view name);
// The task object for a task: its env_type when that names a built-in task, else `fallback`.
const BuiltinTask& builtin_task_for(const Task& task, std::string_view fallback = "");

struct DemoOptions {
  double correct_ratio = 0.7;
  std::vector<double> error_mix{};  // weights in error_kinds() order; empty: equal weights
  uint64_t seed = 1;
};

// One demo per task, in order; demo i draws from its own stream (seed, i), so a prefix of a longer
// run equals a shorter run. Whether demo i is correct is a Bernoulli(correct_ratio) draw.
std::vector<Demo> generate_demos(const BuiltinTask& kind, const std::vector<Task>& tasks,
                                 const DemoOptions& options);

}  // namespace ajet::tasks
