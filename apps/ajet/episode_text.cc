// Text renderings of the episode JSON for `ajet episode list` / `ajet episode show`
// (episode_text.h).
#include "episode_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ajet::cli {

namespace {

// ---- small readers that tolerate a missing or null field (an older front may not send it) ----

std::string text_of(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

std::optional<double> number_of(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

std::optional<int64_t> int_of(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return std::nullopt;
  return j[key].get<int64_t>();
}

const Json& array_of(const Json& j, const char* key) {
  static const Json empty = Json::array();
  if (!j.is_object() || !j.contains(key) || !j[key].is_array()) return empty;
  return j[key];
}

const Json& object_of(const Json& j, const char* key) {
  static const Json empty = Json::object();
  if (!j.is_object() || !j.contains(key) || !j[key].is_object()) return empty;
  return j[key];
}

std::string number_format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string reward_text(const std::optional<double>& reward) {
  return reward ? number_format("%.4g", *reward) : "-";
}

// "12s", "5m", "3h", "2d": how long ago.
std::string age_text(double seconds) {
  if (!(seconds >= 0)) return "0s";
  if (seconds < 60) return number_format("%.0fs", std::floor(seconds));
  if (seconds < 3600) return number_format("%.0fm", std::floor(seconds / 60));
  if (seconds < 86400) return number_format("%.0fh", std::floor(seconds / 3600));
  return number_format("%.0fd", std::floor(seconds / 86400));
}

std::string utc_time(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// Display width in code points (UTF-8 continuation bytes take no column).
size_t width_of(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string clip(const std::string& s, size_t max) {
  if (width_of(s) <= max) return s;
  std::string out;
  size_t w = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80 && ++w > max - 1) break;
    out.push_back(s[i]);
  }
  return out + "~";
}

std::string indent_lines(const std::string& text, const std::string& indent) {
  std::string out;
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += indent;
  }
  return out;
}

// ---- the table ----

struct Column {
  const char* title;
  bool right;  // numbers align right
};

}  // namespace

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::string episode_table(const Json& page, double now, bool full_uuids) {
  const std::vector<Column> columns = {{"UUID", false}, {"STEP", true},       {"TYPE", false},
                                       {"TASK", false}, {"STATUS", false},    {"REWARD", true},
                                       {"CALLS", true}, {"TOKENS p/g", true}, {"AGE", true}};
  std::vector<std::vector<std::string>> rows;
  for (const Json& e : array_of(page, "episodes")) {
    const std::string uuid = printable(text_of(e, "uuid"));
    const std::optional<int64_t> step = int_of(e, "global_step");
    rows.push_back({full_uuids ? uuid : uuid.substr(0, 12), step ? std::to_string(*step) : "-",
                    printable(text_of(e, "episode_type")),
                    clip(printable(text_of(e, "task_id")), 28), printable(text_of(e, "status")),
                    reward_text(number_of(e, "reward")),
                    std::to_string(int_of(e, "llm_calls").value_or(0)),
                    std::to_string(int_of(e, "prompt_tokens").value_or(0)) + "/" +
                        std::to_string(int_of(e, "completion_tokens").value_or(0)),
                    age_text(now - number_of(e, "claimed_at").value_or(now))});
  }
  std::vector<size_t> widths;
  for (const Column& c : columns) widths.push_back(width_of(c.title));
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], width_of(row[i]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(widths[i] - width_of(cells[i]), ' ');
      if (i > 0) out += "  ";
      out +=
          columns[i].right ? pad + cells[i] : (i + 1 == cells.size() ? cells[i] : cells[i] + pad);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::vector<std::string> titles;
  for (const Column& c : columns) titles.push_back(c.title);
  std::string out = line(titles);
  for (const auto& row : rows) out += line(row);

  const int64_t total = int_of(page, "total").value_or(0);
  const bool lower_bound = page.value("total_is_lower_bound", false);
  out += std::to_string(rows.size()) + " of " + std::to_string(total) + (lower_bound ? "+" : "") +
         " episode" + (total == 1 && !lower_bound ? "" : "s") + " (newest first)\n";
  if (const std::string next = text_of(page, "next_cursor"); !next.empty()) {
    out += "next page: add --cursor " + next + "\n";
  }
  return out;
}

namespace {

// ---- one episode ----

// An OpenAI message's content as text: a string, or the text of its parts ([image] etc. for
// others).
std::string content_text(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return "";
  std::string out;
  for (const Json& part : content) {
    const std::string type = text_of(part, "type");
    out += type == "text" ? text_of(part, "text")
                          : "[" + (type.empty() ? std::string("part") : type) + "]";
  }
  return out;
}

std::string message_text(const Json& m) {
  const std::string role = text_of(m, "role");
  std::string label = role.empty() ? "?" : role;
  if (role == "tool") {
    const std::string id = text_of(m, "tool_call_id"), name = text_of(m, "name");
    label = "tool result" + (name.empty() ? "" : " " + name) + (id.empty() ? "" : " [" + id + "]");
  }
  std::string out =
      "  " + label + ": " +
      indent_lines(
          printable(content_text(m.is_object() && m.contains("content") ? m["content"] : Json())),
          "    ") +
      "\n";
  if (const std::string thinking = text_of(m, "reasoning_content"); !thinking.empty()) {
    out += "    (thinking) " + indent_lines(printable(thinking), "      ") + "\n";
  }
  for (const Json& call : array_of(m, "tool_calls")) {
    const Json& fn = object_of(call, "function");
    std::string arguments = fn.contains("arguments")
                                ? (fn["arguments"].is_string() ? fn["arguments"].get<std::string>()
                                                               : fn["arguments"].dump())
                                : "";
    const std::string id = text_of(call, "id");
    out += "    -> tool call " + printable(text_of(fn, "name")) + "(" +
           indent_lines(printable(arguments), "      ") + ")" +
           (id.empty() ? "" : " [" + printable(id) + "]") + "\n";
  }
  return out;
}

// How many leading messages `now` shares with `before`.
size_t shared_prefix(const Json& before, const Json& now) {
  size_t n = 0;
  while (n < before.size() && n < now.size() && before[n] == now[n]) ++n;
  return n;
}

std::string call_text(const Json& call, const Json* previous_of_agent) {
  const int64_t index = int_of(call, "call_index").value_or(0);
  const Json& messages = array_of(object_of(call, "request"), "messages");
  std::string out =
      "-- call " + std::to_string(index) + " . agent " + printable(text_of(call, "agent_name")) +
      " . " + text_of(call, "finish_reason") + " . " +
      number_format("%.0f ms", number_of(call, "latency_ms").value_or(0)) + " . " +
      std::to_string(array_of(call, "prompt_ids").size()) + " prompt + " +
      std::to_string(array_of(call, "completion_ids").size()) + " completion tokens\n";
  size_t skip = 0;
  if (previous_of_agent != nullptr) {
    skip = shared_prefix(array_of(object_of(*previous_of_agent, "request"), "messages"), messages);
    if (skip > 0) {
      out += "  (" + std::to_string(skip) + " message" + (skip == 1 ? "" : "s") + " as in call " +
             std::to_string(int_of(*previous_of_agent, "call_index").value_or(0)) + ")\n";
    }
  }
  for (size_t i = skip; i < messages.size(); ++i) out += message_text(messages[i]);
  std::string completion = text_of(call, "completion_text");
  if (completion.empty()) {
    for (const Json& p : array_of(call, "completion_pieces"))
      completion += p.is_string() ? p.get<std::string>() : "";
  }
  if (completion.empty() &&
      !array_of(call, "completion_ids").empty()) {  // no text kept, no tokenizer
    std::string ids;
    for (const Json& id : array_of(call, "completion_ids"))
      ids += (ids.empty() ? "" : " ") + id.dump();
    out += "  => completion (token ids): " + ids + "\n";
  } else {
    out += "  => completion: " + indent_lines(printable(completion), "    ") + "\n";
  }
  return out;
}

// Token classes: what the sample trains on, and how sure the policy was of a generated token.
struct TokenLook {
  bool trained = false;
  bool low = false;  // a generated token (policy version >= 0) with logprob < kLowLogprob
  bool operator==(const TokenLook&) const = default;
};

std::string open_look(const TokenLook& look, const TextStyle& style) {
  if (!style.color) return look.trained ? "[trained]" : "[masked]";
  // 256-colour blue (33) for trained, orange (208) for masked; SGR 2 (faint) for low logprob.
  return std::string("\x1b[") + (look.low ? "2;" : "") + (look.trained ? "38;5;33m" : "38;5;208m");
}

std::string close_look(const TokenLook& look, const TextStyle& style) {
  if (!style.color) return look.trained ? "[/trained]" : "[/masked]";
  return "\x1b[0m";
}

std::string sample_tokens(const Json& sample, const TextStyle& style) {
  const Json& ids = array_of(sample, "token_ids");
  const Json& mask = array_of(sample, "loss_mask");
  const Json& logprobs = array_of(sample, "logprobs");
  const Json& versions = array_of(sample, "policy_versions");
  const Json& pieces = array_of(sample, "text_pieces");
  const bool have_pieces = pieces.size() == ids.size();
  std::string out;
  std::optional<TokenLook> current;
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenLook look;
    look.trained = i < mask.size() && mask[i].is_number() && mask[i].get<int>() != 0;
    const bool generated =
        i < versions.size() && versions[i].is_number() && versions[i].get<int64_t>() >= 0;
    look.low = style.color && generated && i < logprobs.size() && logprobs[i].is_number() &&
               logprobs[i].get<double>() < kLowLogprob;
    // Without text pieces the ids are separated by spaces, which stay outside the markers.
    const char* separator = !have_pieces && i > 0 ? " " : "";
    if (!current || !(*current == look)) {
      if (current) out += close_look(*current, style);
      out += separator;
      out += open_look(look, style);
      current = look;
    } else {
      out += separator;
    }
    out += have_pieces ? printable(pieces[i].is_string() ? pieces[i].get<std::string>() : "")
                       : ids[i].dump();
  }
  if (current) out += close_look(*current, style);
  return out;
}

std::string legend(const Json& document, const TextStyle& style) {
  std::string out = "tokens: ";
  if (style.color) {
    out += open_look({true, false}, style) + "trained (loss mask 1)" + close_look({}, style) +
           "  " + open_look({false, false}, style) + "masked (loss mask 0)" +
           close_look({}, style) + "  " + open_look({true, true}, style) +
           "dim: generated with p < 0.3" + close_look({}, style);
  } else {
    out += "[trained]...[/trained] loss mask 1, [masked]...[/masked] loss mask 0";
  }
  if (!document.value("tokenizer", false)) out += "  (token ids: no tokenizer for text pieces)";
  return out + "\n";
}

std::string sample_text(const Json& sample, const Json& diagnostics, const TextStyle& style) {
  const int64_t index = int_of(sample, "index").value_or(0);
  std::string calls;
  for (const Json& c : array_of(sample, "calls")) calls += (calls.empty() ? "" : ",") + c.dump();
  std::string out =
      "-- sample " + std::to_string(index) + " . agent " +
      printable(text_of(sample, "agent_name")) + " . calls " + (calls.empty() ? "-" : calls) +
      " . " + std::to_string(int_of(sample, "num_tokens").value_or(0)) + " tokens, " +
      std::to_string(int_of(sample, "num_trained").value_or(0)) + " trained . weight " +
      number_format("%.4g", number_of(sample, "weight").value_or(0)) + " . reward " +
      reward_text(number_of(sample, "reward")) +
      (sample.value("trainable", true) ? "" : " . not trainable") + "\n";
  for (const Json& agent : array_of(diagnostics, "agents")) {
    for (const Json& b : array_of(agent, "branches")) {
      if (int_of(b, "sample") != index) continue;
      out += "  branches from sample " + std::to_string(int_of(b, "from_sample").value_or(0)) +
             " at token " + std::to_string(int_of(b, "position").value_or(0)) + " (" +
             text_of(b, "kind") + "): " + printable(text_of(b, "reason")) + "\n";
    }
  }
  out += sample_tokens(sample, style) + "\n";
  return out;
}

}  // namespace

std::string episode_text(const Json& document, const Json& summary, const TextStyle& style) {
  const Json& d = object_of(document, "diagnostics");
  std::string out = "episode " + printable(text_of(document, "episode_uuid")) + "\n";
  const std::string task = printable(text_of(document, "task_id"));
  std::string line = "  task " + (task.empty() ? std::string("-") : task) + " . " +
                     text_of(document, "episode_type") + " . " + text_of(document, "status") +
                     " . reward " + reward_text(number_of(document, "reward"));
  if (summary.is_object()) {
    if (summary.contains("is_success") && summary["is_success"].is_boolean()) {
      line += std::string(" . success ") + (summary["is_success"].get<bool>() ? "yes" : "no");
    }
    const std::optional<int64_t> step = int_of(summary, "global_step");
    line += " . step " + (step ? std::to_string(*step) : std::string("- (in no batch)"));
  }
  out += line + "\n";
  if (summary.is_object()) {
    std::string times = "  client " + printable(text_of(summary, "client_uuid"));
    if (auto claimed = number_of(summary, "claimed_at")) {
      times += " . claimed " + utc_time(*claimed);
      if (auto ended = number_of(summary, "ended_at"))
        times += " . ended " + number_format("%.1f s later", *ended - *claimed);
    }
    out += times + "\n";
  }
  const size_t calls = array_of(document, "calls").size(),
               samples = array_of(document, "samples").size();
  out += "  " + std::to_string(calls) + (calls == 1 ? " LLM call -> " : " LLM calls -> ") +
         std::to_string(samples) + (samples == 1 ? " sample; " : " samples; ") +
         std::to_string(int_of(d, "tokens_before").value_or(0)) + " tokens before merging, " +
         std::to_string(int_of(d, "tokens_after").value_or(0)) + " after (" +
         number_format("%.2fx", number_of(d, "compression_ratio").value_or(0)) + ", " +
         text_of(d, "compare_level") + " level)\n";

  out += "\nLLM calls\n";
  if (const Json* dropped =
          document.contains("calls_not_retained") ? &document["calls_not_retained"] : nullptr;
      dropped != nullptr && dropped->is_object()) {
    out += "  " + printable(text_of(*dropped, "message")) + "\n";
  }
  std::map<std::string, const Json*> last_of_agent;
  for (const Json& call : array_of(document, "calls")) {
    const std::string agent = text_of(call, "agent_name");
    auto it = last_of_agent.find(agent);
    out += call_text(call, it == last_of_agent.end() ? nullptr : it->second);
    last_of_agent[agent] = &call;
  }

  out += "\nTraining samples\n" + legend(document, style);
  for (const Json& sample : array_of(document, "samples")) out += sample_text(sample, d, style);
  return out;
}

}  // namespace ajet::cli
