// Parsing model output into content, reasoning and Hermes tool calls: well-formed blocks become
// tool calls, malformed ones stay in the text and are reported, and parse → render gives the
// model's canonical output back.
#include <gtest/gtest.h>

#include <regex>

#include "text/chat_template.h"
#include "text/tool_calls.h"

namespace ajet::text {
namespace {

// Deterministic ids: call_0, call_1, ...
ParseOptions counting_ids(bool parse_reasoning = true) {
  auto n = std::make_shared<int>(0);
  ParseOptions o;
  o.parse_reasoning = parse_reasoning;
  o.id_source = [n] { return "call_" + std::to_string((*n)++); };
  return o;
}

TEST(ToolCalls, PlainTextIsContentUnchanged) {
  const std::string text = "  Hello,\n\nworld \n";
  const ParsedOutput p = parse_model_output(text, counting_ids());
  EXPECT_EQ(p.content, text);
  EXPECT_FALSE(p.reasoning_content.has_value());
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_TRUE(p.issues.empty());
}

TEST(ToolCalls, ParsesSeveralCalls) {
  const ParsedOutput p = parse_model_output(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\":\"Zürich\",\"days\":[1,2]}}\n</tool_call>\n"
      "<tool_call>{\"arguments\": {}, \"name\": \"now\"}</tool_call>\n",
      counting_ids());
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].id, "call_0");
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Zürich\", \"days\": [1, 2]}");
  EXPECT_EQ(p.tool_calls[1].id, "call_1");
  EXPECT_EQ(p.tool_calls[1].name, "now");
  EXPECT_EQ(p.tool_calls[1].arguments, "{}");
  EXPECT_TRUE(p.issues.empty());
  const ChatMessage m = p.to_message();
  EXPECT_EQ(m.role, Role::kAssistant);
  EXPECT_EQ(m.tool_calls.size(), 2u);
}

TEST(ToolCalls, OnlyToolCallsGiveEmptyContent) {
  const ParsedOutput p = parse_model_output(
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", counting_ids());
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(p.to_message().content_was_null);
}

TEST(ToolCalls, TextAfterToolCallsIsKept) {
  const ParsedOutput p = parse_model_output(
      "A\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nB\n<tool_call>{\"name\": "
      "\"g\", \"arguments\": {}}</tool_call> C ",
      counting_ids());
  EXPECT_EQ(p.content, "A\nB\nC");
  EXPECT_EQ(p.tool_calls.size(), 2u);
}

TEST(ToolCalls, ThinkBlockBecomesReasoning) {
  const ParsedOutput p = parse_model_output(
      "<think>\nI should call f.\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
      "{\"a\": 1}}\n</tool_call>",
      counting_ids());
  EXPECT_EQ(p.reasoning_content, "I should call f.");
  EXPECT_EQ(p.content, "Sure.");
  EXPECT_EQ(p.tool_calls.size(), 1u);
  // The generation prompt may already have opened the block.
  const ParsedOutput q = parse_model_output("reasoning\n</think>\n\nanswer", counting_ids());
  EXPECT_EQ(q.reasoning_content, "reasoning");
  EXPECT_EQ(q.content, "answer");
  // A later </think> stays in the content, never dropped.
  const ParsedOutput r = parse_model_output("<think>a</think>b</think>c", counting_ids());
  EXPECT_EQ(r.reasoning_content, "a");
  EXPECT_EQ(r.content, "b</think>c");
}

TEST(ToolCalls, ReasoningParsingCanBeOff) {
  const std::string text = "<think>\nx\n</think>\n\ny";
  const ParsedOutput p = parse_model_output(text, counting_ids(/*parse_reasoning=*/false));
  EXPECT_EQ(p.content, text);
  EXPECT_FALSE(p.reasoning_content.has_value());
}

TEST(ToolCalls, UnterminatedThinkStaysContentAndIsFlagged) {
  const std::string text = "<think>\nthinking and then max_tokens hit";
  const ParsedOutput p = parse_model_output(text, counting_ids());
  EXPECT_EQ(p.content, text);
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_EQ(p.issues[0].kind, ParseIssue::Kind::kUnterminatedThink);
  EXPECT_EQ(issue_kind_name(p.issues[0].kind), "unterminated_think");
}

struct MalformedCase {
  std::string block;
  ParseIssue::Kind kind;
  std::string reason_part;
};

TEST(ToolCalls, MalformedBlocksStayInTextAndAreFlagged) {
  const MalformedCase cases[] = {
      {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
       ParseIssue::Kind::kBadJson, "invalid JSON at arguments.a"},
      {"<tool_call>[1, 2]</tool_call>", ParseIssue::Kind::kNotAnObject,
       "is a JSON array, not an object"},
      {"<tool_call>{\"arguments\": {}}</tool_call>", ParseIssue::Kind::kMissingName,
       "no non-empty string \"name\""},
      {"<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>", ParseIssue::Kind::kMissingName,
       "\"name\""},
      {"<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
       ParseIssue::Kind::kArgumentsNotObject, "(f): \"arguments\" must be an object, got string"},
      {"<tool_call>{\"name\": \"f\"}</tool_call>", ParseIssue::Kind::kArgumentsNotObject,
       "got nothing"},
      {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\"", ParseIssue::Kind::kUnterminated,
       "has no closing </tool_call>"},
  };
  for (const MalformedCase& c : cases) {
    const std::string prefix = "Before ";
    const std::string text = prefix + c.block;
    const ParsedOutput p = parse_model_output(text, counting_ids());
    EXPECT_EQ(p.content, text) << "never dropped: " << c.block;
    EXPECT_TRUE(p.tool_calls.empty());
    ASSERT_EQ(p.issues.size(), 1u) << c.block;
    const ParseIssue& issue = p.issues[0];
    EXPECT_EQ(issue.kind, c.kind) << c.block;
    EXPECT_NE(issue.reason.find(c.reason_part), std::string::npos) << issue.reason;
    EXPECT_NE(issue.reason.find("byte " + std::to_string(prefix.size())), std::string::npos)
        << issue.reason;
    EXPECT_EQ(text.substr(issue.byte_begin, issue.byte_end - issue.byte_begin), c.block);
  }
}

TEST(ToolCalls, GoodAndBadBlocksTogether) {
  const std::string bad = "<tool_call>{not json}</tool_call>";
  const std::string text =
      "<think>r</think>Doing two things.\n" + bad +
      "\n<tool_call>{\"name\": \"g\", \"arguments\": {\"x\": true}}</tool_call>";
  const ParsedOutput p = parse_model_output(text, counting_ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "g");
  EXPECT_EQ(p.content, "Doing two things.\n" + bad);
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_EQ(text.substr(p.issues[0].byte_begin, p.issues[0].byte_end - p.issues[0].byte_begin), bad)
      << "issue offsets refer to the whole output, think block included";
}

TEST(ToolCalls, UnterminatedBeforeAGoodBlock) {
  const std::string text =
      "<tool_call>{\"name\": \"f\", <tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
  const ParsedOutput p = parse_model_output(text, counting_ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "g");
  EXPECT_EQ(p.content, "<tool_call>{\"name\": \"f\",");
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_EQ(p.issues[0].kind, ParseIssue::Kind::kUnterminated);
}

TEST(ToolCalls, StrayCloseIsFlagged) {
  const std::string text = "oops </tool_call> text";
  const ParsedOutput p = parse_model_output(text, counting_ids());
  EXPECT_EQ(p.content, text);
  ASSERT_EQ(p.issues.size(), 1u);
  EXPECT_EQ(p.issues[0].kind, ParseIssue::Kind::kStrayClose);
  EXPECT_EQ(p.issues[0].byte_begin, 5u);
}

TEST(ToolCalls, RandomIdsLookLikeOpenAi) {
  const std::string a = random_tool_call_id();
  const std::string b = random_tool_call_id();
  EXPECT_TRUE(std::regex_match(a, std::regex("call_[0-9a-f]{24}"))) << a;
  EXPECT_NE(a, b);
  const ParsedOutput p =
      parse_model_output("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_TRUE(std::regex_match(p.tool_calls[0].id, std::regex("call_[0-9a-f]{24}")))
      << p.tool_calls[0].id;
}

// What a model trained on the template writes parses into a message that renders back to exactly
// that text (the assistant body), for each family that has a tool format.
TEST(ToolCalls, ParseThenRenderGivesTheOutputBack) {
  const std::string call_f =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"中文\", \"n\": [1, 2.5, {\"z\": "
      "null}]}}\n</tool_call>";
  const std::string call_g = "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  struct Case {
    ChatFamily family;
    std::string output;
  };
  const Case cases[] = {
      {ChatFamily::kQwen3,
       "<think>\nLet me think.\n</think>\n\nCalling.\n" + call_f + "\n" + call_g},
      {ChatFamily::kQwen3, "<think>\n\n</think>\n\n" + call_g},
      {ChatFamily::kQwen3, "<think>\nplain\n</think>\n\nJust text."},
      {ChatFamily::kQwen2_5, "Calling.\n" + call_f + "\n" + call_g},
      {ChatFamily::kQwen2_5, call_f},
      {ChatFamily::kQwen2_5, "Just text."},
  };
  for (const Case& c : cases) {
    ParseOptions o = counting_ids(c.family == ChatFamily::kQwen3);
    const ParsedOutput p = parse_model_output(c.output, o);
    EXPECT_TRUE(p.issues.empty()) << c.output;
    ChatRequest req;
    ChatMessage user;
    user.content = "question";
    req.messages = {user, p.to_message()};
    const RenderedChat r = render_chat(c.family, req);
    EXPECT_EQ(r.body(*r.message_span(1)), c.output) << family_name(c.family);
  }
}

TEST(ToolCalls, StreamableContentLength) {
  EXPECT_EQ(streamable_content_length("hello"), 5u);
  EXPECT_EQ(streamable_content_length("hello <tool_call>{\"na"), 6u);
  EXPECT_EQ(streamable_content_length("hello <tool_c"), 6u);
  EXPECT_EQ(streamable_content_length("hello <"), 6u);
  EXPECT_EQ(streamable_content_length("<tool_call"), 0u);
  EXPECT_EQ(streamable_content_length("a <b> c"), 7u);
  EXPECT_EQ(streamable_content_length(""), 0u);
}

}  // namespace
}  // namespace ajet::text
