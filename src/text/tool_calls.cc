#include "text/tool_calls.h"

#include "common/encoding.h"
#include "common/error.h"
#include "common/json.h"

namespace ajet::text {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view strip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string_view json_kind(const OrderedJson& v) {
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  return "object";
}

// One <tool_call> block's inner text: a ToolCall, or the issue that keeps it as text.
std::optional<ToolCall> parse_block(std::string_view inner, size_t at, std::string* problem,
                                    ParseIssue::Kind* kind) {
  const std::string where = "tool call at byte " + std::to_string(at);
  OrderedJson j;
  try {
    j = parse_ordered_json(trim(inner), where);
  } catch (const Error& e) {
    *kind = ParseIssue::Kind::kBadJson;
    *problem = e.what();
    return std::nullopt;
  }
  if (!j.is_object()) {
    *kind = ParseIssue::Kind::kNotAnObject;
    *problem = where + " is a JSON " + std::string(json_kind(j)) + ", not an object";
    return std::nullopt;
  }
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    *kind = ParseIssue::Kind::kMissingName;
    *problem = where + " has no non-empty string \"name\"";
    return std::nullopt;
  }
  auto args = j.find("arguments");
  if (args == j.end() || !args->is_object()) {
    *kind = ParseIssue::Kind::kArgumentsNotObject;
    *problem = where + " (" + name->get<std::string>() +
               "): \"arguments\" must be an object, got " +
               (args == j.end() ? std::string("nothing") : std::string(json_kind(*args)));
    return std::nullopt;
  }
  ToolCall call;
  call.name = name->get<std::string>();
  call.arguments = template_json(*args);
  return call;
}

void flag_stray_closes(std::string_view region, size_t region_offset,
                       std::vector<ParseIssue>& issues) {
  for (size_t p = region.find(kClose); p != std::string_view::npos;
       p = region.find(kClose, p + kClose.size())) {
    const size_t at = region_offset + p;
    issues.push_back({ParseIssue::Kind::kStrayClose,
                      "</tool_call> at byte " + std::to_string(at) + " has no opening <tool_call>",
                      at, at + kClose.size()});
  }
}

}  // namespace

std::string_view issue_kind_name(ParseIssue::Kind kind) {
  switch (kind) {
    case ParseIssue::Kind::kBadJson: return "bad_json";
    case ParseIssue::Kind::kNotAnObject: return "not_an_object";
    case ParseIssue::Kind::kMissingName: return "missing_name";
    case ParseIssue::Kind::kArgumentsNotObject: return "arguments_not_object";
    case ParseIssue::Kind::kUnterminated: return "unterminated";
    case ParseIssue::Kind::kStrayClose: return "stray_close";
    case ParseIssue::Kind::kUnterminatedThink: return "unterminated_think";
  }
  return "unknown";
}

std::string random_tool_call_id() { return "call_" + hex_encode(random_bytes(12)); }

ChatMessage ParsedOutput::to_message() const {
  ChatMessage m;
  m.role = Role::kAssistant;
  m.content = content;
  m.content_was_null = content.empty() && !tool_calls.empty();
  m.reasoning_content = reasoning_content;
  m.tool_calls = tool_calls;
  return m;
}

ParsedOutput parse_model_output(std::string_view text, const ParseOptions& options) {
  ParsedOutput out;
  const ToolCallIdSource next_id =
      options.id_source ? options.id_source : ToolCallIdSource(random_tool_call_id);

  // Reasoning: everything before the first </think> (minus an opening <think>), as the Qwen3
  // template splits it; the rest is the body.
  std::string_view body = text;
  size_t body_offset = 0;
  if (options.parse_reasoning) {
    const size_t close = text.find(kThinkClose);
    if (close != std::string_view::npos) {
      std::string_view r = text.substr(0, close);
      std::string_view lead = r;
      while (!lead.empty() && is_space(lead.front())) lead.remove_prefix(1);
      if (lead.substr(0, kThinkOpen.size()) == kThinkOpen) r = lead.substr(kThinkOpen.size());
      out.reasoning_content = std::string(strip_newlines(r));
      body_offset = close + kThinkClose.size();
      while (body_offset < text.size() && text[body_offset] == '\n') ++body_offset;
      body = text.substr(body_offset);
    } else {
      const size_t lead = text.find_first_not_of(" \t\r\n");
      if (lead != std::string_view::npos && text.substr(lead, kThinkOpen.size()) == kThinkOpen) {
        out.issues.push_back(
            {ParseIssue::Kind::kUnterminatedThink,
             "<think> at byte " + std::to_string(lead) + " is never closed; kept as content", lead,
             text.size()});
      }
    }
  }

  // Tool-call blocks. `segments` are the texts between well-formed blocks (malformed ones inside).
  std::vector<std::string_view> segments;
  size_t seg_start = 0;
  size_t pos = 0;
  while (true) {
    const size_t open = body.find(kOpen, pos);
    if (open == std::string_view::npos) {
      flag_stray_closes(body.substr(pos), body_offset + pos, out.issues);
      segments.push_back(body.substr(seg_start));
      break;
    }
    flag_stray_closes(body.substr(pos, open - pos), body_offset + pos, out.issues);
    const size_t inner_start = open + kOpen.size();
    const size_t close = body.find(kClose, inner_start);
    const size_t next_open = body.find(kOpen, inner_start);
    if (close == std::string_view::npos ||
        (next_open != std::string_view::npos && next_open < close)) {
      const size_t end = next_open != std::string_view::npos ? next_open : body.size();
      out.issues.push_back({ParseIssue::Kind::kUnterminated,
                            "<tool_call> at byte " + std::to_string(body_offset + open) +
                                " has no closing </tool_call>",
                            body_offset + open, body_offset + end});
      pos = end;
      continue;
    }
    const size_t block_end = close + kClose.size();
    std::string problem;
    ParseIssue::Kind kind{};
    auto call = parse_block(body.substr(inner_start, close - inner_start), body_offset + open,
                            &problem, &kind);
    if (call) {
      call->id = next_id();
      out.tool_calls.push_back(std::move(*call));
      segments.push_back(body.substr(seg_start, open - seg_start));
      seg_start = block_end;
    } else {
      out.issues.push_back({kind, problem, body_offset + open, body_offset + block_end});
    }
    pos = block_end;
  }

  if (out.tool_calls.empty()) {
    out.content = std::string(body);
    return out;
  }
  out.content = std::string(rtrim(segments.front()));
  for (size_t i = 1; i < segments.size(); ++i) {
    std::string_view t = trim(segments[i]);
    if (t.empty()) continue;
    if (!out.content.empty()) out.content += '\n';
    out.content += t;
  }
  return out;
}

size_t streamable_content_length(std::string_view text) {
  const size_t open = text.find(kOpen);
  if (open != std::string_view::npos) return open;
  for (size_t k = std::min(text.size(), kOpen.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == kOpen.substr(0, k)) return text.size() - k;
  }
  return text.size();
}

}  // namespace ajet::text
