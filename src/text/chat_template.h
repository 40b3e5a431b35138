// Renders chat requests to prompt text exactly as the model's Jinja chat template would, for the
// ChatML families we support (Qwen3, Qwen2.5, plain ChatML), and reports which bytes / tokens each
// message produced. It implements the templates' logic in C++ (no Jinja engine at run time); the
// tests check every family byte for byte against @huggingface/jinja. It must never guess: an
// unrecognised template is an error, not a silent fallback.
//
// Families and how a template is recognised (detect_chat_family, from tokenizer_config.json):
//   qwen3   contains "<tool_call>", "<think>" and "last_query_index" (Qwen3 hybrid-thinking
//           template: tools block without default system prompt, <think> kept only for assistant
//           turns after the last real user query, enable_thinking=false adds an empty think block
//           to the generation prompt).
//   qwen3-thinking  the same markers, and a generation prompt that opens the think block
//           ('<|im_start|>assistant\n<think>\n', Qwen3-*-Thinking-2507, QwQ-style) with no
//           enable_thinking switch: rendered as qwen3, except that the generation prompt ends in
//           "<think>\n", so the model's first generated token is already inside its reasoning. A
//           template with both that prompt and enable_thinking is refused (we cannot tell which
//           generation prompt it writes).
//   qwen2.5 contains "<tool_call>" and "You are Qwen, created by Alibaba Cloud" (default system
//           prompt when the first message is not a system message; reasoning_content ignored).
//   chatml  contains "<|im_start|>" and "<|im_end|>" but no "tool" at all: every message is
//           "<|im_start|>{role}\n{content}<|im_end|>\n". Such a template has no tool format, so
//           rendering tools or tool calls with it is an error.
// Detection also says whether the template is byte-identical to one of the templates the tests
// verify (`verified`); a recognised but different template renders with the family's rules and
// a warning is logged, because its details may differ.
//
// Template semantics reproduced (and where @huggingface/jinja differs from Python jinja2, which is
// what vLLM and transformers run, we follow Python):
//   * `tojson` output: see template_json() in messages.h.
//   * str.strip('\n') / lstrip('\n') / rstrip('\n') strip only newlines (@huggingface/jinja strips
//     all whitespace there; tests avoid spaces next to such text).
//   * Tool-call `arguments` (JSON text) are parsed before rendering when they hold a JSON object,
//   as
//     vLLM does; the template then writes them with tojson. Text that is not a JSON object stays a
//     string: Qwen3 writes it verbatim, Qwen2.5 writes it as a JSON string literal.
//   * Empty `tools` is the same as no tools (Jinja truthiness).
//
// Spans and token-in/token-out. Every byte of the rendered text belongs to exactly one ChatSpan, in
// order: an optional preamble (message_index -1: a default system prompt or a tools block without
// a system message), one span per message, and the generation prompt (message_index -1). Each span
// is split into header | body | footer:
//   user/system:  "<|im_start|>user\n" | content | "<|im_end|>\n"
//   first system with tools: "<|im_start|>system\n" | content | "\n\n# Tools ...<|im_end|>\n"
//   assistant:    "<|im_start|>assistant\n" | everything the model generates before its end-of-turn
//                 token (think block, content, <tool_call> blocks) | "<|im_end|>\n"
//   tool (folded into one user turn): "<|im_start|>user\n<tool_response>\n" (or
//   "\n<tool_response>\n"
//                 when a previous tool result opened the turn) | content | "\n</tool_response>"
//                 (+ "<|im_end|>\n" on the last result of the run)
//   preamble / generation prompt: all header, empty body and footer.
// An assistant footer always starts with the end-of-turn token "<|im_end|>". So the tracker can
// render a turn from the ids the model actually produced: ids(header) + generated ids (ending with
// <|im_end|> when the model stopped normally) + ids(footer minus its leading "<|im_end|>"), instead
// of re-tokenising the body text. When the generation prompt opens the think block (qwen3-thinking:
// "<|im_start|>assistant\n<think>\n"), the generated ids start inside it; such a turn renders as
// header "<|im_start|>assistant\n" | body "<think>\n" + reasoning ... so the tracker splices the
// call's whole generation prompt + generated ids over header and body (the "<think>\n" stays
// prompt). Note that Qwen3 re-renders an earlier assistant turn without its <think> block once a
// later user query exists: the rendered history then differs from what was generated, and the
// caller must decide (e.g. keep the generated ids).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/messages.h"
#include "text/tokenizer.h"

namespace ajet::text {

enum class ChatFamily { kQwen3, kQwen3Thinking, kQwen2_5, kChatml };

// "qwen3", "qwen3-thinking", "qwen2.5", "chatml".
std::string_view family_name(ChatFamily family);
std::optional<ChatFamily> family_from_name(std::string_view name);

struct TemplateDetection {
  ChatFamily family = ChatFamily::kQwen3;
  bool verified = false;  // byte-identical to a template the tests render with a real Jinja engine
};

// Throws Error(kInvalidArgument) for an empty or unrecognised template, saying what was looked for.
TemplateDetection detect_chat_family(std::string_view jinja_source);

// The chat template of a model directory: tokenizer_config.json "chat_template" (a string, or a
// list of {name, template} from which "default" is taken), else chat_template.jinja. Throws naming
// the file when there is none.
std::string load_chat_template(const std::filesystem::path& model_dir);

struct RenderOptions {
  bool add_generation_prompt = false;
  // Jinja variable `enable_thinking`; only qwen3 looks at it (false: empty think block in the
  // generation prompt). nullopt = undefined, the template's default. qwen3-thinking has no such
  // switch: its generation prompt always opens the think block.
  std::optional<bool> enable_thinking{};
};

enum class SpanKind { kPreamble, kMessage, kGenerationPrompt };

// Byte offsets into RenderedChat::text: header [begin, body_begin), body [body_begin, body_end),
// footer [body_end, end).
struct ChatSpan {
  SpanKind kind = SpanKind::kMessage;
  int message_index = -1;  // index into ChatRequest::messages; -1 for preamble / generation prompt
  size_t begin = 0;
  size_t body_begin = 0;
  size_t body_end = 0;
  size_t end = 0;
};

struct RenderedChat {
  std::string text{};
  std::vector<ChatSpan> spans{};  // tile `text` in order

  std::string_view header(const ChatSpan& s) const { return view(s.begin, s.body_begin); }
  std::string_view body(const ChatSpan& s) const { return view(s.body_begin, s.body_end); }
  std::string_view footer(const ChatSpan& s) const { return view(s.body_end, s.end); }
  std::string_view span_text(const ChatSpan& s) const { return view(s.begin, s.end); }
  // The span of message `index`, or nullptr.
  const ChatSpan* message_span(int index) const;

 private:
  std::string_view view(size_t b, size_t e) const {
    return std::string_view(text).substr(b, e - b);
  }
};

// Renders `request` as `family`'s template does. Throws Error(kInvalidArgument) for what the
// template cannot express (tools with plain ChatML).
RenderedChat render_chat(ChatFamily family, const ChatRequest& request,
                         const RenderOptions& options = {});

// Token indices into TokenizedChat::ids, same layout as ChatSpan.
struct TokenSpan {
  SpanKind kind = SpanKind::kMessage;
  int message_index = -1;
  size_t begin = 0;
  size_t body_begin = 0;
  size_t body_end = 0;
  size_t end = 0;
  // All four byte boundaries fall between tokens. When false, a token straddles a boundary (e.g. a
  // body starting with "\n" merges with the header's "\n") and belongs to the part it starts in.
  bool exact = true;
};

struct TokenizedChat {
  std::vector<TokenId> ids{};      // equal to tokenizer.encode(rendered.text)
  std::vector<TokenSpan> spans{};  // one per ChatSpan, tiling `ids`
};

// Tokenises the rendered text piece by piece, cutting only where a special token (<|im_start|>,
// <|im_end|>, ...) begins or ends at a span boundary: added tokens are matched before the
// pre-tokenizer runs, so the concatenated ids equal encoding the whole text (the tests prove it),
// while each piece can be mapped to its spans.
TokenizedChat tokenize_chat(const Tokenizer& tokenizer, const RenderedChat& rendered);

}  // namespace ajet::text
