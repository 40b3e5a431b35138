// Internal to src/hf: JSON text -> Json where every nlohmann exception becomes an ajet::Error.
// (ajet::parse_json once let out_of_range escape, e.g. "1e+600", found by fuzzing; it now reports
// every parser error itself, and this stays as a second net.)
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"

namespace ajet::hf::detail {

inline Json parse_json_text(std::string_view text, std::string_view where) {
  try {
    return parse_json(text, where);
  } catch (const Json::exception& e) {
    invalid_argument(std::string(where) + ": invalid JSON: " + e.what());
  }
}

}  // namespace ajet::hf::detail
