// The tokenizer.json "pre_tokenizer": splits normalized text into the words BPE runs on, with the
// regexes GPT-2 / Qwen files carry (PCRE2, UTF + UCP, JIT-compiled once). Only sees valid UTF-8.
// Never allocates per match beyond the output vector.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace ajet::text {

// A compiled PCRE2 pattern, shareable across threads (match data is per thread).
class Regex {
 public:
  // `literal`: match the pattern text verbatim. Throws Error naming `where` on a bad pattern.
  Regex(std::string_view pattern, bool literal, std::string_view where);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Finds the first match at or after `start` in valid UTF-8 `subject` (start on a character
  // boundary). Returns false when there is none.
  bool find(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const;
  bool jit() const { return jit_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  bool jit_ = false;
};

// HF writes `(?i:'s|'t|...)` (Oniguruma). PCRE2's caseless mode also folds U+017F to 's' and
// U+212A to 'k', which HF's and the JS tokenizer's matching do not; so ASCII letters inside such a
// group become [sS] classes. Groups holding classes or escapes other than quoted punctuation are
// left alone. Exposed for tests.
std::string rewrite_caseless_groups(std::string_view pattern);

class PreTokenizer {
 public:
  PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // `spec` is the "pre_tokenizer" value: Split, ByteLevel, or a Sequence of them. Other types throw
  // Error naming `where` and the type.
  static PreTokenizer from_json(const Json& spec, std::string_view where);

  // Whether a ByteLevel step is present (the model then works on bytes).
  bool byte_level() const { return byte_level_; }

  // Appends the non-empty pre-tokens of `text` to `out`. Pieces view `text` or strings kept in
  // `arena` (a ByteLevel prefix space makes new strings).
  void split(std::string_view text, std::vector<std::string_view>& out,
             std::deque<std::string>& arena) const;

  struct Step;  // one split stage; defined in pretokenizer.cc

 private:
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace ajet::text
