// One LLM call as the tracker keeps it: the request, the exact prompt ids the engine saw (with the
// token span of every request message), the exact generated ids with their behaviour logprobs and
// policy versions, and how the completion ended. Converts to and from the store's CallRow; it never
// re-tokenizes anything that was recorded.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/records.h"
#include "text/messages.h"
#include "tracking/chat_format.h"

namespace ajet::tracking {

// The last four: a madness detector of the engine stopped the call (batching/madness.h).
enum class FinishReason {
  kStop,
  kLength,
  kAbort,
  kRepetition,
  kLowEntropy,
  kGarbage,
  kLanguageSwitch
};
bool is_madness(FinishReason reason);

// "stop", "length", "abort", "repetition", "low_entropy", "garbage", "language_switch".
std::string_view finish_reason_name(FinishReason reason);
// Parses those names; anything else (e.g. "tool_calls", "") reads as stop.
FinishReason finish_reason_from_name(std::string_view name);

// Token span [begin, end) of request message `message_index` inside the prompt ids (header, body
// and footer of the message; tool results folded into one user turn each get their own span).
struct MessageTokens {
  int32_t begin = 0;
  int32_t end = 0;
  // The earlier call whose generated ids were spliced in as this message's body
  // (token-in/token-out), or -1 when the message was rendered from text. Kept in memory only (not
  // in the store's CallRow).
  int64_t spliced_from_call = -1;
  bool operator==(const MessageTokens&) const = default;
};

// Why an assistant message of a request was or was not rendered from generated ids.
struct RenderNote {
  enum class Kind {
    kSpliced,    // rendered from call `call`'s generated ids
    kNoMatch,    // no earlier completion of this episode and agent has this content + tool calls
    kRewritten,  // matches call `call`, but the template renders it differently (e.g. drops
                 // <think>)
    kKeptReasoning,   // matches call `call`; the template would drop its reasoning, kept by option
    kFooterMismatch,  // matches, but the template's footer does not start with the end-of-turn
                      // token
    kSplicingDisabled,  // PromptOptions::splice_generated is false
  };
  Kind kind = Kind::kNoMatch;
  int32_t message_index = -1;
  int64_t call = -1;
  std::string detail;  // one human sentence
};

std::string_view render_note_kind_name(RenderNote::Kind kind);

struct CallRecord {
  std::string episode_uuid;
  std::string agent_name;
  // The LoRA adapter (a policy of its own on the engine's base, engine/adapters.h) that generated
  // the completion; "" = the base model. Calls of different adapters never merge into one sample.
  std::string adapter;
  int64_t call_index = 0;     // per episode, from 0; merge order
  text::ChatRequest request;  // parsed messages and tools
  // The bodies as the store keeps them (read back from it); the route and the tracker leave them
  // empty: the store row holds them, once per request (store::CallRow::bodies_from).
  std::string request_json;   // the request body as received
  std::string response_json;  // the answer sent (may be empty for streams)

  std::vector<TokenId> prompt_ids;           // exactly what the engine was given
  std::vector<MessageTokens> message_spans;  // one per request message, in order
  int32_t generation_prompt_begin = 0;   // prompt_ids[generation_prompt_begin:] = generation prompt
  std::vector<RenderNote> render_notes;  // one per assistant message of the request

  std::vector<TokenId>
      completion_ids;               // exactly what the engine generated (incl. a final <|im_end|>)
  std::vector<float> logprobs;      // per completion token, behaviour (sampling) logprob
  std::vector<float> raw_logprobs;  // per completion token under the raw model; may be empty
  std::vector<int32_t> policy_versions;  // per completion token
  FinishReason finish_reason = FinishReason::kStop;
  double latency_ms = 0;
  double started_at = 0;  // unix seconds
  double finished_at = 0;

  // Derived by EpisodeTracker::record / call_from_row (never needed from the route):
  bool ended_with_end_token = false;  // completion_ids ends with the template's end-of-turn id
  std::string completion_text;  // decoded completion_ids (without a trailing end-of-turn token)

  size_t stream_size() const { return prompt_ids.size() + completion_ids.size(); }
};

// Throws Error(kInvalidArgument) naming the field when per-token arrays disagree in length, spans
// leave the prompt, or the generation prompt start is out of range.
void validate_call(const CallRecord& call);

// Fills ended_with_end_token and completion_text from the ids (needs the format's tokenizer).
void derive_completion_fields(CallRecord& call, const ChatFormat& format);

// Text the generation prompt adds after the assistant header (e.g. "<think>\n\n</think>\n\n").
std::string generation_prompt_tail(const CallRecord& call, const ChatFormat& format);

store::CallRow to_call_row(const CallRecord& call);

// The tracker's record of a stored call. `format` (may be null) decodes the completion; without it
// completion_text comes from the response's choice `choice` and ended_with_end_token from
// finish_reason == "stop". A request_json that does not parse leaves `request` empty (logged), so
// an old or damaged row can still be shown and merged at token level. A row whose bodies are on
// another row (bodies_from) gets them from `bodies` (that row; null: left empty, logged): use
// calls_from_rows (episode_tracker.h), which resolves them and parses each request once.
CallRecord call_from_row(const store::CallRow& row, const ChatFormat* format,
                         const store::CallRow* bodies = nullptr);

// The tracker's records of one episode's stored calls, by call_index: call_from_row for each, with
// the bodies a row refers to (bodies_from) taken from that row, its request parsed once.
std::vector<CallRecord> calls_from_rows(std::span<const store::CallRow> rows,
                                        const ChatFormat* format);

}  // namespace ajet::tracking
