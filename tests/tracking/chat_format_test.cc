// Turn signatures: how the tracker decides that an assistant message a client sent back is an
// earlier completion (content trimmed, tool calls by name and JSON value, reasoning and ids
// ignored).
#include <gtest/gtest.h>

#include "common/error.h"
#include "tracking/call_record.h"
#include "tracking/chat_format.h"
#include "tracking_test_util.h"

namespace ajet::tracking {
namespace {

text::ChatMessage assistant(std::string content, std::vector<text::ToolCall> calls = {}) {
  text::ChatMessage m;
  m.role = text::Role::kAssistant;
  m.content = std::move(content);
  m.tool_calls = std::move(calls);
  return m;
}

TEST(TurnSignature, ToolCallArgumentsCompareAsJsonValues) {
  const TurnSignature gen = generated_signature(
      "",
      "Let me "
      "look.\n<tool_call>\n{\"name\":\"f\",\"arguments\":{\"b\":[1,2],\"a\":\"x\"}}\n</tool_call>");
  // Parsed fields, different key order and spacing, a tool-call id, surrounding whitespace.
  EXPECT_EQ(message_signature(
                assistant("  Let me look. ", {{"call_1", "f", "{\"a\": \"x\", \"b\": [1, 2]}"}}))
                .key,
            gen.key);
  // The raw text echoed back in content.
  EXPECT_EQ(
      message_signature(assistant("Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                                  "{\"a\": \"x\", \"b\": [1,2]}}\n</tool_call>"))
          .key,
      gen.key);
  // A different value, name, or content is another turn.
  EXPECT_NE(
      message_signature(assistant("Let me look.", {{"", "f", "{\"a\": \"y\", \"b\": [1, 2]}"}}))
          .key,
      gen.key);
  EXPECT_NE(
      message_signature(assistant("Let me look.", {{"", "g", "{\"a\": \"x\", \"b\": [1, 2]}"}}))
          .key,
      gen.key);
  EXPECT_NE(
      message_signature(assistant("Let me see.", {{"", "f", "{\"a\": \"x\", \"b\": [1, 2]}"}})).key,
      gen.key);
  EXPECT_NE(message_signature(assistant("Let me look.")).key, gen.key);
  // Arguments that are not JSON compare as text and never equal a JSON value.
  EXPECT_NE(message_signature(assistant("", {{"", "f", "not json"}})).key,
            message_signature(assistant("", {{"", "f", "\"not json\""}})).key);
}

// Issue 38: arguments nested 70,000 levels deep were parsed without a limit here and dump()
// overflowed the stack (SIGSEGV of the front through /v1/chat/completions and /v1/responses). Past
// the limit they compare as text; within it, as JSON values.
TEST(TurnSignature, ArgumentsNestedPastTheLimitCompareAsTextWithoutACrash) {
  const std::string deep = std::string(70000, '[') + std::string(70000, ']');
  const TurnSignature sig = message_signature(assistant("", {{"", "f", deep}}));
  EXPECT_NE(sig.key.find(deep), std::string::npos);
  const std::string ok = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(message_signature(assistant("", {{"", "f", ok}})).key,
            message_signature(assistant("", {{"", "f", " " + ok + " "}})).key);
}

// A stored response nested too deep gives no text instead of a crash (call_record.cc).
TEST(CallFromRow, AStoredResponseNestedTooDeepGivesNoText) {
  store::CallRow row;
  row.episode_uuid = "e";
  row.finish_reason = "stop";
  row.response_json = R"({"choices": [{"message": {"content": )" + std::string(70000, '[') +
                      std::string(70000, ']') + "}}]}";
  EXPECT_EQ(call_from_row(row, nullptr).completion_text, "");
  row.response_json = R"({"choices": [{"message": {"content": "hi"}}]})";
  EXPECT_EQ(call_from_row(row, nullptr).completion_text, "hi");
}

TEST(TurnSignature, ReasoningIsSeparateFromTheKey) {
  const TurnSignature gen = generated_signature("", "<think>\nhmm\n</think>\n\nIt is 4.");
  EXPECT_EQ(gen.reasoning, "hmm");
  text::ChatMessage with = assistant("It is 4.");
  with.reasoning_content = "hmm";
  EXPECT_EQ(message_signature(with).key, gen.key);
  EXPECT_EQ(message_signature(with).reasoning, "hmm");
  EXPECT_EQ(message_signature(assistant("It is 4.")).key, gen.key);
  EXPECT_EQ(message_signature(assistant("<think>hmm</think>It is 4.")).key, gen.key);
  // A think block opened by the generation prompt (enable_thinking=false) is empty reasoning.
  EXPECT_EQ(generated_signature("<think>\n\n</think>\n\n", "It is 4.").reasoning, "");
  EXPECT_EQ(generated_signature("<think>\n\n</think>\n\n", "It is 4.").key, gen.key);
}

// A generation prompt that opens the think block (qwen3-thinking: "<think>\n"): the generated text
// starts inside the reasoning. Closed, it parses as if "<think>\n" had been generated; cut before
// "</think>", all of it is reasoning, with no content and no tool calls (the prompt's "<think>"
// must not surface as content the model never wrote).
TEST(ParseGenerated, AThinkBlockOpenedByThePrompt) {
  EXPECT_TRUE(opens_think_block("<think>\n"));
  EXPECT_FALSE(opens_think_block("<think>\n\n</think>\n\n"));
  EXPECT_FALSE(opens_think_block(""));
  const text::ParsedOutput closed = parse_generated(
      "<think>\n",
      "hmm\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(closed.reasoning_content.value_or("?"), "hmm");
  EXPECT_EQ(closed.content, "");
  ASSERT_EQ(closed.tool_calls.size(), 1u);
  EXPECT_EQ(closed.tool_calls[0].name, "f");
  const text::ParsedOutput cut =
      parse_generated("<think>\n", "\nhmm, <tool_call>\n{\"name\": \"f\"");
  EXPECT_EQ(cut.reasoning_content.value_or("?"), "hmm, <tool_call>\n{\"name\": \"f\"");
  EXPECT_EQ(cut.content, "");
  EXPECT_TRUE(cut.tool_calls.empty());
  EXPECT_TRUE(cut.issues.empty());
  // Without the open block, an unclosed "<think>" the model wrote stays content (and is reported).
  EXPECT_EQ(parse_generated("", "<think>\nhmm").content, "<think>\nhmm");
}

TEST(ChatFormatProbe, ReadsTheEndOfTurnFromTheTemplate) {
  auto tok = testing::trained_tokenizer();
  const ChatFormat f = ChatFormat::from_tokenizer(*tok);
  EXPECT_EQ(f.family, text::ChatFamily::kQwen2_5);
  EXPECT_EQ(f.end_of_turn_text, "<|im_end|>");
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), f.end_of_turn);
  EXPECT_EQ(f.assistant_header, "<|im_start|>assistant\n");
  EXPECT_EQ(tok->decode(f.footer_after_end), "\n");
  const ChatFormat chatml = ChatFormat::create(*tok, text::ChatFamily::kChatml);
  EXPECT_EQ(chatml.end_of_turn, f.end_of_turn);
}

}  // namespace
}  // namespace ajet::tracking
