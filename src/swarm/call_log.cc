#include "swarm/call_log.h"

#include <fmt/format.h>

#include "common/log.h"

namespace ajet::swarm {

std::optional<int64_t> RateLimitedLog::admit(const std::string& key) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = slots_.try_emplace(key);
  Slot& slot = it->second;
  if (!fresh && now - slot.last < period_) {
    ++slot.held;
    return std::nullopt;
  }
  const int64_t held = slot.held;
  slot = Slot{now, 0};
  return held;
}

namespace {

RateLimitedLog& call_lines() {
  static RateLimitedLog lines(std::chrono::seconds(10));
  return lines;
}

std::string held_back(int64_t held) {
  return held == 0 ? std::string()
                   : fmt::format(" ({} more like it in the last 10 s not logged)", held);
}

// A message cut to a line's worth: a refusal can quote a long field.
std::string_view first_part(std::string_view message) { return message.substr(0, 600); }

}  // namespace

void log_refused_call(std::string_view route, int status, std::string_view message) {
  std::optional<int64_t> held = call_lines().admit(fmt::format("refused {} {}", route, status));
  if (!held) return;
  if (status >= 500) {
    log().error("{} refused ({}): {}{}", route, status, first_part(message), held_back(*held));
  } else {
    log().warn("{} refused ({}): {}{}", route, status, first_part(message), held_back(*held));
  }
}

void log_conversion_notes(std::string_view route, const openai::ConversionNotes& notes) {
  for (const std::string& note : notes) {
    // The note's kind (its text up to the first ':') keys the limit: which tools may vary per call.
    std::optional<int64_t> held =
        call_lines().admit(fmt::format("{} {}", route, note.substr(0, note.find(':'))));
    if (held) log().info("{}: {}{}", route, note, held_back(*held));
  }
}

}  // namespace ajet::swarm
