#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "text/utf8.h"

namespace ajet::text {

namespace {

// One bit per code point: 1 = NFC-inert (see nfc_inert). Built once per process (~140 KB).
class InertTable {
 public:
  InertTable() : bits_((0x110000 + 63) / 64, 0) {
    for (char32_t cp = 0; cp < 0x110000; ++cp) {
      if (compute(cp)) bits_[cp >> 6] |= uint64_t{1} << (cp & 63);
    }
  }
  bool get(char32_t cp) const { return cp < 0x110000 && ((bits_[cp >> 6] >> (cp & 63)) & 1); }

 private:
  static bool compute(char32_t cp) {
    if (cp < 0x300)
      return true;  // nothing below U+0300 decomposes under NFC or composes as a second
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    // Conjoining jamo compose algorithmically (L+V, LV+T); utf8proc does not flag them.
    if (cp >= 0x1100 && cp <= 0x11FF) return false;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (p->combining_class != 0) return false;
    // comb_index >= 0x8000 (but not 0xFFFF, "none") marks the second character of a composition
    // pair.
    if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) {
      // Canonically decomposable: inert only if NFC recomposes it to itself (not excluded).
      std::string s;
      utf8::append(s, cp);
      return nfc_reference(s) == s;
    }
    return true;
  }
  std::vector<uint64_t> bits_;
};

const InertTable& inert_table() {
  static const InertTable t;
  return t;
}

int options_for(NormalForm form) {
  switch (form) {
    case NormalForm::kNfc: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case NormalForm::kNfd: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case NormalForm::kNfkc: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    case NormalForm::kNfkd: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  }
  return 0;
}

std::string run_utf8proc(std::string_view text, NormalForm form) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options_for(form)));
  if (n < 0) {
    // Only reachable with invalid UTF-8, which the tokenizer repairs before normalizing.
    fail(ErrorCode::kInternal, std::string("utf8proc: ") + utf8proc_errmsg(n));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

bool all_inert(std::string_view text) {
  const InertTable& table = inert_table();
  size_t i = 0;
  while (i < text.size()) {
    auto b = static_cast<uint8_t>(text[i]);
    if (b < 0xCC) {  // lead bytes below 0xCC encode code points below U+0300
      ++i;
      continue;
    }
    utf8::Decoded d = utf8::decode(text, i);
    if (d.len == 0 || !table.get(d.cp)) return false;
    i += d.len;
  }
  return true;
}

void add_step(std::vector<NormalForm>& steps, const Json& spec, std::string_view where) {
  if (spec.is_null()) return;
  if (!spec.is_object())
    invalid_argument(std::string(where) + ": normalizer must be an object or null");
  std::string type = get_string(spec, "type", std::string(where) + ": normalizer");
  if (type == "NFC") {
    steps.push_back(NormalForm::kNfc);
  } else if (type == "NFD") {
    steps.push_back(NormalForm::kNfd);
  } else if (type == "NFKC") {
    steps.push_back(NormalForm::kNfkc);
  } else if (type == "NFKD") {
    steps.push_back(NormalForm::kNfkd);
  } else if (type == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) {
      invalid_argument(std::string(where) + ": Sequence normalizer needs a 'normalizers' array");
    }
    for (const Json& s : *it) add_step(steps, s, where);
  } else {
    invalid_argument(std::string(where) + ": unsupported normalizer type '" + type +
                     "' (supported: NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

}  // namespace

bool nfc_inert(char32_t cp) { return inert_table().get(cp); }

std::string nfc_reference(std::string_view text) { return run_utf8proc(text, NormalForm::kNfc); }

Normalizer Normalizer::from_json(const Json& spec, std::string_view where) {
  Normalizer n;
  add_step(n.steps_, spec, where);
  return n;
}

std::string_view Normalizer::apply(std::string_view text, std::string& storage) const {
  std::string_view cur = text;
  for (NormalForm form : steps_) {
    if (form == NormalForm::kNfc && all_inert(cur)) continue;
    storage = run_utf8proc(cur, form);
    cur = storage;
  }
  return cur;
}

}  // namespace ajet::text
