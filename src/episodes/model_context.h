// What the front knows about the model it serves, loaded once per start_engine from the synced
// config: the tokenizer and chat format (for rendering prompts and decoding tokens), the stop ids,
// the context limit, the served model names, and the sampling settings of ajet.rollout. Immutable
// after load and shared (shared_ptr) by every call and tracker, so a call in flight keeps it alive.
// It never touches tensors: the engine loads the weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "episodes/episode_key.h"
#include "text/tokenizer.h"
#include "tracking/chat_format.h"
#include "tracking/merge.h"
#include "tracking/prompt.h"

namespace ajet::episodes {

// ajet.rollout sampling: `train` episodes always sample with these (the rollout must come from the
// policy being trained); `eval` episodes use the request's values and fall back to val_kwargs.
struct SamplingRules {
  double train_temperature = 0.9;
  double train_top_p = 1.0;
  int32_t train_top_k = 0;  // 0: off (config -1)
  double eval_temperature = 0.0;
  double eval_top_p = 1.0;
  int32_t eval_top_k = 0;
  int64_t max_tokens_per_turn = 4096;  // ajet.rollout.max_response_length_in_one_turn
  int64_t max_model_len =
      18000;                  // prompt + completion (min of the config and the model's positions)
  int64_t max_num_seqs = 64;  // ajet.rollout.max_num_seqs: the engine's cap on a request's n
};

struct ModelContext {
  std::filesystem::path model_dir;
  std::string served_name;  // the model directory's name: what /v1/models lists
  AgentNames agent_names;   // which request `model` names an agent (model_agents)
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<tracking::ChatFormat> format;    // points into *tokenizer
  std::vector<text::TokenId> chat_stop_ids;        // end of turn, eos
  std::vector<text::TokenId> completion_stop_ids;  // eos
  SamplingRules sampling;
  // splice_generated and keep_generated_reasoning from ajet.context_tracker
  tracking::PromptOptions prompt_options;
  tracking::MergeOptions merge_options;  // format set

  // Loads tokenizer and chat format from config.model.path; throws Error naming the file.
  static std::shared_ptr<const ModelContext> load(const config::Config& config);
};

SamplingRules sampling_rules(const config::Config& config, int64_t model_max_positions);

}  // namespace ajet::episodes
