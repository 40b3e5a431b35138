// The tokenizer corpus: a BPE vocabulary trained on it (text/bpe_trainer.h) compresses rendered
// calc episodes well, a larger vocabulary compresses better, and the rendered episodes round-trip.
#include <gtest/gtest.h>

#include "tasks/builtin.h"
#include "tasks/corpus.h"
#include "text/bpe_trainer.h"

namespace ajet::tasks {
namespace {

text::Tokenizer train(const std::string& corpus, size_t vocab) {
  text::BpeTrainerOptions o;
  o.vocab_size = vocab;
  const text::TrainedBpe t = text::train_bpe(corpus, o);
  return text::Tokenizer::from_json(t.tokenizer_json, "trained",
                                    text::parse_tokenizer_config(t.tokenizer_config_json, "cfg"));
}

TEST(TokenizerCorpus, CalcEpisodesStayShort) {
  // A reduced corpus keeps the test fast; `ajet tasks corpus` defaults are larger.
  const std::string corpus = tokenizer_corpus(CorpusOptions{.calc_episodes = 600,
                                                            .countdown_episodes = 150,
                                                            .frozenlake_episodes = 60,
                                                            .correct_ratio = 0.5,
                                                            .seed = 1});
  EXPECT_NE(corpus.find("\"name\": \"calculator\""), std::string::npos);
  EXPECT_NE(corpus.find("<tool_call>"), std::string::npos);
  EXPECT_NE(corpus.find("<action>"), std::string::npos);
  EXPECT_EQ(corpus, tokenizer_corpus(CorpusOptions{.calc_episodes = 600,
                                                   .countdown_episodes = 150,
                                                   .frozenlake_episodes = 60,
                                                   .correct_ratio = 0.5,
                                                   .seed = 1}));

  // Held-out problems, correct demos: the episodes RL will see once the model has learnt the
  // format.
  const std::vector<Task> val = builtin_task("calc").generate(
      GenerateOptions{.split = Split::kValidation, .count = 100, .seed = 2});
  const std::vector<Demo> demos = generate_demos(
      builtin_task("calc"), val, DemoOptions{.correct_ratio = 1.0, .error_mix = {}, .seed = 2});
  const text::Tokenizer small = train(corpus, 512);
  const text::Tokenizer large = train(corpus, 1024);
  const EpisodeTokenStats s = measure_episode_tokens(small, demos);
  const EpisodeTokenStats l = measure_episode_tokens(large, demos);
  std::printf(
      "calc episode tokens: vocab 512 mean %.1f (prompt %.1f, generated %.1f, max %zu); "
      "vocab 1024 mean %.1f (prompt %.1f, generated %.1f, max %zu)\n",
      s.mean_total, s.mean_prompt, s.mean_assistant, s.max_total, l.mean_total, l.mean_prompt,
      l.mean_assistant, l.max_total);
  EXPECT_LT(l.mean_total, s.mean_total);
  // The Qwen2.5 tools block alone is ~80 words; an episode must still fit a small context easily.
  EXPECT_LT(s.mean_total, 260);
  EXPECT_LT(l.mean_total, 220);
  EXPECT_LT(s.mean_assistant, 40);
  EXPECT_GT(s.mean_prompt, s.mean_assistant);
  for (const Demo& d : demos) {
    const std::string text = render_demo(d).text;
    EXPECT_EQ(large.decode(large.encode(text)), text);
  }
}

}  // namespace
}  // namespace ajet::tasks
