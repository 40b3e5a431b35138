// OpenAI's Responses API (POST /v1/responses, docs/protocol.md) over the chat pipeline, as
// anthropic_messages.h does for Anthropic's: the request becomes the equivalent chat body (so it is
// rendered, sampled and tracked exactly like /v1/chat/completions), and the answer and its streamed
// events are written in the Responses shapes the official SDKs parse. Stateless: the whole
// conversation comes in `input` (no previous_response_id). Pure functions over plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/json.h"
#include "openai/openai_format.h"
#include "openai/openai_params.h"
#include "text/messages.h"
#include "text/tool_calls.h"

namespace ajet::openai {

// The request's tools as the answer must name them back: the namespace of each function tool that
// came from a `{"type": "namespace", "name", "tools": [...]}` tool (Codex's multi_agent_v1), so its
// calls carry `"namespace"` beside their `name`.
struct ResponsesTools {
  std::unordered_map<std::string, std::string> namespace_of;  // function name -> namespace
};

// `instructions` → a system message; `input` (a string, or items: messages with text content,
// function_call → assistant tool_calls, function_call_output → tool messages; reasoning items are
// skipped) → messages; function tools, a namespace's function tools flattened (recorded in
// `tools`), built-in tools (web_search, …) dropped, both said in `notes`; tool_choice;
// max_output_tokens; temperature; top_p; stream. Throws Error(kInvalidArgument) naming the field
// path (`input[2].call_id`); images, files and previous_response_id are refused by name.
// A function_call_output whose call_id names no earlier function_call item is refused by name
// (OpenAI answers 400 too).
text::OrderedJson responses_to_chat_body(const text::OrderedJson& body,
                                         ResponsesTools* tools = nullptr,
                                         ConversionNotes* notes = nullptr);
// The Responses names of the chat fields that body carries (max_output_tokens), for the chat
// parser's errors.
FieldNames responses_field_names();

// The ids of one answer's output items: "msg_…" for the message (chosen when the stream opens),
// "fc_…" per function call.
struct ResponseItems {
  std::string message_id;
  std::vector<std::string> call_ids;
};
ResponseItems response_items(std::string message_id, const text::ParsedOutput& output);

// The whole `response` object. `status` "completed", or "incomplete" with
// incomplete_details.reason "max_output_tokens" when `length` is true; `in_progress` (no output,
// no usage) for the stream's first events.
Json responses_json(const ResponseMeta& meta, const text::ParsedOutput* output,
                    const ResponseItems& items, bool length, int64_t input_tokens,
                    int64_t output_tokens, const ResponsesTools& tools = {});

// Streamed events: "event: <type>\ndata: <json>\n\n" with "type" and "sequence_number" in the data.
class ResponsesEvents {
 public:
  explicit ResponsesEvents(std::string message_id, ResponsesTools tools = {})
      : message_id_(std::move(message_id)), tools_(std::move(tools)) {}
  // response.created and response.in_progress, at once.
  std::string open(const ResponseMeta& meta, int64_t input_tokens);
  // The first non-empty text opens the message item (output_item.added, content_part.added) first;
  // empty text: nothing.
  std::string text_delta(std::string_view text);
  // When text was streamed, or there are no function calls: output_text.done, content_part.done,
  // the message item's done (the item opened first if it was not); per function call its item
  // added, arguments delta and done, item done; response.completed (or response.incomplete).
  std::string close(const ResponseMeta& meta, const text::ParsedOutput& output, bool length,
                    int64_t input_tokens, int64_t output_tokens);
  std::string error(std::string_view code, std::string_view message);
  // The answer's item ids, made on first use: the stream and the stored body name the same items.
  const ResponseItems& items(const text::ParsedOutput& output) const;

 private:
  std::string event(std::string_view type, Json data);
  std::string open_message();
  std::string message_id_;
  ResponsesTools tools_;
  bool message_open_ = false;
  mutable std::optional<ResponseItems> items_;
  std::string text_;  // sent so far
  int64_t sequence_ = 0;
};

}  // namespace ajet::openai
