// The ring of recent status lines served by GET /get_verbose_logs: supervisor events, registry
// transitions, janitor reclaims, batch notes. Bounded (old lines fall off); never blocks for long.
// Thread-safe; never holds secrets or prompt text.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <string>

#include "common/json.h"

namespace ajet::episodes {

struct VerboseEntry {
  double timestamp = 0;  // unix seconds
  std::string tag;       // "engine", "swarm", "janitor", "batch", ...
  std::string message;
};

class VerboseLog {
 public:
  explicit VerboseLog(size_t capacity = 500) : capacity_(capacity) {}
  // A longer message is cut to this many bytes, its tail named by its length.
  static constexpr size_t kMaxMessageBytes = 4096;

  // Adds a line; `mirror` also writes it to the process log at info level (the registry logs its
  // own lines already, so its hook passes false).
  void add(std::string tag, std::string message, bool mirror = true);
  // {"entries": [{"timestamp", "tag", "message"}...]}, oldest first; the newest `limit` lines.
  Json to_json(size_t limit = 200) const;
  size_t size() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<VerboseEntry> entries_;
};

}  // namespace ajet::episodes
