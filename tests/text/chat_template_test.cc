// The renderer's own rules: spans (header | body | footer), the prefix property token-in/token-out
// relies on, Python string semantics, template detection and loading, and its errors. Exact
// agreement with Jinja is chat_template_jinja_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "chat_test_util.h"
#include "common/error.h"
#include "common/fs.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"

namespace ajet::text {
namespace {

using testing::data_dir;

constexpr ChatFamily kFamilies[] = {ChatFamily::kQwen3, ChatFamily::kQwen2_5, ChatFamily::kChatml};

ChatRequest request(const std::string& json) { return parse_chat_request(json, "test"); }

std::vector<ChatRequest> all_cases() {
  std::vector<ChatRequest> out;
  const OrderedJson doc = OrderedJson::parse(read_file(data_dir() / "chat_cases.json"));
  for (const OrderedJson& c : doc["cases"]) {
    out.push_back(parse_chat_request(c));
  }
  return out;
}

bool has_tools(const ChatRequest& r) {
  if (!r.tools.empty()) return true;
  for (const ChatMessage& m : r.messages) {
    if (!m.tool_calls.empty()) return true;
  }
  return false;
}

TEST(ChatTemplate, UserAndAssistantSpans) {
  for (ChatFamily f : kFamilies) {
    const RenderedChat r =
        render_chat(f, request(R"({"messages": [{"role": "user", "content": "Hi"},
                                                                   {"role": "assistant", "content": "Yo"}]})"));
    const ChatSpan* user = r.message_span(0);
    const ChatSpan* assistant = r.message_span(1);
    ASSERT_NE(user, nullptr);
    ASSERT_NE(assistant, nullptr);
    EXPECT_EQ(r.header(*user), "<|im_start|>user\n") << family_name(f);
    EXPECT_EQ(r.body(*user), "Hi");
    EXPECT_EQ(r.footer(*user), "<|im_end|>\n");
    EXPECT_EQ(r.header(*assistant), "<|im_start|>assistant\n");
    EXPECT_EQ(r.footer(*assistant), "<|im_end|>\n");
    EXPECT_EQ(r.message_span(2), nullptr);
    // Qwen3 writes an (empty) think block into the final assistant turn; the others do not.
    EXPECT_EQ(r.body(*assistant), f == ChatFamily::kQwen3 ? "<think>\n\n</think>\n\nYo" : "Yo")
        << family_name(f);
    // Qwen2.5 alone adds a default system prompt, as a preamble.
    EXPECT_EQ(r.spans.front().kind == SpanKind::kPreamble, f == ChatFamily::kQwen2_5)
        << family_name(f);
  }
}

TEST(ChatTemplate, FoldedToolResultsSplitIntoSpans) {
  const ChatRequest req = request(R"({"messages": [
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"k\":[1,{\"z\":2,\"a\":3}]}"}},
          {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
      {"role": "tool", "content": "r1"},
      {"role": "tool", "content": "r2"},
      {"role": "tool", "content": "r3"}]})");
  for (ChatFamily f : {ChatFamily::kQwen3, ChatFamily::kQwen2_5}) {
    const RenderedChat r = render_chat(f, req);
    const ChatSpan& a = *r.message_span(1);
    EXPECT_EQ(r.header(a), "<|im_start|>assistant\n");
    EXPECT_EQ(r.body(a),
              "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"k\": [1, {\"z\": 2, \"a\": "
              "3}]}}\n</tool_call>\n"
              "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>")
        << family_name(f);
    const ChatSpan& t1 = *r.message_span(2);
    const ChatSpan& t2 = *r.message_span(3);
    const ChatSpan& t3 = *r.message_span(4);
    EXPECT_EQ(r.header(t1), "<|im_start|>user\n<tool_response>\n");
    EXPECT_EQ(r.footer(t1), "\n</tool_response>");
    EXPECT_EQ(r.header(t2), "\n<tool_response>\n");
    EXPECT_EQ(r.body(t2), "r2");
    EXPECT_EQ(r.footer(t3), "\n</tool_response><|im_end|>\n");
  }
}

TEST(ChatTemplate, SystemWithToolsPutsToolsInFooter) {
  const ChatRequest req = request(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}],
      "tools": [{"type": "function", "function": {"name": "f", "description": "é", "parameters": {"type": "object"}}}]})");
  for (ChatFamily f : {ChatFamily::kQwen3, ChatFamily::kQwen2_5}) {
    const RenderedChat r = render_chat(f, req);
    const ChatSpan& s = *r.message_span(0);
    EXPECT_EQ(s.begin, 0u);
    EXPECT_EQ(r.body(s), "S");
    EXPECT_NE(
        r.footer(s).find(
            R"({"type": "function", "function": {"name": "f", "description": "é", "parameters": {"type": "object"}}})"),
        std::string_view::npos);
    EXPECT_EQ(r.footer(s).substr(0, 9), "\n\n# Tools");
  }
  // Without a system message the tools block is a preamble; Qwen2.5 puts its default prompt first.
  const ChatRequest no_system = request(R"({"messages": [{"role": "user", "content": "u"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})");
  const RenderedChat q3 = render_chat(ChatFamily::kQwen3, no_system);
  EXPECT_EQ(q3.spans[0].kind, SpanKind::kPreamble);
  EXPECT_EQ(q3.header(q3.spans[0]).substr(0, 27), "<|im_start|>system\n# Tools\n");
  const RenderedChat q25 = render_chat(ChatFamily::kQwen2_5, no_system);
  EXPECT_EQ(
      q25.header(q25.spans[0]).find("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."),
      0u);
}

TEST(ChatTemplate, GenerationPromptIsItsOwnSpan) {
  const ChatRequest req = request(R"({"messages": [{"role": "user", "content": "u"}]})");
  for (ChatFamily f : kFamilies) {
    const RenderedChat without = render_chat(f, req);
    const RenderedChat with =
        render_chat(f, req, {.add_generation_prompt = true, .enable_thinking = std::nullopt});
    ASSERT_EQ(with.spans.size(), without.spans.size() + 1);
    const ChatSpan& g = with.spans.back();
    EXPECT_EQ(g.kind, SpanKind::kGenerationPrompt);
    EXPECT_EQ(g.message_index, -1);
    EXPECT_EQ(with.text.substr(0, g.begin), without.text);
    EXPECT_EQ(with.header(g), "<|im_start|>assistant\n");
    const RenderedChat no_think =
        render_chat(f, req, {.add_generation_prompt = true, .enable_thinking = false});
    EXPECT_EQ(no_think.header(no_think.spans.back()),
              f == ChatFamily::kQwen3 ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                      : "<|im_start|>assistant\n");
    // enable_thinking=true is the template default.
    EXPECT_EQ(render_chat(f, req, {.add_generation_prompt = true, .enable_thinking = true}).text,
              with.text);
  }
}

// What token-in/token-out needs: the prompt the model saw (history + generation prompt) is exactly
// the rendering of the history plus the reply up to the reply's body, and the reply's footer starts
// with the end-of-turn token.
TEST(ChatTemplate, GenerationPromptIsAPrefixOfTheRenderedReply) {
  int checked = 0;
  for (const ChatRequest& full : all_cases()) {
    if (full.messages.size() < 2 || full.messages.back().role != Role::kAssistant) continue;
    ChatRequest history = full;
    history.messages.pop_back();
    for (ChatFamily f : kFamilies) {
      if (f == ChatFamily::kChatml && has_tools(full)) continue;
      const RenderedChat with_reply = render_chat(f, full);
      const RenderedChat prompt =
          render_chat(f, history, {.add_generation_prompt = true, .enable_thinking = std::nullopt});
      const ChatSpan& reply = with_reply.spans.back();
      ASSERT_EQ(reply.message_index, static_cast<int>(full.messages.size() - 1));
      EXPECT_EQ(with_reply.text.substr(0, reply.body_begin), prompt.text) << family_name(f);
      EXPECT_EQ(with_reply.footer(reply), "<|im_end|>\n");
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(ChatTemplate, SpansConcatenateToTheText) {
  for (const ChatRequest& req : all_cases()) {
    for (ChatFamily f : kFamilies) {
      if (f == ChatFamily::kChatml && has_tools(req)) continue;
      const RenderedChat r =
          render_chat(f, req, {.add_generation_prompt = true, .enable_thinking = std::nullopt});
      std::string joined;
      for (const ChatSpan& s : r.spans) {
        joined += r.header(s);
        joined += r.body(s);
        joined += r.footer(s);
        EXPECT_EQ(r.span_text(s).size(), s.end - s.begin);
      }
      EXPECT_EQ(joined, r.text);
    }
  }
}

// Python's str.strip('\n') strips newlines only; @huggingface/jinja would strip the spaces too.
TEST(ChatTemplate, Qwen3StripsOnlyNewlinesLikePython) {
  const RenderedChat r =
      render_chat(ChatFamily::kQwen3, request(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "\n\n answer ", "reasoning_content": "\n  reason \n\n"}]})"));
  EXPECT_EQ(r.body(*r.message_span(1)), "<think>\n  reason \n</think>\n\n answer ");
  const RenderedChat inline_think =
      render_chat(ChatFamily::kQwen3, request(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "pre<think> \nr\n</think>\n post"}]})"));
  EXPECT_EQ(inline_think.body(*inline_think.message_span(1)), "<think>\n \nr\n</think>\n\n post");
}

TEST(ChatTemplate, Qwen3DropsThinkingBeforeTheLastQuery) {
  const RenderedChat r = render_chat(ChatFamily::kQwen3, request(R"({"messages": [
      {"role": "user", "content": "q1"},
      {"role": "assistant", "content": "<think>\nold\n</think>\n\na1"},
      {"role": "user", "content": "q2"},
      {"role": "assistant", "content": "a2", "reasoning_content": "new"}]})"));
  EXPECT_EQ(r.body(*r.message_span(1)), "a1");
  EXPECT_EQ(r.body(*r.message_span(3)), "<think>\nnew\n</think>\n\na2");
}

TEST(ChatTemplate, NonObjectArgumentsFollowEachTemplate) {
  const ChatRequest req = request(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1, 2]"}}]}]})");
  EXPECT_NE(render_chat(ChatFamily::kQwen3, req).text.find(R"({"name": "f", "arguments": [1, 2]})"),
            std::string::npos);
  EXPECT_NE(
      render_chat(ChatFamily::kQwen2_5, req).text.find(R"({"name": "f", "arguments": "[1, 2]"})"),
      std::string::npos);
}

TEST(ChatTemplate, DeveloperRendersAsSystem) {
  const RenderedChat r = render_chat(ChatFamily::kQwen2_5,
                                     request(R"({"messages": [{"role": "developer", "content": "d"},
      {"role": "user", "content": "u"}]})"));
  EXPECT_EQ(r.spans[0].kind, SpanKind::kMessage)
      << "a developer message replaces the default system prompt";
  EXPECT_EQ(r.span_text(r.spans[0]), "<|im_start|>system\nd<|im_end|>\n");
}

TEST(ChatTemplate, PlainChatmlRefusesTools) {
  try {
    render_chat(ChatFamily::kChatml, request(R"({"messages": [{"role": "user", "content": "u"}],
        "tools": [{"type": "function", "function": {"name": "f"}}]})"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tool format"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render_chat(ChatFamily::kChatml, request(R"({"messages": [{"role": "assistant",
      "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]})")),
               Error);
}

TEST(ChatTemplate, EmptyRequestIsAnError) {
  EXPECT_THROW(render_chat(ChatFamily::kQwen3, ChatRequest{}), Error);
}

TEST(ChatTemplate, DetectsFamilies) {
  const std::string q25 = load_chat_template(data_dir() / "chat_templates" / "qwen2_5");
  const std::string chatml = load_chat_template(data_dir() / "chat_templates" / "chatml");
  EXPECT_EQ(detect_chat_family(q25).family, ChatFamily::kQwen2_5);
  EXPECT_TRUE(detect_chat_family(q25).verified);
  EXPECT_EQ(detect_chat_family(chatml).family, ChatFamily::kChatml);
  EXPECT_TRUE(detect_chat_family(chatml).verified);
  // A modified template is still recognised, but not verified.
  const TemplateDetection changed = detect_chat_family(q25 + " ");
  EXPECT_EQ(changed.family, ChatFamily::kQwen2_5);
  EXPECT_FALSE(changed.verified);
  EXPECT_EQ(
      detect_chat_family("{{ '<tool_call>' }}{% set ns = namespace(last_query_index=0) %}<think>")
          .family,
      ChatFamily::kQwen3);
}

// The template the BPE trainer writes for our own tiny model must stay one we verify.
TEST(ChatTemplate, TrainerTemplateIsVerifiedQwen2_5) {
  const TemplateDetection d = detect_chat_family(kChatMlTemplate);
  EXPECT_EQ(d.family, ChatFamily::kQwen2_5);
  EXPECT_TRUE(d.verified);
}

TEST(ChatTemplate, UnknownTemplatesAreErrors) {
  const char* unknown[] = {
      "",
      "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}",
      // ChatML with a default system prompt or a tool format we do not model must not pass as
      // plain.
      "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
      "assistant<|im_end|>{% endif %}"
      "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}<|im_end|>",
      "<|im_start|>{{ tools }}<|im_end|>",
  };
  for (const char* t : unknown) {
    try {
      detect_chat_family(t);
      ADD_FAILURE() << "accepted: " << t;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
  }
}

// Qwen3-Thinking (-2507) style: the Qwen3 template with a generation prompt that opens <think>.
// Built from a stand-in source with the markers detection looks for, as such templates write them.
TEST(ChatTemplate, DetectsQwen3ThinkingByItsGenerationPrompt) {
  const std::string body =
      "{{ '<tool_call>' }}{% set ns = namespace(last_query_index=0) %}<think>"
      "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n<think>\\n' }}\n"
      "{%- endif %}";
  const TemplateDetection d = detect_chat_family(body);
  EXPECT_EQ(d.family, ChatFamily::kQwen3Thinking);
  EXPECT_FALSE(d.verified);
  // Both a forced think prompt and an enable_thinking switch: which prompt it writes is unknown.
  try {
    detect_chat_family(body + "{% if enable_thinking is defined %}{% endif %}");
    ADD_FAILURE() << "a template with both generation prompts was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("enable_thinking"), std::string::npos) << e.what();
  }
}

// The generation prompt ends inside the think block, whatever enable_thinking says, and the
// rendered reply (after the last query) still extends the prompt byte for byte: the "<think>\n"
// belongs to the reply's body there, to the prompt when generating.
TEST(ChatTemplate, Qwen3ThinkingGenerationPromptOpensThink) {
  const ChatRequest history = request(R"({"messages": [{"role": "user", "content": "u"}]})");
  for (std::optional<bool> thinking : {std::optional<bool>{}, std::optional<bool>{false}}) {
    const RenderedChat r =
        render_chat(ChatFamily::kQwen3Thinking, history,
                    {.add_generation_prompt = true, .enable_thinking = thinking});
    EXPECT_EQ(r.header(r.spans.back()), "<|im_start|>assistant\n<think>\n");
    EXPECT_EQ(r.text, "<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n<think>\n");
  }
  for (const char* reply : {R"({"role": "assistant", "content": "c", "reasoning_content": "r"})",
                            R"({"role": "assistant", "content": "c"})"}) {
    const ChatRequest full =
        request(R"({"messages": [{"role": "user", "content": "u"}, )" + std::string(reply) + "]}");
    const RenderedChat prompt =
        render_chat(ChatFamily::kQwen3Thinking, history, {.add_generation_prompt = true});
    const RenderedChat with_reply = render_chat(ChatFamily::kQwen3Thinking, full);
    EXPECT_EQ(with_reply.text.substr(0, prompt.text.size()), prompt.text) << reply;
    const ChatSpan& s = with_reply.spans.back();
    EXPECT_EQ(with_reply.header(s), "<|im_start|>assistant\n");
    EXPECT_EQ(with_reply.body(s).substr(0, 8), "<think>\n");
    // Without a generation prompt it renders exactly as Qwen3.
    EXPECT_EQ(with_reply.text, render_chat(ChatFamily::kQwen3, full).text);
  }
}

TEST(ChatTemplate, FamilyNames) {
  for (ChatFamily f : kFamilies) EXPECT_EQ(family_from_name(family_name(f)), f);
  EXPECT_EQ(family_from_name("qwen3-thinking"), ChatFamily::kQwen3Thinking);
  EXPECT_FALSE(family_from_name("llama3").has_value());
}

class ChatTemplateFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ajet_chat_template_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    write_file_atomic(dir_ / name, text);
  }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateFiles, LoadsStringListOrJinjaFile) {
  write("tokenizer_config.json", R"({"chat_template": "T1"})");
  EXPECT_EQ(load_chat_template(dir_), "T1");
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T2"}, {"name": "default", "template": "T3"}]})");
  EXPECT_EQ(load_chat_template(dir_), "T3");
  write("tokenizer_config.json", R"({"eos_token": "x"})");
  write("chat_template.jinja", "T4");
  EXPECT_EQ(load_chat_template(dir_), "T4");
}

TEST_F(ChatTemplateFiles, LoadErrorsNameTheFile) {
  try {
    load_chat_template(dir_);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
  write("tokenizer_config.json", R"({"chat_template": )");
  try {
    load_chat_template(dir_);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: invalid JSON"), std::string::npos)
        << e.what();
  }
  write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW(load_chat_template(dir_), Error);
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(load_chat_template(dir_), Error);
}

}  // namespace
}  // namespace ajet::text
