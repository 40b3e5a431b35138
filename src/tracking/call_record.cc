#include "tracking/call_record.h"

#include "common/error.h"
#include "common/json.h"
#include "common/log.h"

namespace ajet::tracking {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "stop";
}

FinishReason finish_reason_from_name(std::string_view name) {
  if (name == "length") return FinishReason::kLength;
  if (name == "abort") return FinishReason::kAbort;
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
  const std::string where = "call " + std::to_string(call.call_index) + " of episode " + call.episode_uuid;
  const size_t n = call.completion_ids.size();
  if (call.logprobs.size() != n) {
    invalid_argument(where + ": logprobs has " + std::to_string(call.logprobs.size()) + " values for " +
                     std::to_string(n) + " completion tokens");
  }
  if (call.policy_versions.size() != n) {
    invalid_argument(where + ": policy_versions has " + std::to_string(call.policy_versions.size()) +
                     " values for " + std::to_string(n) + " completion tokens");
  }
  if (!call.raw_logprobs.empty() && call.raw_logprobs.size() != n) {
    invalid_argument(where + ": raw_logprobs has " + std::to_string(call.raw_logprobs.size()) + " values for " +
                     std::to_string(n) + " completion tokens");
  }
  const auto prompt = static_cast<int64_t>(call.prompt_ids.size());
  if (call.generation_prompt_begin < 0 || call.generation_prompt_begin > prompt) {
    invalid_argument(where + ": generation_prompt_begin " + std::to_string(call.generation_prompt_begin) +
                     " is outside the prompt (" + std::to_string(prompt) + " tokens)");
  }
  for (size_t i = 0; i < call.message_spans.size(); ++i) {
    const MessageTokens& s = call.message_spans[i];
    if (s.begin < 0 || s.begin > s.end || s.end > prompt) {
      invalid_argument(where + ": message_spans[" + std::to_string(i) + "] = [" + std::to_string(s.begin) + ", " +
                       std::to_string(s.end) + ") is outside the prompt (" + std::to_string(prompt) + " tokens)");
    }
  }
}

void derive_completion_fields(CallRecord& call, const ChatFormat& format) {
  call.ended_with_end_token = !call.completion_ids.empty() && call.completion_ids.back() == format.end_of_turn;
  std::span<const TokenId> body(call.completion_ids);
  if (call.ended_with_end_token) body = body.first(body.size() - 1);
  call.completion_text = format.tok().decode(body);
}

std::string generation_prompt_tail(const CallRecord& call, const ChatFormat& format) {
  std::span<const TokenId> ids(call.prompt_ids);
  std::string text = format.tok().decode(ids.subspan(static_cast<size_t>(call.generation_prompt_begin)));
  if (text.rfind(format.assistant_header, 0) == 0) text.erase(0, format.assistant_header.size());
  return text;
}

store::CallRow to_call_row(const CallRecord& call) {
  store::CallRow row;
  row.episode_uuid = call.episode_uuid;
  row.agent_name = call.agent_name;
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

std::string content_from_response(const std::string& response_json) {
  if (response_json.empty()) return "";
  std::optional<Json> parsed = try_parse_json(response_json);
  if (!parsed || !parsed->is_object()) return "";
  const Json& j = *parsed;
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return "";
  const Json& c = (*choices)[0];
  if (c.contains("message") && c["message"].is_object() && c["message"].contains("content") &&
      c["message"]["content"].is_string()) {
    return c["message"]["content"].get<std::string>();
  }
  if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
  return "";
}

}  // namespace

CallRecord call_from_row(const store::CallRow& row, const ChatFormat* format) {
  CallRecord c;
  c.episode_uuid = row.episode_uuid;
  c.agent_name = row.agent_name;
  c.call_index = row.call_index;
  c.request_json = row.request_json;
  c.response_json = row.response_json;
  if (!row.request_json.empty()) {
    try {
      c.request = text::parse_chat_request(row.request_json, "stored request of call " + std::to_string(row.call_index));
    } catch (const Error& e) {
      log().warn("episode {} call {}: {}", row.episode_uuid, row.call_index, e.what());
    }
  }
  c.prompt_ids = row.prompt_ids;
  int32_t last_end = 0;
  for (const store::MessageSpan& s : row.message_spans) {
    c.message_spans.push_back({s.begin, s.end, -1});
    last_end = std::max(last_end, s.end);
  }
  c.generation_prompt_begin = std::min<int32_t>(last_end, static_cast<int32_t>(row.prompt_ids.size()));
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
    c.completion_text = content_from_response(row.response_json);
  }
  return c;
}

}  // namespace ajet::tracking
