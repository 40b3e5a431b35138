// One choice of a completion while its tokens arrive from the engine: the generated ids with their
// logprobs, incremental UTF-8 decoding, stop strings (the text is cut before the first match and
// the choice ends), and what may be shown to the client *now* — reasoning (a leading <think> block)
// and content — holding back any tail that could still become a stop string, a </think> or a
// <tool_call>. Tool calls are only known once the choice ends (final_output()).
// Not thread-safe: one call object feeds it from one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rpc/messages.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"
#include "tracking/call_record.h"

namespace ajet::openai {

struct ChoiceOptions {
  const text::Tokenizer* tokenizer = nullptr;
  std::vector<std::string> stop;  // stop strings
  bool chat = true;               // false (/v1/completions): plain text, no reasoning, no tools
  bool parse_tools = false;       // chat with tools and tool_choice != none
  std::string
      generation_prompt_tail;  // text the generation prompt added after the assistant header
};

struct ChoiceDelta {
  std::string reasoning;
  std::string content;
  size_t token_begin = 0;  // generated tokens [token_begin, token_end) not reported before
  size_t token_end = 0;
};

class ChoiceState {
 public:
  explicit ChoiceState(ChoiceOptions options);

  // Appends one `tokens` event of this choice. Tokens after a stop string matched are ignored.
  void add(const rpc::TokensEvent& event);
  bool stopped_by_string() const { return stopped_by_string_; }
  const std::string& matched_stop() const {
    return matched_stop_;
  }  // the stop string that ended it
  // The engine sent the choice's last event, or a stop string ended it.
  bool finished() const { return stopped_by_string_ || engine_finish_.has_value(); }
  std::optional<rpc::FinishReason> engine_finish() const { return engine_finish_; }

  // What may be sent now and was not sent before; final = true releases everything held back.
  ChoiceDelta take_delta(bool final);

  // The whole answer: content (stop string cut), reasoning, and tool calls (with fresh call ids)
  // when tools are parsed.
  text::ParsedOutput final_output() const;
  // "stop", "length" or "tool_calls" (OpenAI's names); "abort" when the engine aborted it.
  std::string finish_reason(bool has_tool_calls) const;
  tracking::FinishReason tracking_finish() const;

  const std::string& text() const { return raw_; }  // decoded generation, cut at a stop string
  const std::string& content_sent() const { return content_sent_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  const std::vector<float>& logprobs() const { return logprobs_; }
  const std::vector<float>& raw_logprobs() const { return raw_logprobs_; }
  const std::vector<int32_t>& policy_versions() const { return versions_; }
  int top_k() const { return top_k_; }
  const std::vector<int32_t>& top_ids() const { return top_ids_; }          // (T * top_k)
  const std::vector<float>& top_logprobs() const { return top_logprobs_; }  // (T * top_k)
  size_t tokens() const { return ids_.size(); }

 private:
  enum class Mode { kStart, kReasoning, kAfterThink, kContent };
  void add_text(const std::string& piece);
  size_t stop_holdback() const;

  ChoiceOptions options_;
  text::IncrementalDecoder decoder_;
  std::string raw_;
  bool stopped_by_string_ = false;
  std::string matched_stop_;
  std::optional<rpc::FinishReason> engine_finish_;
  size_t max_stop_len_ = 0;

  std::vector<int32_t> ids_;
  std::vector<float> logprobs_;
  std::vector<float> raw_logprobs_;
  std::vector<int32_t> versions_;
  int top_k_ = 0;
  std::vector<int32_t> top_ids_;
  std::vector<float> top_logprobs_;

  Mode mode_ = Mode::kStart;
  size_t consumed_ = 0;  // bytes of raw_ already sent (or skipped as tags)
  size_t tokens_reported_ = 0;
  bool tool_seen_ = false;
  std::string content_sent_;
};

}  // namespace ajet::openai
