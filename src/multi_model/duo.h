// The built-in two-model agent `calc_duo` (multi-model training, issue 17): the calc task played by
// two models, each served by its own swarm server. The caller (model 0) writes the calculator call;
// the answerer (model 1) reads the tool's result and replies <answer>N</answer>. Each model gets
// its own reward for its own turn, so each learns its role: the caller is rewarded when its call
// computes the right value, the answerer when the pair's final answer is right.
#pragma once

#include <string>

#include "client/swarm_types.h"
#include "tasks/agent.h"
#include "tasks/task.h"

namespace ajet::multi_model {

// Routes an episode's model calls by turn: the first assistant turn to `first`, every later one to
// `rest`. Counts the turns each model served.
class TurnRouter : public tasks::ChatModel {
 public:
  TurnRouter(tasks::ChatModel& first, tasks::ChatModel& rest) : first_(first), rest_(rest) {}
  tasks::ModelReply complete(const std::vector<text::ChatMessage>& messages,
                             const std::vector<tasks::OrderedJson>& tools) override;
  int64_t first_turns() const { return first_turns_; }
  int64_t rest_turns() const { return rest_turns_; }

 private:
  tasks::ChatModel& first_;
  tasks::ChatModel& rest_;
  int64_t first_turns_ = 0;
  int64_t rest_turns_ = 0;
};

struct DuoOutcome {
  tasks::EpisodeResult episode;  // the whole conversation and the pair's reward
  client::WorkflowOutput
      caller;  // model 0's output: 1 when its calculator call computed the answer
  client::WorkflowOutput answerer;  // model 1's output: the pair's reward (the final answer judged)
  bool pair_success = false;
  bool caller_right = false;
};

// Plays one calc task with the two models. Never throws for a broken model reply (calc's agent ends
// the episode with a termination reason, as for one model).
DuoOutcome run_calc_duo(const tasks::Task& task, tasks::ChatModel& caller,
                        tasks::ChatModel& answerer);

// Whether the first assistant turn of `messages` is a calculator call whose result is `expected`.
bool caller_computed(const std::vector<text::ChatMessage>& messages, int64_t expected);

}  // namespace ajet::multi_model
