// Small string helpers shared by modules that must not depend on each other. ASCII only, no locale.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace ajet {

// `s` with A-Z turned into a-z (other bytes unchanged): for case-insensitive names and keywords.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Levenshtein distance between `a` and `b` (insertions, deletions, substitutions each cost 1).
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `typed` for a "did you mean X?" hint: at most a third of its length
// (rounded up; at least 1, at most 3) edits away, so "strat" finds "start"; "" when none is that
// close. Ties go to the first candidate.
inline std::string closest_name(std::string_view typed,
                                const std::vector<std::string>& candidates) {
  const size_t limit = std::clamp<size_t>((typed.size() + 2) / 3, 1, 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(typed, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

// A LoRA adapter's name (engine/adapters.h): 1..64 of [A-Za-z0-9_.-], not starting with '.'.
// Empty when `name` is one, else what is wrong ("is empty", "may hold only ...").
inline std::string adapter_name_problem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > 64) return "is longer than 64 characters";
  if (name[0] == '.') return "must not start with '.'";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return "may hold only letters, digits, '_', '.' and '-'";
  }
  return "";
}

}  // namespace ajet
