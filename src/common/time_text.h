// Local wall-clock time as text (strftime formats), for file names, lock files and log lines.
#pragma once

#include <ctime>
#include <string>

namespace ajet {

// `t` (default: now) in local time, formatted with `format` (at most 63 characters of output).
inline std::string local_time_text(const char* format, std::time_t t = std::time(nullptr)) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char text[64];
  const size_t n = std::strftime(text, sizeof text, format, &tm);
  return std::string(text, n);
}

// Today's local date, YYYY-MM-DD (what `date -I` prints): the benchmarks' entries in
// docs/benchmarks.md.
inline std::string local_date_text() { return local_time_text("%Y-%m-%d"); }

}  // namespace ajet
