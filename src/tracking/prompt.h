// Token-in/token-out prompt rendering. A request is rendered with the model's chat template, except
// that every assistant message repeating an earlier completion of the same episode and agent is
// rendered from the ids the model actually generated: the generation prompt ids that call was
// given, its generated ids, then the template's footer (without the end-of-turn token when the
// model generated it). So when an agent simply appends to its history, the prompt of call k+1
// starts with exactly prompt(k) + completion(k), and no re-tokenization drift can occur.
//
// When is a message "a repeat" (message_signature == generated_signature, see chat_format.h): same
// content (trimmed) and same tool calls (names, arguments as JSON values), after parsing <think> /
// <tool_call> blocks; reasoning and tool-call ids are not compared. Several earlier calls may
// match (e.g. two "OK" turns): the one whose prompt equals the tokens rendered so far wins, else
// the most recent. Then the template's own rendering of that message must say the same thing as the
// generation (content, tool calls and reasoning): Qwen3 drops the <think> block of assistant turns
// before the last user query, so such a turn is rendered from text (a branch appears in the merged
// samples, and RenderNote::kRewritten says why) unless keep_generated_reasoning is set. An empty
// think block (Qwen3 with enable_thinking=false) counts as no reasoning.
//
// Everything not spliced is tokenized exactly as tokenizer.encode(rendered text) would; splicing
// cuts the text only at special-token boundaries, where that cannot change the encoding.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/messages.h"
#include "tracking/call_record.h"
#include "tracking/chat_format.h"

namespace ajet::tracking {

struct PromptOptions {
  std::optional<bool> enable_thinking;  // Qwen3 template variable; nullopt: the template's default
  // ajet.context_tracker.fix_retokenization_drift: splice generated ids (token-in/token-out).
  bool splice_generated = true;
  // ajet.context_tracker.keep_earlier_thinking: splice a repeated completion even when the template
  // would drop its reasoning (Qwen3 before the last user query, or a client that did not send the
  // reasoning back): the model then sees its own earlier thinking, and the conversation stays one
  // sample. Off by default: the prompt then follows the template, and merging branches there.
  bool keep_generated_reasoning = false;
};

// The completions of one episode and agent that later prompts may repeat, indexed by signature.
// Holds pointers into the owner's call storage (which must not move: EpisodeTracker uses a deque).
class AgentHistory {
 public:
  struct Entry {
    const CallRecord* call = nullptr;
    std::string reasoning;               // generated reasoning, trimmed
    std::string generation_prompt_tail;  // see generation_prompt_tail()
  };
  // `call` must have its derived fields (derive_completion_fields).
  void add(const CallRecord& call, const ChatFormat& format);
  // Entries whose generated signature key equals `key`, oldest first.
  std::vector<const Entry*> find(const std::string& key) const;
  size_t size() const { return entries_.size(); }

 private:
  std::deque<Entry> entries_;
  std::unordered_multimap<std::string, size_t> by_key_;
};

struct RenderedPrompt {
  std::vector<TokenId> ids;                  // the prompt, generation prompt included
  std::vector<MessageTokens> message_spans;  // one per request message
  int32_t generation_prompt_begin = 0;
  std::vector<RenderNote> notes;  // one per assistant message of the request
  size_t spliced_messages() const;
};

// Renders `request` for one agent of an episode. `history` may be null (first call, or splicing of
// another agent's turns is never wanted). Throws Error(kInvalidArgument) for what the template
// cannot express (tools with plain ChatML) or an empty message list.
RenderedPrompt render_prompt(const ChatFormat& format, const text::ChatRequest& request,
                             const PromptOptions& options, const AgentHistory* history);

}  // namespace ajet::tracking
