// Log lines about /v1 calls that a client can cause on every request: a refused call (its status
// and message, which the client saw but the operator did not) and what an adapter changed in a body
// (tools dropped or flattened). Rate-limited, so that a client repeating a bad request cannot flood
// the log: at most one line per kind (route and status, or route and note) every 10 s, the next
// one saying how many were held back.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "openai/openai_params.h"

namespace ajet::swarm {

// At most one line per key per `period`. admit() says whether this line goes out and, when it does,
// how many lines of that key were held back since the last one. Thread-safe. Keys come from a small
// fixed set the caller builds (route, status), never from request text.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::chrono::steady_clock::duration period) : period_(period) {}
  std::optional<int64_t> admit(const std::string& key);

 private:
  struct Slot {
    std::chrono::steady_clock::time_point last{};
    int64_t held = 0;
  };
  std::chrono::steady_clock::duration period_;
  std::mutex mu_;
  std::unordered_map<std::string, Slot> slots_;
};

// "POST /v1/messages refused (400): <message>" at warn level (5xx: error).
void log_refused_call(std::string_view route, int status, std::string_view message);
// "POST /v1/responses: <note>" per note, at info level.
void log_conversion_notes(std::string_view route, const openai::ConversionNotes& notes);

}  // namespace ajet::swarm
