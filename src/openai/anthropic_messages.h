// The Anthropic Messages API (POST /v1/messages, docs/protocol.md) over the chat pipeline: a
// request body becomes the equivalent OpenAI chat body, so it is parsed, rendered, tracked and
// sampled exactly like /v1/chat/completions (same episode, tokens, masks, logprobs,
// llm_call_count); the answer and its streamed events are written in Anthropic's shapes, which the
// official SDKs parse. Pure functions over plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/json.h"
#include "openai/openai_format.h"
#include "openai/openai_params.h"
#include "text/messages.h"
#include "text/tool_calls.h"

namespace ajet::openai {

// `system` (string or text blocks) → a system message; each message's content blocks → OpenAI
// messages (text; assistant `tool_use` → tool_calls; user `tool_result` → role "tool" messages, in
// order; assistant `thinking` → reasoning_content; a `system` message anywhere in `messages`, as
// Claude Code sends them → a system message in place); tools with `input_schema` → function tools,
// server tools (a `type` other than custom) dropped and named in `notes`; tool_choice
// auto/any/tool/none; max_tokens, stop_sequences, temperature, top_p, top_k, stream.
// `thinking: {type: enabled | adaptive}` turns the template's thinking on, `disabled` off. Throws
// Error(kInvalidArgument) naming the Anthropic field path (`messages[2].content[0].tool_use_id`);
// images and documents are refused by name.
// A `tool_result` whose tool_use_id names no `tool_use` block of an earlier assistant message is
// refused by name (Anthropic answers 400 too). `count_only` (POST /v1/messages/count_tokens): no
// max_tokens needed.
text::OrderedJson anthropic_to_chat_body(const text::OrderedJson& body,
                                         ConversionNotes* notes = nullptr, bool count_only = false);
// The Messages names of the chat fields that body carries (stop_sequences), for the chat parser's
// errors.
FieldNames anthropic_field_names();

// Anthropic's stop_reason for a choice: "tool_use", "max_tokens", "stop_sequence" or "end_turn".
std::string anthropic_stop_reason(std::string_view openai_finish_reason, bool stopped_by_string);

// The content blocks of an answer: thinking (when the model reasoned), text (always, maybe empty,
// as Anthropic does when there is no tool call; left out when empty beside tool calls), tool_use
// with `input` parsed from the call's JSON arguments.
Json anthropic_content_json(const text::ParsedOutput& output);

// The whole non-streamed answer: {"id": "msg_…", "type": "message", "role": "assistant", "model",
// "content", "stop_reason", "stop_sequence", "usage": {"input_tokens", "output_tokens"}}.
Json anthropic_message_json(const ResponseMeta& meta, const text::ParsedOutput& output,
                            std::string_view stop_reason, std::string_view stop_sequence,
                            int64_t input_tokens, int64_t output_tokens);

// "event: <name>\ndata: <json>\n\n"; the data carries "type": <name>. Invalid UTF-8 is replaced.
std::string sse_event(std::string_view name, Json data);

// The events that open a stream at once: message_start (empty content, usage.input_tokens), then a
// text block at index 0 and a ping. Claude Code's idle watchdog aborts a stream that shows nothing.
std::string anthropic_stream_open(const ResponseMeta& meta, int64_t input_tokens);
// A text_delta for block 0 (an empty one is the heartbeat while nothing was generated).
std::string anthropic_text_delta(std::string_view text);
// The end of a stream: stop of block 0, one tool_use block per call (start, input_json_delta with
// the arguments, stop), message_delta (stop_reason, stop_sequence, usage.output_tokens),
// message_stop.
std::string anthropic_stream_close(const text::ParsedOutput& output, std::string_view stop_reason,
                                   std::string_view stop_sequence, int64_t output_tokens);
// An error inside an open stream: event `error`, {"type": "error", "error": {"type", "message"}}.
std::string anthropic_stream_error(std::string_view type, std::string_view message);

}  // namespace ajet::openai
