#include "episodes/model_context.h"

#include <algorithm>

#include "common/error.h"
#include "hf/hf_config.h"

namespace ajet::episodes {

namespace fs = std::filesystem;

SamplingRules sampling_rules(const config::Config& c, int64_t model_max_positions) {
  SamplingRules r;
  r.train_temperature = c.rollout.temperature;
  r.train_top_p = c.rollout.top_p;
  r.train_top_k = c.rollout.top_k > 0 ? int32_t(c.rollout.top_k) : 0;
  r.eval_temperature = c.rollout.val_kwargs.temperature;
  r.eval_top_p = c.rollout.val_kwargs.top_p;
  r.eval_top_k = c.rollout.val_kwargs.top_k > 0 ? int32_t(c.rollout.val_kwargs.top_k) : 0;
  r.max_tokens_per_turn = c.rollout.max_response_length_in_one_turn;
  r.max_model_len = c.rollout.max_model_len;
  r.max_num_seqs = c.rollout.max_num_seqs;
  if (model_max_positions > 0) r.max_model_len = std::min(r.max_model_len, model_max_positions);
  return r;
}

std::shared_ptr<const ModelContext> ModelContext::load(const config::Config& config) {
  auto ctx = std::make_shared<ModelContext>();
  ctx->model_dir = config.model.path;
  if (ctx->model_dir.empty())
    invalid_argument("ajet.model.path is empty: the config must name the model directory");
  if (!fs::is_directory(ctx->model_dir)) {
    fail(ErrorCode::kNotFound,
         "ajet.model.path: " + ctx->model_dir.string() + " is not a directory");
  }
  ctx->served_name = fs::absolute(ctx->model_dir).lexically_normal().filename().string();
  if (ctx->served_name.empty()) ctx->served_name = "agentjet-model";
  for (const auto& [model, agent] : config.context_tracker.model_agents.items()) {
    if (!agent.is_string()) continue;  // config validation names it
    ctx->agent_names.by_model[model] = agent.get<std::string>();
    ctx->agent_names.known.insert(agent.get<std::string>());
  }
  ctx->agent_names.known.insert(config.context_tracker.trainable_agents.begin(),
                                config.context_tracker.trainable_agents.end());
  ctx->tokenizer = std::make_unique<text::Tokenizer>(text::Tokenizer::load(ctx->model_dir));
  ctx->format =
      std::make_unique<tracking::ChatFormat>(tracking::ChatFormat::from_tokenizer(*ctx->tokenizer));
  ctx->chat_stop_ids.push_back(ctx->format->end_of_turn);
  if (auto eos = ctx->tokenizer->eos_id()) {
    if (*eos != ctx->format->end_of_turn) ctx->chat_stop_ids.push_back(*eos);
    ctx->completion_stop_ids.push_back(*eos);
  }
  int64_t positions = 0;
  if (fs::exists(ctx->model_dir / "config.json")) {
    const hf::ModelConfig model = hf::load_model_config(ctx->model_dir / "config.json");
    positions = model.max_position_embeddings;
    // The engine samples over every embedding row; ids past the tokenizer's decode to nothing.
    ctx->tokenizer->pad_to_model_vocab(static_cast<size_t>(model.vocab_size));
  }
  ctx->sampling = sampling_rules(config, positions);
  ctx->prompt_options.splice_generated = config.context_tracker.fix_retokenization_drift;
  ctx->prompt_options.keep_generated_reasoning = config.context_tracker.keep_earlier_thinking;
  ctx->merge_options = tracking::MergeOptions::from_config(config, ctx->format.get());
  ctx->merge_options.format = ctx->format.get();
  return ctx;
}

}  // namespace ajet::episodes
