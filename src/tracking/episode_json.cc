#include "tracking/episode_json.h"

#include <fmt/format.h>

#include "common/json.h"
#include "text/messages.h"
#include "text/utf8.h"

namespace ajet::tracking {

namespace {

// nlohmann refuses invalid UTF-8 at dump time; text is repaired here so any episode prints.
std::string valid_utf8(std::string_view s) {
  return text::utf8::is_valid(s) ? std::string(s) : text::utf8::repair(s);
}

Json branch_json(const BranchDiagnostic& b) {
  return Json{{"sample", b.sample},
              {"from_sample", b.from_sample},
              {"position", b.position},
              {"kind", b.kind},
              {"reason", b.reason},
              {"call", b.call},
              {"message_index", b.message_index},
              {"part", b.part},
              {"role", b.role},
              {"token", b.token},
              {"other_call", b.other_call},
              {"other_message_index", b.other_message_index},
              {"other_part", b.other_part},
              {"other_role", b.other_role},
              {"other_token", b.other_token}};
}

Json request_json(const CallRecord& c) {
  Json messages = Json::array();
  for (const text::ChatMessage& m : c.request.messages) {
    const std::string dumped =
        text::to_openai_json(m).dump(-1, ' ', false, Json::error_handler_t::replace);
    messages.push_back(parse_json(dumped, "stored message"));
  }
  Json tools = Json::array();
  for (const text::OrderedJson& t : c.request.tools) {
    tools.push_back(
        parse_json(t.dump(-1, ' ', false, Json::error_handler_t::replace), "stored tool"));
  }
  return Json{{"messages", messages}, {"tools", tools}};
}

// The sampling parameters the request itself sent (absent ones are not filled in): what tells an
// eval episode sampled on purpose from one whose agent dropped AJET_SAMPLING and so ran greedy.
Json request_sampling(const CallRecord& c) {
  Json out = Json::object();
  const std::optional<Json> body = try_parse_json(c.request_json);
  if (!body || !body->is_object()) return out;
  for (const char* key : {"temperature", "top_p", "top_k"}) {
    if (body->contains(key) && (*body)[key].is_number()) out[key] = (*body)[key];
  }
  return out;
}

}  // namespace

EpisodeView EpisodeView::from_row(const store::EpisodeRow& row) {
  EpisodeView v;
  v.episode_uuid = row.uuid;
  v.task_id = row.task_id;
  v.status = row.status;
  v.episode_type = row.episode_type;
  v.reward = row.reward;
  return v;
}

std::vector<std::string> text_pieces(const text::Tokenizer& tokenizer,
                                     std::span<const TokenId> ids) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  text::IncrementalDecoder dec(tokenizer);
  for (TokenId id : ids) {
    out.push_back(tokenizer.valid_id(id) ? valid_utf8(dec.push(id))
                                         : std::string(text::utf8::kReplacementUtf8));
  }
  if (!out.empty()) out.back() += dec.flush();
  return out;
}

Json diagnostics_json(const MergeDiagnostics& d) {
  Json agents = Json::array();
  for (const AgentMergeDiagnostics& a : d.agents) {
    Json branches = Json::array();
    for (const BranchDiagnostic& b : a.branches) branches.push_back(branch_json(b));
    agents.push_back(Json{{"agent_name", a.agent_name},
                          {"trainable", a.trainable},
                          {"calls", a.calls},
                          {"samples", a.samples},
                          {"samples_dropped_by_cap", a.samples_dropped_by_cap},
                          {"tokens_before", a.tokens_before},
                          {"tokens_after", a.tokens_after},
                          {"compression_ratio", a.compression_ratio},
                          {"generated_tokens", a.generated_tokens},
                          {"unique_generated_tokens", a.unique_generated_tokens},
                          {"duplicate_generated_tokens", a.duplicate_generated_tokens},
                          {"trained_tokens", a.trained_tokens},
                          {"untrained_generated_tokens", a.untrained_generated_tokens},
                          {"branches", branches}});
  }
  return Json{{"compare_level", std::string(compare_level_name(d.compare_level))},
              {"calls", d.calls},
              {"samples", d.samples},
              {"trainable_samples", d.trainable_samples},
              {"samples_dropped_by_cap", d.samples_dropped_by_cap},
              {"tokens_before", d.tokens_before},
              {"tokens_after", d.tokens_after},
              {"compression_ratio", d.compression_ratio},
              {"agents", agents}};
}

Json episode_json(const EpisodeView& episode, std::span<const CallRecord> calls,
                  const MergedEpisode& merged, const text::Tokenizer* tokenizer) {
  Json j;
  j["version"] = kEpisodeJsonVersion;
  j["episode_uuid"] = episode.episode_uuid;
  j["task_id"] = episode.task_id;
  j["status"] = episode.status;
  j["episode_type"] = episode.episode_type;
  j["reward"] = episode.reward ? Json(*episode.reward) : Json(nullptr);
  j["tokenizer"] = tokenizer != nullptr;
  j["calls_not_retained"] = nullptr;
  if (const auto& d = episode.dropped_calls) {
    j["calls_not_retained"] =
        Json{{"calls", d->calls},
             {"bytes", d->bytes},
             {"batch_id", d->batch_id},
             {"at", d->at},
             {"message", fmt::format("{} call{} not retained (retention: {})", d->calls,
                                     d->calls == 1 ? "" : "s", d->policy)}};
  }

  Json jc = Json::array();
  for (const CallRecord& c : calls) {
    Json spans = Json::array();
    for (size_t i = 0; i < c.message_spans.size(); ++i) {
      const MessageTokens& s = c.message_spans[i];
      Json o{{"message_index", i}, {"begin", s.begin}, {"end", s.end}};
      o["role"] = i < c.request.messages.size()
                      ? std::string(text::role_name(c.request.messages[i].role))
                      : "";
      o["spliced_from_call"] = s.spliced_from_call >= 0 ? Json(s.spliced_from_call) : Json(nullptr);
      spans.push_back(std::move(o));
    }
    Json notes = Json::array();
    for (const RenderNote& n : c.render_notes) {
      notes.push_back(Json{{"message_index", n.message_index},
                           {"kind", std::string(render_note_kind_name(n.kind))},
                           {"call", n.call >= 0 ? Json(n.call) : Json(nullptr)},
                           {"detail", n.detail}});
    }
    Json o{{"call_index", c.call_index},
           {"agent_name", c.agent_name},
           {"finish_reason", std::string(finish_reason_name(c.finish_reason))},
           {"ended_with_end_token", c.ended_with_end_token},
           {"started_at", c.started_at},
           {"finished_at", c.finished_at},
           {"latency_ms", c.latency_ms},
           {"request", request_json(c)},
           {"sampling", request_sampling(c)},
           {"prompt_ids", c.prompt_ids},
           {"message_spans", spans},
           {"generation_prompt_begin", c.generation_prompt_begin},
           {"render_notes", notes},
           {"completion_ids", c.completion_ids},
           {"logprobs", c.logprobs},
           {"policy_versions", c.policy_versions},
           {"completion_text", valid_utf8(c.completion_text)}};
    if (tokenizer != nullptr) {
      o["prompt_pieces"] = text_pieces(*tokenizer, c.prompt_ids);
      o["completion_pieces"] = text_pieces(*tokenizer, c.completion_ids);
    }
    jc.push_back(std::move(o));
  }
  j["calls"] = std::move(jc);

  Json js = Json::array();
  for (const Sample& s : merged.samples) {
    Json o{{"index", s.index},
           {"agent_name", s.agent_name},
           {"trainable", s.trainable},
           {"task_id", s.task_id},
           {"reward", s.reward},
           {"weight", s.weight},
           {"calls", s.calls},
           {"num_tokens", s.token_ids.size()},
           {"num_trained", s.trained_tokens()},
           {"token_ids", s.token_ids},
           {"loss_mask", s.loss_mask},
           {"logprobs", s.logprobs},
           {"policy_versions", s.policy_versions},
           {"source_calls", s.source_calls}};
    if (tokenizer != nullptr) o["text_pieces"] = text_pieces(*tokenizer, s.token_ids);
    js.push_back(std::move(o));
  }
  j["samples"] = std::move(js);
  j["diagnostics"] = diagnostics_json(merged.diagnostics);
  return j;
}

}  // namespace ajet::tracking
