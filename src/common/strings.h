// Small string helpers shared by modules that must not depend on each other. ASCII only, no locale.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace ajet {

// `s` with A-Z turned into a-z (other bytes unchanged): for case-insensitive names and keywords.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace ajet
