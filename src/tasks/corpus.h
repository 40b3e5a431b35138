// Text for training the project's tiny BPE tokenizer, and a measure of how well a tokenizer
// compresses episodes. The corpus is built-in task demos rendered with the Qwen2.5 ChatML template
// (the template text/bpe_trainer.h writes), so the scaffolding, tool definitions, tool-call JSON,
// task phrasing and numbers are all covered in the proportions episodes have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/builtin.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ajet::tasks {

// A demo as the chat template renders it (Qwen2.5 family, no generation prompt).
text::RenderedChat render_demo(const Demo& demo);

struct CorpusOptions {
  int64_t calc_episodes = 3000;
  int64_t countdown_episodes = 800;
  int64_t frozenlake_episodes = 300;
  double correct_ratio = 0.5;  // error demos add wrong numbers and stray formats to the corpus
  uint64_t seed = 1;
};

// Rendered training-split demos of every task, separated by newlines. Deterministic per options.
std::string tokenizer_corpus(const CorpusOptions& options);

struct EpisodeTokenStats {
  size_t episodes = 0;
  double mean_total = 0;      // tokens of the whole rendered episode
  double mean_prompt = 0;     // tokens before the first assistant turn (system, tools, user)
  double mean_assistant = 0;  // tokens the model generates: assistant bodies plus their <|im_end|>
  size_t max_total = 0;
};

EpisodeTokenStats measure_episode_tokens(const text::Tokenizer& tokenizer,
                                         const std::vector<Demo>& demos);

}  // namespace ajet::tasks
