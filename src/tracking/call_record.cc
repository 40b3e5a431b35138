#include "tracking/call_record.h"

#include <algorithm>
#include <unordered_map>

#include "common/error.h"
#include "common/json.h"
#include "common/log.h"

namespace ajet::tracking {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kRepetition: return "repetition";
    case FinishReason::kLowEntropy: return "low_entropy";
    case FinishReason::kGarbage: return "garbage";
    case FinishReason::kLanguageSwitch: return "language_switch";
  }
  return "stop";
}

bool is_madness(FinishReason reason) {
  return reason != FinishReason::kStop && reason != FinishReason::kLength &&
         reason != FinishReason::kAbort;
}

FinishReason finish_reason_from_name(std::string_view name) {
  for (FinishReason r :
       {FinishReason::kLength, FinishReason::kAbort, FinishReason::kRepetition,
        FinishReason::kLowEntropy, FinishReason::kGarbage, FinishReason::kLanguageSwitch}) {
    if (name == finish_reason_name(r)) return r;
  }
  return FinishReason::kStop;
}

std::string_view render_note_kind_name(RenderNote::Kind kind) {
  switch (kind) {
    case RenderNote::Kind::kSpliced: return "spliced";
    case RenderNote::Kind::kNoMatch: return "no_match";
    case RenderNote::Kind::kRewritten: return "rewritten_by_template";
    case RenderNote::Kind::kKeptReasoning: return "kept_generated_reasoning";
    case RenderNote::Kind::kFooterMismatch: return "footer_mismatch";
    case RenderNote::Kind::kSplicingDisabled: return "splicing_disabled";
  }
  return "unknown";
}

void validate_call(const CallRecord& call) {
  const std::string where =
      "call " + std::to_string(call.call_index) + " of episode " + call.episode_uuid;
  const size_t n = call.completion_ids.size();
  if (call.logprobs.size() != n) {
    invalid_argument(where + ": logprobs has " + std::to_string(call.logprobs.size()) +
                     " values for " + std::to_string(n) + " completion tokens");
  }
  if (call.policy_versions.size() != n) {
    invalid_argument(where + ": policy_versions has " +
                     std::to_string(call.policy_versions.size()) + " values for " +
                     std::to_string(n) + " completion tokens");
  }
  if (!call.raw_logprobs.empty() && call.raw_logprobs.size() != n) {
    invalid_argument(where + ": raw_logprobs has " + std::to_string(call.raw_logprobs.size()) +
                     " values for " + std::to_string(n) + " completion tokens");
  }
  const auto prompt = static_cast<int64_t>(call.prompt_ids.size());
  if (call.generation_prompt_begin < 0 || call.generation_prompt_begin > prompt) {
    invalid_argument(where + ": generation_prompt_begin " +
                     std::to_string(call.generation_prompt_begin) + " is outside the prompt (" +
                     std::to_string(prompt) + " tokens)");
  }
  for (size_t i = 0; i < call.message_spans.size(); ++i) {
    const MessageTokens& s = call.message_spans[i];
    if (s.begin < 0 || s.begin > s.end || s.end > prompt) {
      invalid_argument(where + ": message_spans[" + std::to_string(i) + "] = [" +
                       std::to_string(s.begin) + ", " + std::to_string(s.end) +
                       ") is outside the prompt (" + std::to_string(prompt) + " tokens)");
    }
  }
}

void derive_completion_fields(CallRecord& call, const ChatFormat& format) {
  call.ended_with_end_token =
      !call.completion_ids.empty() && call.completion_ids.back() == format.end_of_turn;
  std::span<const TokenId> body(call.completion_ids);
  if (call.ended_with_end_token) body = body.first(body.size() - 1);
  call.completion_text = format.tok().decode(body);
}

std::string generation_prompt_tail(const CallRecord& call, const ChatFormat& format) {
  std::span<const TokenId> ids(call.prompt_ids);
  std::string text =
      format.tok().decode(ids.subspan(static_cast<size_t>(call.generation_prompt_begin)));
  if (text.rfind(format.assistant_header, 0) == 0) text.erase(0, format.assistant_header.size());
  return text;
}

store::CallRow to_call_row(const CallRecord& call) {
  store::CallRow row;
  row.episode_uuid = call.episode_uuid;
  row.agent_name = call.agent_name;
  row.adapter = call.adapter;
  row.call_index = call.call_index;
  row.request_json = call.request_json;
  row.response_json = call.response_json;
  row.prompt_ids = call.prompt_ids;
  for (const MessageTokens& s : call.message_spans) row.message_spans.push_back({s.begin, s.end});
  row.completion_ids = call.completion_ids;
  row.logprobs = call.logprobs;
  row.raw_logprobs = call.raw_logprobs;
  row.policy_versions = call.policy_versions;
  row.finish_reason = std::string(finish_reason_name(call.finish_reason));
  row.latency_ms = call.latency_ms;
  row.started_at = call.started_at;
  row.finished_at = call.finished_at;
  return row;
}

namespace {

// The text of choice `choice` of a stored answer (chat message content or completion text).
std::string content_from_response(const std::string& response_json, size_t choice) {
  if (response_json.empty()) return "";
  std::optional<Json> j = try_parse_json(response_json);
  if (!j || !j->is_object()) return "";
  auto choices = j->find("choices");
  if (choices == j->end() || !choices->is_array() || choice >= choices->size()) return "";
  const Json& c = (*choices)[choice];
  if (c.contains("message") && c["message"].is_object() && c["message"].contains("content") &&
      c["message"]["content"].is_string()) {
    return c["message"]["content"].get<std::string>();
  }
  if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
  return "";
}

text::ChatRequest stored_request(const store::CallRow& holder, int64_t call_index) {
  if (holder.request_json.empty()) return {};
  try {
    return text::parse_chat_request(holder.request_json,
                                    "stored request of call " + std::to_string(call_index));
  } catch (const Error& e) {
    log().warn("episode {} call {}: {}", holder.episode_uuid, call_index, e.what());
  }
  return {};
}

// `holder`: the row with the bodies (the row itself, another row, or null when the reference is
// dangling); `parsed`: its request already parsed (null: parse it here).
CallRecord record_of_row(const store::CallRow& row, const ChatFormat* format,
                         const store::CallRow* holder, const text::ChatRequest* parsed) {
  CallRecord c;
  c.episode_uuid = row.episode_uuid;
  c.agent_name = row.agent_name;
  c.adapter = row.adapter;
  c.call_index = row.call_index;
  size_t choice = 0;
  if (holder == &row) {
    c.request_json = row.request_json;
    c.response_json = row.response_json;
  } else if (holder == nullptr) {
    log().warn("episode {} call {}: its bodies are on call {}, which is not stored",
               row.episode_uuid, row.call_index, *row.bodies_from);
  } else {
    choice = size_t(std::max<int64_t>(0, row.call_index - *row.bodies_from));
  }
  if (holder != nullptr)
    c.request = parsed != nullptr ? *parsed : stored_request(*holder, row.call_index);
  c.prompt_ids = row.prompt_ids;
  int32_t last_end = 0;
  for (const store::MessageSpan& s : row.message_spans) {
    c.message_spans.push_back({s.begin, s.end, -1});
    last_end = std::max(last_end, s.end);
  }
  c.generation_prompt_begin =
      std::min<int32_t>(last_end, static_cast<int32_t>(row.prompt_ids.size()));
  c.completion_ids = row.completion_ids;
  c.logprobs = row.logprobs;
  c.raw_logprobs = row.raw_logprobs;
  c.policy_versions = row.policy_versions;
  c.finish_reason = finish_reason_from_name(row.finish_reason);
  c.latency_ms = row.latency_ms;
  c.started_at = row.started_at;
  c.finished_at = row.finished_at;
  if (format != nullptr) {
    derive_completion_fields(c, *format);
  } else {
    c.ended_with_end_token = c.finish_reason == FinishReason::kStop && !c.completion_ids.empty();
    c.completion_text =
        holder != nullptr ? content_from_response(holder->response_json, choice) : "";
  }
  return c;
}

}  // namespace

CallRecord call_from_row(const store::CallRow& row, const ChatFormat* format,
                         const store::CallRow* bodies) {
  return record_of_row(row, format, row.bodies_from ? bodies : &row, nullptr);
}

std::vector<CallRecord> calls_from_rows(std::span<const store::CallRow> rows,
                                        const ChatFormat* format) {
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rows[a].call_index < rows[b].call_index; });
  std::vector<CallRecord> out;
  out.reserve(rows.size());
  // call_index -> (row, record) of the rows that hold their own bodies: a request's first choice
  // comes before its other choices, whose records copy its parsed request instead of parsing again.
  std::unordered_map<int64_t, std::pair<size_t, size_t>> holders;
  for (size_t i : order) {
    const store::CallRow& row = rows[i];
    if (!row.bodies_from) {
      out.push_back(record_of_row(row, format, &row, nullptr));
      holders.emplace(row.call_index, std::pair{i, out.size() - 1});
      continue;
    }
    auto it = holders.find(*row.bodies_from);
    if (it == holders.end()) {
      out.push_back(record_of_row(row, format, nullptr, nullptr));
    } else {
      CallRecord c =
          record_of_row(row, format, &rows[it->second.first], &out[it->second.second].request);
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace ajet::tracking
