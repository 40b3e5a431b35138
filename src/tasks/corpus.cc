#include "tasks/corpus.h"

namespace ajet::tasks {

text::RenderedChat render_demo(const Demo& demo) {
  text::ChatRequest request;
  request.messages = demo.messages;
  request.tools = demo.tools;
  return text::render_chat(text::ChatFamily::kQwen2_5, request);
}

std::string tokenizer_corpus(const CorpusOptions& options) {
  std::string out;
  const std::vector<std::pair<std::string, int64_t>> plan = {
      {"calc", options.calc_episodes},
      {"countdown", options.countdown_episodes},
      {"frozenlake", options.frozenlake_episodes}};
  for (const auto& [name, count] : plan) {
    if (count <= 0) continue;
    const BuiltinTask& kind = builtin_task(name);
    GenerateOptions g;
    g.split = Split::kTrain;
    g.count = count;
    g.seed = options.seed;
    const std::vector<Task> tasks = kind.generate(g);
    const std::vector<Demo> demos = generate_demos(
        kind, tasks,
        DemoOptions{.correct_ratio = options.correct_ratio, .error_mix = {}, .seed = options.seed});
    for (const Demo& d : demos) {
      out += render_demo(d).text;
      out += '\n';
    }
  }
  return out;
}

EpisodeTokenStats measure_episode_tokens(const text::Tokenizer& tokenizer,
                                         const std::vector<Demo>& demos) {
  EpisodeTokenStats s;
  double total = 0;
  double prompt = 0;
  double generated = 0;
  for (const Demo& d : demos) {
    const text::RenderedChat rendered = render_demo(d);
    const text::TokenizedChat tokens = text::tokenize_chat(tokenizer, rendered);
    total += static_cast<double>(tokens.ids.size());
    s.max_total = std::max(s.max_total, tokens.ids.size());
    bool seen_assistant = false;
    for (const text::TokenSpan& span : tokens.spans) {
      const bool is_assistant =
          span.kind == text::SpanKind::kMessage && span.message_index >= 0 &&
          d.messages[static_cast<size_t>(span.message_index)].role == text::Role::kAssistant;
      if (is_assistant) {
        seen_assistant = true;
        generated += static_cast<double>(span.body_end - span.body_begin) + 1;  // + <|im_end|>
      }
      if (!seen_assistant) prompt += static_cast<double>(span.end - span.begin);
    }
    if (seen_assistant) {
      // The first assistant header ("<|im_start|>assistant\n") is part of the prompt too.
      for (const text::TokenSpan& span : tokens.spans) {
        if (span.kind == text::SpanKind::kMessage && span.message_index >= 0 &&
            d.messages[static_cast<size_t>(span.message_index)].role == text::Role::kAssistant) {
          prompt += static_cast<double>(span.body_begin - span.begin);
          break;
        }
      }
    }
    ++s.episodes;
  }
  if (s.episodes > 0) {
    s.mean_total = total / static_cast<double>(s.episodes);
    s.mean_prompt = prompt / static_cast<double>(s.episodes);
    s.mean_assistant = generated / static_cast<double>(s.episodes);
  }
  return s;
}

}  // namespace ajet::tasks
