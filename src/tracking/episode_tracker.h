// The front's live record of one episode: the finished LLM calls of every agent, used to render the
// next prompt token-in/token-out (prompt.h) and, at the end, merged into samples (merge.h). It only
// keeps memory; persisting calls is the store's job (to_call_row), and a restarted front rebuilds a
// tracker from the stored rows (restore).
//
// How the HTTP routes use it, per /v1/chat/completions request of episode E, agent A:
//   1. RenderedPrompt p = tracker.render(A, request, options);     // prompt ids for the engine
//   2. generate from p.ids; then fill a CallRecord: agent_name, call_index (the registry's ticket),
//      request, the prompt fields from p (take_prompt below), and the engine's completion_ids,
//      logprobs, policy_versions, finish_reason, timings;
//   3. registry.record_llm_call(row) with row = to_call_row(call) plus the request and response
//      bodies (once per request: its other choices' rows name the first in bodies_from);
//      tracker.record(std::move(call)).
//   A request with n > 1 is n calls with consecutive call_index, all with the same prompt.
//   The tracker keeps what rendering and merging read (the parsed request, the token arrays), never
//   the bodies: record() drops request_json / response_json.
//   At end_episode / batch time: merge_episode(info, tracker.calls(), options) or, from the store,
//   merge_episode(info, calls_from_rows(rows, &format), options).
// Threads: every method is thread-safe (one mutex per tracker); render and record are quick.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "store/records.h"
#include "tracking/call_record.h"
#include "tracking/chat_format.h"
#include "tracking/prompt.h"

namespace ajet::tracking {

// Moves the rendered prompt's fields into a call record.
void take_prompt(CallRecord& call, RenderedPrompt prompt);

class EpisodeTracker {
 public:
  // `format` must outlive the tracker.
  EpisodeTracker(std::string episode_uuid, const ChatFormat& format);
  // A tracker holding the stored calls of an episode (e.g. after a restart), in call_index order.
  static std::unique_ptr<EpisodeTracker> restore(std::string episode_uuid, const ChatFormat& format,
                                                 std::span<const store::CallRow> rows);

  const std::string& episode_uuid() const { return episode_uuid_; }
  const ChatFormat& format() const { return format_; }

  // Renders the prompt of agent `agent_name`'s next call (splicing that agent's earlier
  // completions).
  RenderedPrompt render(const std::string& agent_name, const text::ChatRequest& request,
                        const PromptOptions& options = {}) const;

  // Adds a finished call: validates it (Error(kInvalidArgument) naming the field), fills its
  // derived fields, drops its bodies (request_json, response_json: the store keeps them), and makes
  // its completion available to later renders of the same agent. Calls may be recorded in any
  // order; calls() sorts them by call_index.
  void record(CallRecord call);

  std::vector<CallRecord> calls() const;  // a copy, by call_index
  size_t call_count() const;
  // About how many bytes the recorded calls hold (token arrays, request text): whether dropping the
  // tracker is worth handing memory back to the system (TrackerMap::drop).
  size_t memory_bytes() const;
  std::vector<std::string> agent_names() const;

 private:
  std::string episode_uuid_;
  const ChatFormat& format_;
  mutable std::mutex mu_;
  std::deque<CallRecord> calls_;  // a deque: AgentHistory keeps pointers into it
  std::map<std::string, AgentHistory> agents_;
  size_t memory_bytes_ = 0;
};

}  // namespace ajet::tracking
