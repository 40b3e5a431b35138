#include "openai/openai_choice.h"

#include <algorithm>
#include <cctype>

#include "tracking/chat_format.h"

namespace ajet::openai {

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

// Length of the longest proper prefix of `tag` that `text` ends with.
size_t partial_suffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k) {
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

bool opens_think(std::string_view tail) {
  size_t open = tail.rfind(kThinkOpen);
  return open != std::string_view::npos && tail.find(kThinkClose, open) == std::string_view::npos;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

ChoiceState::ChoiceState(ChoiceOptions options)
    : options_(std::move(options)), decoder_(*options_.tokenizer, /*skip_special=*/true) {
  for (const auto& s : options_.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  if (!options_.chat)
    mode_ = Mode::kContent;
  else if (opens_think(options_.generation_prompt_tail))
    mode_ = Mode::kReasoning;
}

void ChoiceState::add(const rpc::TokensEvent& e) {
  if (stopped_by_string_) return;
  const size_t n = e.token_ids.size();
  if (e.top_k > 0) top_k_ = e.top_k;
  for (size_t i = 0; i < n && !stopped_by_string_; ++i) {
    ids_.push_back(e.token_ids[i]);
    logprobs_.push_back(i < e.logprobs.size() ? e.logprobs[i] : 0.0f);
    raw_logprobs_.push_back(i < e.raw_logprobs.size() ? e.raw_logprobs[i] : 0.0f);
    versions_.push_back(i < e.policy_versions.size() ? int32_t(e.policy_versions[i]) : 0);
    if (e.top_k > 0) {
      for (int k = 0; k < e.top_k; ++k) {
        size_t at = i * size_t(e.top_k) + size_t(k);
        top_ids_.push_back(at < e.top_ids.size() ? e.top_ids[at] : 0);
        top_logprobs_.push_back(at < e.top_logprobs.size() ? e.top_logprobs[at] : 0.0f);
      }
    }
    add_text(decoder_.push(e.token_ids[i]));
  }
  if (e.finish_reason && !stopped_by_string_) {
    add_text(decoder_.flush());
    engine_finish_ = e.finish_reason;
  }
}

void ChoiceState::add_text(const std::string& piece) {
  if (piece.empty()) return;
  const size_t old = raw_.size();
  raw_ += piece;
  if (options_.stop.empty()) return;
  const size_t from = old >= max_stop_len_ ? old - max_stop_len_ + 1 : 0;
  size_t best = std::string::npos;
  for (const auto& s : options_.stop) {
    const size_t at = raw_.find(s, from);
    if (at < best) {
      best = at;
      matched_stop_ = s;
    }
  }
  if (best != std::string::npos) {
    raw_.resize(best);
    stopped_by_string_ = true;
  }
}

size_t ChoiceState::stop_holdback() const {
  size_t hold = 0;
  for (const auto& s : options_.stop) hold = std::max(hold, partial_suffix(raw_, s));
  return hold;
}

ChoiceDelta ChoiceState::take_delta(bool final) {
  ChoiceDelta d;
  d.token_begin = tokens_reported_;
  d.token_end = ids_.size();
  tokens_reported_ = ids_.size();
  final = final || finished();
  const size_t limit = std::max(consumed_, final ? raw_.size() : raw_.size() - stop_holdback());
  while (true) {
    if (mode_ == Mode::kStart) {
      if (raw_.compare(0, kThinkOpen.size(), kThinkOpen) == 0) {
        consumed_ = kThinkOpen.size();
        mode_ = Mode::kReasoning;
        continue;
      }
      if (!final && raw_.size() < kThinkOpen.size() && kThinkOpen.substr(0, raw_.size()) == raw_)
        break;
      mode_ = Mode::kContent;
      continue;
    }
    if (mode_ == Mode::kReasoning) {
      size_t close = raw_.find(kThinkClose, consumed_);
      if (close != std::string::npos) {
        d.reasoning += raw_.substr(consumed_, close - consumed_);
        consumed_ = close + kThinkClose.size();
        mode_ = Mode::kAfterThink;
        continue;
      }
      size_t end =
          final ? raw_.size() : std::min(limit, raw_.size() - partial_suffix(raw_, kThinkClose));
      if (end > consumed_) {
        d.reasoning += raw_.substr(consumed_, end - consumed_);
        consumed_ = end;
      }
      break;
    }
    if (mode_ == Mode::kAfterThink) {
      while (consumed_ < raw_.size() && is_space(raw_[consumed_])) ++consumed_;
      if (consumed_ == raw_.size() && !final) break;
      mode_ = Mode::kContent;
      continue;
    }
    // kContent
    size_t end = std::max(consumed_, limit);
    if (options_.parse_tools) {
      // Content stops at the first <tool_call>; what follows comes with final_output().
      std::string_view rest = std::string_view(raw_).substr(consumed_);
      if (!tool_seen_ && rest.find("<tool_call>") != std::string_view::npos) tool_seen_ = true;
      if (!final || tool_seen_)
        end = std::min(end, consumed_ + text::streamable_content_length(rest));
    }
    if (end > consumed_) {
      std::string piece = raw_.substr(consumed_, end - consumed_);
      content_sent_ += piece;
      d.content += piece;
      consumed_ = end;
    }
    break;
  }
  return d;
}

text::ParsedOutput ChoiceState::final_output() const {
  text::ParsedOutput out;
  if (!options_.chat) {
    out.content = raw_;
    return out;
  }
  if (options_.parse_tools) {
    out = tracking::parse_generated(options_.generation_prompt_tail, raw_);
    for (auto& call : out.tool_calls) {
      if (call.id.empty()) call.id = text::random_tool_call_id();
    }
    return out;
  }
  // No tools: only a leading think block is split off (as the stream did); the rest is content.
  std::string_view text = raw_;
  bool in_think = opens_think(options_.generation_prompt_tail);
  if (!in_think && text.substr(0, kThinkOpen.size()) == kThinkOpen) {
    in_think = true;
    text.remove_prefix(kThinkOpen.size());
  }
  if (in_think) {
    size_t close = text.find(kThinkClose);
    if (close == std::string_view::npos) {
      out.reasoning_content = std::string(text);
      return out;
    }
    out.reasoning_content = std::string(text.substr(0, close));
    text.remove_prefix(close + kThinkClose.size());
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  }
  out.content = std::string(text);
  return out;
}

std::string ChoiceState::finish_reason(bool has_tool_calls) const {
  if (stopped_by_string_) return "stop";
  if (!engine_finish_) return "stop";
  switch (*engine_finish_) {
    case rpc::FinishReason::kLength: return "length";
    case rpc::FinishReason::kAbort: return "abort";
    case rpc::FinishReason::kStop: break;
    default: return std::string(rpc::finish_reason_name(*engine_finish_));  // a madness stop
  }
  return has_tool_calls ? "tool_calls" : "stop";
}

tracking::FinishReason ChoiceState::tracking_finish() const {
  if (stopped_by_string_ || !engine_finish_) return tracking::FinishReason::kStop;
  switch (*engine_finish_) {
    case rpc::FinishReason::kLength: return tracking::FinishReason::kLength;
    case rpc::FinishReason::kAbort: return tracking::FinishReason::kAbort;
    case rpc::FinishReason::kRepetition: return tracking::FinishReason::kRepetition;
    case rpc::FinishReason::kLowEntropy: return tracking::FinishReason::kLowEntropy;
    case rpc::FinishReason::kGarbage: return tracking::FinishReason::kGarbage;
    case rpc::FinishReason::kLanguageSwitch: return tracking::FinishReason::kLanguageSwitch;
    case rpc::FinishReason::kStop: break;
  }
  return tracking::FinishReason::kStop;
}

}  // namespace ajet::openai
