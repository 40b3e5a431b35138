#include "text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "text/utf8.h"

namespace ajet::text {

// ---------------------------------------------------------------------------------------------
// Regex

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Per-thread match state: PCRE2 match data is not shareable, and the JIT stack is grown past the
// 32 KiB default so long inputs cannot fail a match.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, std::string_view where)
    : code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &err, &offset, nullptr);
  if (code_->code == nullptr) {
    invalid_argument(std::string(where) + ": bad regex at offset " + std::to_string(offset) + ": " +
                     pcre2_message(err) + " (pattern: " + std::string(pattern) + ")");
  }
  jit_ = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

bool Regex::find(std::string_view subject, size_t start, size_t& match_begin,
                 size_t& match_end) const {
  MatchScratch& s = scratch();
  if (s.data == nullptr)
    fail(ErrorCode::kResourceExhausted, "pre-tokenizer: cannot allocate regex match data");
  auto subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  // The subject was validated (or repaired) once; rechecking UTF-8 on every call is ~40x slower.
  int rc = jit_ ? pcre2_jit_match(code_->code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK,
                                  s.data, s.context)
                : pcre2_match(code_->code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK, s.data,
                              s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    fail(ErrorCode::kResourceExhausted, "pre-tokenizer regex failed on a " +
                                            std::to_string(subject.size()) +
                                            "-byte text: " + pcre2_message(rc));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  match_begin = ov[0];
  match_end = ov[1];
  return true;
}

// ---------------------------------------------------------------------------------------------
// Pattern rewriting

std::string rewrite_caseless_groups(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (p.substr(i, 4) != "(?i:") {
      out += p[i++];
      continue;
    }
    // Find the group's end and check it only holds literals, alternation and plain groups.
    size_t j = i + 4;
    int depth = 1;
    bool simple = true;
    while (j < p.size() && depth > 0) {
      char c = p[j];
      if (c == '\\') {
        if (j + 1 < p.size() && std::isalnum(static_cast<unsigned char>(p[j + 1]))) simple = false;
        j += 2;
        continue;
      }
      if (c == '[') simple = false;
      if (c == '(') {
        ++depth;
        if (j + 1 < p.size() && p[j + 1] == '?' && p.substr(j, 3) != "(?:") simple = false;
      }
      if (c == ')') --depth;
      ++j;
    }
    if (depth != 0 || !simple) {
      out += p[i++];
      continue;
    }
    out += "(?:";
    for (size_t k = i + 4; k < j; ++k) {
      char c = p[k];
      if (c == '\\') {
        out.append(p.substr(k, 2));
        ++k;
      } else if (std::isalpha(static_cast<unsigned char>(c))) {
        char lo = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        char up = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        out += '[';
        out += lo;
        out += up;
        out += ']';
      } else {
        out += c;
      }
    }
    i = j;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// PreTokenizer

// HF's SplitDelimiterBehavior. Outside the anonymous namespace: PreTokenizer::Step holds one.
enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

namespace {

// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Behavior parse_behavior(const std::string& name, std::string_view where) {
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  invalid_argument(std::string(where) + ": unknown Split behavior '" + name + "'");
}

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kSplit, kPrefixSpace } kind = Kind::kSplit;
  std::unique_ptr<Regex> regex;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;

  // Split: HF's `SplitDelimiterBehavior` applied to the regex matches of one piece.
  void apply(std::string_view text, std::vector<std::string_view>& out,
             std::deque<std::string>& arena) const {
    if (kind == Kind::kPrefixSpace) {
      if (!text.empty() && text.front() == ' ') {
        out.push_back(text);
      } else {
        std::string& s = arena.emplace_back();
        s.reserve(text.size() + 1);
        s += ' ';
        s += text;
        out.push_back(s);
      }
      return;
    }
    if (behavior == Behavior::kIsolated && !invert) {
      // The common case (Qwen, GPT-2), without building a segment list.
      size_t pos = 0;
      size_t mb = 0;
      size_t me = 0;
      size_t search = 0;
      while (search <= text.size() && regex->find(text, search, mb, me)) {
        if (me == mb) {  // empty match: not a delimiter; step over one character
          if (mb >= text.size()) break;
          utf8::Decoded d = utf8::decode(text, mb);
          search = mb + (d.len > 0 ? d.len : 1);
          continue;
        }
        if (mb > pos) out.push_back(text.substr(pos, mb - pos));
        out.push_back(text.substr(mb, me - mb));
        pos = me;
        search = me;
      }
      if (pos < text.size()) out.push_back(text.substr(pos));
      return;
    }
    std::vector<Segment> segs;
    size_t pos = 0;
    size_t mb = 0;
    size_t me = 0;
    size_t search = 0;
    while (search <= text.size() && regex->find(text, search, mb, me)) {
      if (me == mb) {
        if (mb >= text.size()) break;
        utf8::Decoded d = utf8::decode(text, mb);
        search = mb + (d.len > 0 ? d.len : 1);
        continue;
      }
      if (mb > pos) segs.push_back({pos, mb, invert});
      segs.push_back({mb, me, !invert});
      pos = me;
      search = me;
    }
    if (pos < text.size()) segs.push_back({pos, text.size(), invert});

    std::vector<Segment> merged;
    switch (behavior) {
      case Behavior::kIsolated: merged = segs; break;
      case Behavior::kRemoved:
        for (const Segment& s : segs) {
          if (!s.is_match) merged.push_back(s);
        }
        break;
      case Behavior::kMergedWithPrevious: {
        bool prev_match = false;
        for (const Segment& s : segs) {
          if (s.is_match && !prev_match && !merged.empty()) {
            merged.back().end = s.end;
          } else {
            merged.push_back(s);
          }
          prev_match = s.is_match;
        }
        break;
      }
      case Behavior::kMergedWithNext: {
        bool prev_match = false;
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
          if (it->is_match && !prev_match && !merged.empty()) {
            merged.back().begin = it->begin;
          } else {
            merged.push_back(*it);
          }
          prev_match = it->is_match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
      }
      case Behavior::kContiguous: {
        bool prev_match = false;
        for (const Segment& s : segs) {
          if (s.is_match == prev_match && !merged.empty()) {
            merged.back().end = s.end;
          } else {
            merged.push_back(s);
          }
          prev_match = s.is_match;
        }
        break;
      }
    }
    for (const Segment& s : merged) {
      if (s.end > s.begin) out.push_back(text.substr(s.begin, s.end - s.begin));
    }
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

namespace {

void add_steps(std::vector<PreTokenizer::Step>& steps, bool& byte_level, const Json& spec,
               std::string_view where);

}  // namespace

PreTokenizer PreTokenizer::from_json(const Json& spec, std::string_view where) {
  PreTokenizer p;
  add_steps(p.steps_, p.byte_level_, spec, where);
  return p;
}

namespace {

void add_steps(std::vector<PreTokenizer::Step>& steps, bool& byte_level, const Json& spec,
               std::string_view where) {
  using Step = PreTokenizer::Step;
  if (spec.is_null()) return;
  std::string ctx = std::string(where) + ": pre_tokenizer";
  if (!spec.is_object()) invalid_argument(ctx + " must be an object or null");
  std::string type = get_string(spec, "type", ctx);
  if (type == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array())
      invalid_argument(ctx + ": Sequence needs a 'pretokenizers' array");
    for (const Json& s : *it) add_steps(steps, byte_level, s, where);
  } else if (type == "Split") {
    auto it = spec.find("pattern");
    if (it == spec.end() || !it->is_object())
      invalid_argument(ctx + ": Split needs a 'pattern' object");
    Step step;
    if (auto re = get_optional_string(*it, "Regex", ctx + ".pattern")) {
      step.regex =
          std::make_unique<Regex>(rewrite_caseless_groups(*re), false, ctx + ".pattern.Regex");
    } else if (auto lit = get_optional_string(*it, "String", ctx + ".pattern")) {
      step.regex = std::make_unique<Regex>(*lit, true, ctx + ".pattern.String");
    } else {
      invalid_argument(ctx + ": Split pattern needs 'Regex' or 'String'");
    }
    step.behavior =
        parse_behavior(get_optional_string(spec, "behavior", ctx).value_or("Isolated"), ctx);
    step.invert = get_optional_bool(spec, "invert", ctx).value_or(false);
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    byte_level = true;
    // HF: each piece not starting with a space gets one, then (use_regex) the GPT-2 split.
    if (get_optional_bool(spec, "add_prefix_space", ctx).value_or(true)) {
      Step step;
      step.kind = Step::Kind::kPrefixSpace;
      steps.push_back(std::move(step));
    }
    if (get_optional_bool(spec, "use_regex", ctx).value_or(true)) {
      Step step;
      step.regex = std::make_unique<Regex>(rewrite_caseless_groups(kGpt2Pattern), false,
                                           ctx + " (ByteLevel regex)");
      steps.push_back(std::move(step));
    }
  } else {
    invalid_argument(ctx + ": unsupported pre-tokenizer type '" + type +
                     "' (supported: Split, ByteLevel, Sequence)");
  }
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out,
                         std::deque<std::string>& arena) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    out.push_back(text);
    return;
  }
  if (steps_.size() == 1) {
    steps_[0].apply(text, out, arena);
    return;
  }
  std::vector<std::string_view> cur{text};
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : cur) step.apply(piece, next, arena);
    cur.swap(next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace ajet::text
