#include "tracking/episode_tracker.h"

#include <algorithm>

namespace ajet::tracking {

void take_prompt(CallRecord& call, RenderedPrompt prompt) {
  call.prompt_ids = std::move(prompt.ids);
  call.message_spans = std::move(prompt.message_spans);
  call.generation_prompt_begin = prompt.generation_prompt_begin;
  call.render_notes = std::move(prompt.notes);
}

EpisodeTracker::EpisodeTracker(std::string episode_uuid, const ChatFormat& format)
    : episode_uuid_(std::move(episode_uuid)), format_(format) {}

std::unique_ptr<EpisodeTracker> EpisodeTracker::restore(std::string episode_uuid,
                                                        const ChatFormat& format,
                                                        std::span<const store::CallRow> rows) {
  auto t = std::make_unique<EpisodeTracker>(std::move(episode_uuid), format);
  for (CallRecord& c : calls_from_rows(rows, &format)) t->record(std::move(c));
  return t;
}

RenderedPrompt EpisodeTracker::render(const std::string& agent_name,
                                      const text::ChatRequest& request,
                                      const PromptOptions& options) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_name);
  return render_prompt(format_, request, options, it == agents_.end() ? nullptr : &it->second);
}

namespace {

size_t approx_bytes(const CallRecord& c) {
  size_t bytes = sizeof(CallRecord) + c.completion_text.size();
  bytes += 4 * (c.prompt_ids.size() + 3 * c.message_spans.size() + c.completion_ids.size() +
                c.logprobs.size() + c.raw_logprobs.size() + c.policy_versions.size());
  for (const text::ChatMessage& m : c.request.messages) {
    bytes += sizeof(m) + m.content.size() + m.reasoning_content.value_or("").size();
    for (const text::ToolCall& t : m.tool_calls)
      bytes += sizeof(t) + t.id.size() + t.name.size() + t.arguments.size();
  }
  for (const text::OrderedJson& t : c.request.tools) bytes += t.dump().size();
  return bytes;
}

}  // namespace

void EpisodeTracker::record(CallRecord call) {
  if (call.episode_uuid.empty()) call.episode_uuid = episode_uuid_;
  validate_call(call);
  derive_completion_fields(call, format_);
  std::string().swap(call.request_json);  // the store keeps the bodies; memory goes with the string
  std::string().swap(call.response_json);
  const size_t bytes = approx_bytes(call);
  std::lock_guard<std::mutex> lock(mu_);
  memory_bytes_ += bytes;
  calls_.push_back(std::move(call));
  const CallRecord& stored = calls_.back();
  agents_[stored.agent_name].add(stored, format_);
}

std::vector<CallRecord> EpisodeTracker::calls() const {
  std::vector<CallRecord> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.assign(calls_.begin(), calls_.end());
  }
  std::stable_sort(out.begin(), out.end(), [](const CallRecord& a, const CallRecord& b) {
    return a.call_index < b.call_index;
  });
  return out;
}

size_t EpisodeTracker::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_bytes_;
}

size_t EpisodeTracker::call_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_.size();
}

std::vector<std::string> EpisodeTracker::agent_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, _] : agents_) out.push_back(name);
  return out;
}

}  // namespace ajet::tracking
