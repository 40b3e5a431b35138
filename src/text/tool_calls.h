// Parses what the model generated for one assistant turn into content, reasoning_content (Qwen3
// <think>) and Hermes-style tool calls (<tool_call>{"name": ..., "arguments": {...}}</tool_call>).
// It must never drop text silently: a malformed <tool_call> block stays in the content and is
// reported as a ParseIssue.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/messages.h"

namespace ajet::text {

struct ParseIssue {
  enum class Kind {
    kBadJson,             // the block is not valid JSON
    kNotAnObject,         // valid JSON, but not an object
    kMissingName,         // no non-empty string "name"
    kArgumentsNotObject,  // "arguments" missing or not an object
    kUnterminated,        // <tool_call> without </tool_call> (e.g. cut off by max_tokens)
    kStrayClose,          // </tool_call> without an opening tag
    kUnterminatedThink,   // <think> without </think>: the whole text is kept as content
  };
  Kind kind = Kind::kBadJson;
  std::string reason{};   // human-readable, names the problem
  size_t byte_begin = 0;  // the offending block in the parsed text, [byte_begin, byte_end)
  size_t byte_end = 0;
};

std::string_view issue_kind_name(ParseIssue::Kind kind);

struct ParsedOutput {
  // Text outside well-formed tool-call blocks (malformed blocks included verbatim). When there are
  // tool calls, whitespace around them is dropped and text found between or after them is appended
  // on its own line, so that rendering the message again gives back canonical output.
  std::string content{};
  std::optional<std::string> reasoning_content{};  // text of the <think> block, when there was one
  std::vector<ToolCall> tool_calls{};              // arguments re-serialised with template_json()
  std::vector<ParseIssue> issues{};

  // The assistant message this output stands for (content null when empty and there are tool
  // calls).
  ChatMessage to_message() const;
};

// Returns a fresh tool-call id for each call.
using ToolCallIdSource = std::function<std::string()>;

// "call_" + 24 random lowercase hex digits.
std::string random_tool_call_id();

struct ParseOptions {
  // Split a leading "<think>...</think>" (or "...</think>" when the generation prompt already
  // opened the block) into reasoning_content, as Qwen3's template does.
  bool parse_reasoning = true;
  ToolCallIdSource id_source{};  // empty: random_tool_call_id
};

ParsedOutput parse_model_output(std::string_view text, const ParseOptions& options = {});

// For streaming: how many leading bytes of `text` (the output so far) can be sent as content now,
// because no tool call can start in them. Stops at the first "<tool_call>" and holds back a tail
// that could be the beginning of one ("<tool_c").
size_t streamable_content_length(std::string_view text);

}  // namespace ajet::text
