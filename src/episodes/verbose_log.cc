#include "episodes/verbose_log.h"

#include "common/log.h"
#include "episodes/registry.h"

namespace ajet::episodes {

void VerboseLog::add(std::string tag, std::string message, bool mirror) {
  // Messages quote what requests said; each is kept to kMaxMessageBytes so the ring's size is
  // bounded.
  if (message.size() > kMaxMessageBytes) {
    // Cut on a character boundary: to_json's dump refuses invalid UTF-8.
    size_t keep = kMaxMessageBytes;
    while (keep > 0 && (static_cast<uint8_t>(message[keep]) & 0xC0) == 0x80) --keep;
    const size_t cut = message.size() - keep;
    message.resize(keep);
    message += "… (" + std::to_string(cut) + " more bytes)";
  }
  if (mirror) log().info("[{}] {}", tag, message);
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back(VerboseEntry{system_clock_seconds(), std::move(tag), std::move(message)});
  while (entries_.size() > capacity_) entries_.pop_front();
}

Json VerboseLog::to_json(size_t limit) const {
  Json entries = Json::array();
  std::lock_guard<std::mutex> lock(mu_);
  size_t skip = entries_.size() > limit ? entries_.size() - limit : 0;
  for (size_t i = skip; i < entries_.size(); ++i) {
    const VerboseEntry& e = entries_[i];
    entries.push_back({{"timestamp", e.timestamp}, {"tag", e.tag}, {"message", e.message}});
  }
  return Json{{"entries", std::move(entries)}};
}

size_t VerboseLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace ajet::episodes
