// Bodies of the OpenAI-compatible API in the shapes the official SDKs parse: chat.completion,
// chat.completion.chunk, text_completion, logprobs, usage, tool calls. Pure functions over plain
// data; the ids look like OpenAI's ("chatcmpl-…", "cmpl-…").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "openai/openai_choice.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace ajet::openai {

struct ResponseMeta {
  std::string id;       // "chatcmpl-…" / "cmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string system_fingerprint;  // "ajet-policy-<version>" (empty: left out)
};

// prefix + 24 random hex digits.
std::string new_response_id(std::string_view prefix);

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]} for tokens [begin, end).
// vLLM's `prompt_logprobs` of a choice: null for the first prompt token, then per position an
// object
// {"<token id>": {"logprob", "rank", "decoded_token"}} holding the prompt's own token and the
// prompt_top_k best alternatives (the event that carried them: rpc::TokensEvent).
Json prompt_logprobs_json(const rpc::TokensEvent& scores, const text::Tokenizer& tok);

Json chat_logprobs_json(const ChoiceState& choice, size_t begin, size_t end,
                        const text::Tokenizer& tokenizer);
// Legacy completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
Json completion_logprobs_json(const ChoiceState& choice, size_t begin, size_t end,
                              const text::Tokenizer& tokenizer, size_t text_offset);

// [{"id", "type": "function", "function": {"name", "arguments"}}] (with "index" for stream deltas).
Json tool_calls_json(const std::vector<text::ToolCall>& calls, bool with_index);
// {"role": "assistant", "content", "tool_calls"?, "reasoning_content"?}
Json chat_message_json(const text::ParsedOutput& output);

// One chat.completion.chunk with one choice. `finish_reason` and `logprobs` may be null.
Json chat_chunk_json(const ResponseMeta& meta, int index, Json delta, Json finish_reason,
                     Json logprobs);
// One text_completion chunk (streamed /v1/completions).
Json completion_chunk_json(const ResponseMeta& meta, int index, std::string text,
                           Json finish_reason, Json logprobs);
// The last chunk of a stream with stream_options.include_usage: "choices": [], "usage".
Json usage_chunk_json(const ResponseMeta& meta, std::string_view object, Json usage);

// "data: <json>\n\n" (invalid UTF-8 replaced, never thrown).
std::string sse_data(const Json& value);

}  // namespace ajet::openai
