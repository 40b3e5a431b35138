// The tokenizer.json "normalizer": Unicode normal forms through utf8proc, with a fast path that
// skips the library when the text cannot change (ASCII, CJK, emoji...). Never sees invalid UTF-8:
// the caller repairs input first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace ajet::text {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
  Normalizer() = default;
  // `spec` is the "normalizer" value (null, NFC/NFD/NFKC/NFKD or a Sequence of them); anything else
  // throws Error naming `where` and the type.
  static Normalizer from_json(const Json& spec, std::string_view where);

  bool is_identity() const { return steps_.empty(); }
  // Returns the normalized text: a view of `text` itself when nothing changes, else of `storage`.
  // `text` must be valid UTF-8 and must not alias `storage`.
  std::string_view apply(std::string_view text, std::string& storage) const;

 private:
  std::vector<NormalForm> steps_;
};

// Whether `cp` is unchanged by NFC in any string made only of such code points (no decomposition
// that NFC keeps, combining class 0, never the second half of a composition). Exposed for tests.
bool nfc_inert(char32_t cp);
// NFC of valid UTF-8 through utf8proc, without the fast path (the reference for tests).
std::string nfc_reference(std::string_view text);

}  // namespace ajet::text
