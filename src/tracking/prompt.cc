#include "tracking/prompt.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace ajet::tracking {

void AgentHistory::add(const CallRecord& call, const ChatFormat& format) {
  Entry e;
  e.call = &call;
  e.generation_prompt_tail = generation_prompt_tail(call, format);
  TurnSignature sig = generated_signature(e.generation_prompt_tail, call.completion_text);
  e.reasoning = sig.reasoning;
  entries_.push_back(std::move(e));
  by_key_.emplace(std::move(sig.key), entries_.size() - 1);
}

std::vector<const AgentHistory::Entry*> AgentHistory::find(const std::string& key) const {
  std::vector<size_t> idx;
  auto [lo, hi] = by_key_.equal_range(key);
  for (auto it = lo; it != hi; ++it) idx.push_back(it->second);
  std::sort(idx.begin(), idx.end());
  std::vector<const Entry*> out;
  for (size_t i : idx) out.push_back(&entries_[i]);
  return out;
}

size_t RenderedPrompt::spliced_messages() const {
  return static_cast<size_t>(std::count_if(notes.begin(), notes.end(), [](const RenderNote& n) {
    return n.kind == RenderNote::Kind::kSpliced || n.kind == RenderNote::Kind::kKeptReasoning;
  }));
}

namespace {

constexpr int32_t kUnset = std::numeric_limits<int32_t>::max();

class Assembler {
 public:
  Assembler(const ChatFormat& format, const text::RenderedChat& rc, size_t messages)
      : format_(format), rc_(rc) {
    out_.message_spans.assign(messages, MessageTokens{kUnset, -1, -1});
  }

  // Tokenizes rendered text [from, to) (both at special-token boundaries or the text's ends) with
  // the spans that overlap it, so every message gets its token range.
  void encode_text(size_t from, size_t to) {
    if (from >= to) return;
    text::RenderedChat piece;
    piece.text = rc_.text.substr(from, to - from);
    auto clip = [&](size_t p) { return std::clamp(p, from, to) - from; };
    for (const text::ChatSpan& s : rc_.spans) {
      if (s.end <= from || s.begin >= to) continue;
      text::ChatSpan c = s;
      c.begin = clip(s.begin);
      c.body_begin = clip(s.body_begin);
      c.body_end = clip(s.body_end);
      c.end = clip(s.end);
      piece.spans.push_back(c);
    }
    text::TokenizedChat t = text::tokenize_chat(format_.tok(), piece);
    const auto base = static_cast<int32_t>(out_.ids.size());
    out_.ids.insert(out_.ids.end(), t.ids.begin(), t.ids.end());
    for (const text::TokenSpan& s : t.spans) {
      if (s.kind == text::SpanKind::kMessage) {
        extend(s.message_index, base + static_cast<int32_t>(s.begin),
               base + static_cast<int32_t>(s.end));
      } else if (s.kind == text::SpanKind::kGenerationPrompt) {
        out_.generation_prompt_begin = base + static_cast<int32_t>(s.begin);
      }
    }
  }

  void splice(int message_index, const CallRecord& call) {
    const auto begin = static_cast<int32_t>(out_.ids.size());
    std::span<const TokenId> prompt(call.prompt_ids);
    auto gen_prompt = prompt.subspan(static_cast<size_t>(call.generation_prompt_begin));
    out_.ids.insert(out_.ids.end(), gen_prompt.begin(), gen_prompt.end());
    out_.ids.insert(out_.ids.end(), call.completion_ids.begin(), call.completion_ids.end());
    extend(message_index, begin, static_cast<int32_t>(out_.ids.size()));
    out_.message_spans[static_cast<size_t>(message_index)].spliced_from_call = call.call_index;
  }

  const std::vector<TokenId>& ids() const { return out_.ids; }
  std::vector<RenderNote>& notes() { return out_.notes; }

  RenderedPrompt finish() {
    int32_t at = 0;
    for (MessageTokens& m : out_.message_spans) {
      if (m.begin == kUnset) m = {at, at, m.spliced_from_call};  // rendered nothing
      at = m.end;
    }
    return std::move(out_);
  }

 private:
  void extend(int index, int32_t b, int32_t e) {
    if (index < 0 || static_cast<size_t>(index) >= out_.message_spans.size()) return;
    MessageTokens& m = out_.message_spans[static_cast<size_t>(index)];
    m.begin = std::min(m.begin, b);
    m.end = std::max(m.end, e);
  }

  const ChatFormat& format_;
  const text::RenderedChat& rc_;
  RenderedPrompt out_;
};

bool prompt_prefix_equals(const CallRecord& call, const std::vector<TokenId>& so_far) {
  const auto n = static_cast<size_t>(call.generation_prompt_begin);
  return n == so_far.size() && std::equal(so_far.begin(), so_far.end(), call.prompt_ids.begin());
}

std::string quote(std::string_view s, size_t max = 60) {
  std::string t(s.substr(0, max));
  for (char& c : t) {
    if (c == '\n') c = ' ';
  }
  return "'" + t + (s.size() > max ? "...'" : "'");
}

}  // namespace

RenderedPrompt render_prompt(const ChatFormat& format, const text::ChatRequest& request,
                             const PromptOptions& options, const AgentHistory* history) {
  text::RenderOptions ro;
  ro.add_generation_prompt = true;
  ro.enable_thinking = options.enable_thinking;
  const text::RenderedChat rc = text::render_chat(format.family, request, ro);
  Assembler out(format, rc, request.messages.size());

  size_t text_from = 0;  // rendered text not yet tokenized starts here
  for (const text::ChatSpan& s : rc.spans) {
    if (s.kind != text::SpanKind::kMessage || s.message_index < 0) continue;
    const text::ChatMessage& m = request.messages[static_cast<size_t>(s.message_index)];
    if (m.role != text::Role::kAssistant) continue;
    RenderNote note;
    note.message_index = s.message_index;
    if (!options.splice_generated) {
      note.kind = RenderNote::Kind::kSplicingDisabled;
      note.detail =
          "rendered from text: splicing generated ids is off (fix_retokenization_drift: false)";
      out.notes().push_back(std::move(note));
      continue;
    }
    const TurnSignature wanted = message_signature(m);
    std::vector<const AgentHistory::Entry*> candidates;
    if (history != nullptr) candidates = history->find(wanted.key);
    if (candidates.empty()) {
      note.kind = RenderNote::Kind::kNoMatch;
      note.detail =
          "rendered from text: no earlier completion of this agent has this content and tool calls "
          "(content " +
          quote(m.content) + ")";
      out.notes().push_back(std::move(note));
      continue;
    }
    // The header starts with a special token, so the text before it can be tokenized on its own.
    out.encode_text(text_from, s.begin);
    text_from = s.begin;
    const AgentHistory::Entry* chosen = candidates.back();
    for (const AgentHistory::Entry* c : candidates) {
      if (prompt_prefix_equals(*c->call, out.ids())) chosen = c;
    }
    const CallRecord& call = *chosen->call;
    note.call = call.call_index;

    // What the template makes of this message, against what was generated.
    std::string rendered_tail(rc.header(s));
    if (rendered_tail.rfind(format.assistant_header, 0) == 0)
      rendered_tail.erase(0, format.assistant_header.size());
    const TurnSignature rendered = generated_signature(rendered_tail, rc.body(s));
    const bool same_turn = rendered.key == wanted.key;
    const bool same_reasoning = rendered.reasoning == chosen->reasoning;
    if (!same_turn || (!same_reasoning && !options.keep_generated_reasoning)) {
      note.kind = RenderNote::Kind::kRewritten;
      note.detail =
          "rendered from text: repeats call " + std::to_string(call.call_index) +
          "'s completion, but the chat template renders it differently" +
          (!same_turn
               ? std::string(" (content or tool calls)")
               : " (it drops the generated reasoning, as Qwen3 does before the last user query; "
                 "ajet.context_tracker.keep_earlier_thinking splices it anyway)");
      out.notes().push_back(std::move(note));
      continue;
    }
    const std::string_view footer = rc.footer(s);
    if (call.ended_with_end_token &&
        footer.substr(0, format.end_of_turn_text.size()) != format.end_of_turn_text) {
      note.kind = RenderNote::Kind::kFooterMismatch;
      note.detail = "rendered from text: the template's footer " + quote(footer) +
                    " does not start with " + format.end_of_turn_text;
      out.notes().push_back(std::move(note));
      continue;
    }
    out.splice(s.message_index, call);
    // The footer stays text; when the model generated the end-of-turn token, the template's copy is
    // skipped (it is a special token, so the cut after it is safe).
    text_from = s.body_end + (call.ended_with_end_token ? format.end_of_turn_text.size() : 0);
    note.kind = same_reasoning ? RenderNote::Kind::kSpliced : RenderNote::Kind::kKeptReasoning;
    note.detail = same_reasoning
                      ? "spliced the ids generated by call " + std::to_string(call.call_index)
                      : "spliced the ids generated by call " + std::to_string(call.call_index) +
                            ", keeping reasoning the template would drop";
    out.notes().push_back(std::move(note));
  }
  out.encode_text(text_from, rc.text.size());
  return out.finish();
}

}  // namespace ajet::tracking
