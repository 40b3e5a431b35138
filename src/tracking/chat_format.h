// What the tracker needs to know about one model's chat template and tokenizer: the template
// family, the end-of-turn token an assistant footer starts with, and how an assistant turn is
// identified when a client sends it back (content + tool calls, after parsing). It never guesses a
// format: a template whose assistant footer does not start with a known end-of-turn token is an
// error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template.h"
#include "text/messages.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace ajet::tracking {

using text::TokenId;

struct ChatFormat {
  const text::Tokenizer* tokenizer = nullptr;  // not owned; must outlive the format
  text::ChatFamily family = text::ChatFamily::kChatml;
  TokenId end_of_turn = -1;               // <|im_end|>: the token an assistant footer starts with
  std::string end_of_turn_text;           // "<|im_end|>"
  std::string assistant_header;           // "<|im_start|>assistant\n" (no generation-prompt extras)
  std::vector<TokenId> footer_after_end;  // ids of the rest of the assistant footer ("\n")

  // Probes `family`'s template with `tokenizer`: renders a tiny chat, reads the assistant header
  // and footer, checks that the footer starts with an end-of-turn token the tokenizer knows as one
  // id. Throws Error(kInvalidArgument) naming what is missing.
  static ChatFormat create(const text::Tokenizer& tokenizer, text::ChatFamily family);
  // The family detected from the tokenizer's own chat template (tokenizer_config.json).
  static ChatFormat from_tokenizer(const text::Tokenizer& tokenizer);

  const text::Tokenizer& tok() const { return *tokenizer; }
};

// An assistant turn as the tracker compares it: what a client sees of a completion and sends back.
struct TurnSignature {
  std::string key;  // content (trimmed) + tool calls (name, arguments as canonical JSON)
  std::string
      reasoning;  // reasoning text, trimmed; "" when absent (reasoning is not part of `key`)
};

// The signature of an assistant message a client sent: <think> and <tool_call> blocks left in its
// content are parsed out first, so a client that echoes raw text and one that echoes parsed fields
// compare equal. Tool-call ids are ignored; arguments compare as JSON values (key order and spacing
// do not matter), or as text when they are not JSON.
TurnSignature message_signature(const text::ChatMessage& message);

// The signature of generated text. `generation_prompt_tail` is what the generation prompt added
// after the assistant header (Qwen3 with enable_thinking=false: "<think>\n\n</think>\n\n"), so a
// think block opened by the prompt is seen as the template would render it.
TurnSignature generated_signature(std::string_view generation_prompt_tail,
                                  std::string_view generated_text);

// What text-level merging compares of a message: its content after <think> / <tool_call> blocks are
// parsed out, trimmed (tool calls and reasoning are not compared there).
std::string comparable_content(const text::ChatMessage& message);

// Whether a generation prompt tail leaves a think block open ("<think>\n": qwen3-thinking): the
// generated text then starts inside the reasoning.
bool opens_think_block(std::string_view generation_prompt_tail);

// The parsed form of generated text (content, reasoning, tool calls) with deterministic empty
// tool-call ids: what the tracker and the episode viewer show as "the completion". When the tail
// opens a think block that the generated text never closes (cut by max_tokens inside its
// reasoning), everything generated is reasoning: no content, no tool calls, as vLLM's reasoning
// parsers do for templates that force "<think>\n".
text::ParsedOutput parse_generated(std::string_view generation_prompt_tail,
                                   std::string_view generated_text);

}  // namespace ajet::tracking
