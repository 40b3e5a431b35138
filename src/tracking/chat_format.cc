#include "tracking/chat_format.h"

#include "common/error.h"
#include "common/json.h"

namespace ajet::tracking {

namespace {

constexpr std::string_view kEndOfTurnCandidates[] = {"<|im_end|>"};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

// Arguments as a JSON value with sorted keys and no spacing, so {"a": 1, "b": 2} == {"b":2,"a":1};
// text that is not JSON stays text (prefixed so it never equals a JSON value). The parse is the
// bounded one: an arguments string nested 70,000 levels deep used to be built here and overflow the
// stack in dump() (issue 38); past the limit it compares as text.
std::string canonical_arguments(const std::string& arguments) {
  std::optional<Json> j = try_parse_json(arguments);
  if (!j) return "\x01" + arguments;
  return j->dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string make_key(std::string_view content, const std::vector<text::ToolCall>& calls) {
  std::string key = trim(content);
  for (const text::ToolCall& c : calls) {
    key += '\x1e';
    key += c.name;
    key += '\x1f';
    key += canonical_arguments(c.arguments);
  }
  return key;
}

text::ParseOptions deterministic_parse() {
  text::ParseOptions o;
  o.parse_reasoning = true;
  o.id_source = [] { return std::string(); };
  return o;
}

}  // namespace

ChatFormat ChatFormat::create(const text::Tokenizer& tokenizer, text::ChatFamily family) {
  ChatFormat f;
  f.tokenizer = &tokenizer;
  f.family = family;
  text::ChatRequest probe;
  probe.messages.resize(2);
  probe.messages[0].role = text::Role::kUser;
  probe.messages[0].content = "x";
  probe.messages[1].role = text::Role::kAssistant;
  probe.messages[1].content = "y";
  const text::RenderedChat rc = text::render_chat(family, probe);
  const text::ChatSpan* span = rc.message_span(1);
  if (span == nullptr)
    invalid_argument("chat format probe: the template rendered no span for an assistant message");
  f.assistant_header = std::string(rc.header(*span));
  const std::string_view footer = rc.footer(*span);
  for (std::string_view candidate : kEndOfTurnCandidates) {
    if (footer.substr(0, candidate.size()) != candidate) continue;
    auto id = tokenizer.token_to_id(candidate);
    if (!id) {
      invalid_argument("chat format: the " + std::string(text::family_name(family)) +
                       " template ends assistant turns with " + std::string(candidate) +
                       ", which the tokenizer has no token for");
    }
    f.end_of_turn = *id;
    f.end_of_turn_text = std::string(candidate);
    f.footer_after_end = tokenizer.encode(footer.substr(candidate.size()));
    return f;
  }
  invalid_argument(
      "chat format: the " + std::string(text::family_name(family)) +
      " template's assistant footer does not start with a known end-of-turn token (got '" +
      std::string(footer) + "')");
}

ChatFormat ChatFormat::from_tokenizer(const text::Tokenizer& tokenizer) {
  const std::string& source = tokenizer.config().chat_template;
  if (source.empty())
    invalid_argument(
        "chat format: the tokenizer has no chat template (tokenizer_config.json chat_template)");
  return create(tokenizer, text::detect_chat_family(source).family);
}

bool opens_think_block(std::string_view generation_prompt_tail) {
  const size_t open = generation_prompt_tail.rfind("<think>");
  return open != std::string_view::npos &&
         generation_prompt_tail.find("</think>", open) == std::string_view::npos;
}

text::ParsedOutput parse_generated(std::string_view generation_prompt_tail,
                                   std::string_view generated_text) {
  if (opens_think_block(generation_prompt_tail) &&
      generated_text.find("</think>") == std::string_view::npos) {
    // Cut (max_tokens, abort) inside the reasoning the prompt opened: all of it is reasoning, and
    // the prompt's "<think>" must not surface as content the model never wrote.
    text::ParsedOutput out;
    std::string_view r = generated_text;
    while (!r.empty() && r.front() == '\n') r.remove_prefix(1);
    while (!r.empty() && r.back() == '\n') r.remove_suffix(1);
    out.reasoning_content = std::string(r);
    return out;
  }
  std::string text(generation_prompt_tail);
  text += generated_text;
  return text::parse_model_output(text, deterministic_parse());
}

TurnSignature generated_signature(std::string_view generation_prompt_tail,
                                  std::string_view generated_text) {
  text::ParsedOutput p = parse_generated(generation_prompt_tail, generated_text);
  return {make_key(p.content, p.tool_calls), trim(p.reasoning_content.value_or(""))};
}

TurnSignature message_signature(const text::ChatMessage& message) {
  TurnSignature sig;
  std::vector<text::ToolCall> calls;
  std::string content = message.content;
  std::string reasoning = message.reasoning_content.value_or("");
  if (content.find("<tool_call>") != std::string::npos ||
      content.find("</think>") != std::string::npos) {
    text::ParsedOutput p = text::parse_model_output(content, deterministic_parse());
    content = p.content;
    calls = p.tool_calls;
    if (p.reasoning_content && reasoning.empty()) reasoning = *p.reasoning_content;
  }
  calls.insert(calls.end(), message.tool_calls.begin(), message.tool_calls.end());
  sig.key = make_key(content, calls);
  sig.reasoning = trim(reasoning);
  return sig;
}

std::string comparable_content(const text::ChatMessage& message) {
  const std::string& content = message.content;
  if (content.find("<tool_call>") != std::string::npos ||
      content.find("</think>") != std::string::npos) {
    return trim(text::parse_model_output(content, deterministic_parse()).content);
  }
  return trim(content);
}

}  // namespace ajet::tracking
