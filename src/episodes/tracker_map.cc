#include "episodes/tracker_map.h"

#include <malloc.h>

namespace ajet::episodes {

TrackedEpisode TrackerMap::get_or_create(const std::string& uuid,
                                         const std::shared_ptr<const ModelContext>& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(uuid);
  if (it != map_.end() && it->second.model == model) return it->second;
  TrackedEpisode t{model, std::make_shared<tracking::EpisodeTracker>(uuid, *model->format)};
  map_[uuid] = t;
  return t;
}

void TrackerMap::put(const std::string& uuid, TrackedEpisode tracked) {
  std::lock_guard<std::mutex> lock(mu_);
  map_[uuid] = std::move(tracked);
}

namespace {

// Trackers holding at least this much make their drop hand free memory back to the system: glibc
// keeps freed heap (e.g. thousands of calls' token arrays) in its arenas otherwise, and the front's
// RSS would stay at its peak after the episode ended.
constexpr size_t kTrimAfterBytes = size_t(4) << 20;

void release_tracker(std::shared_ptr<tracking::EpisodeTracker> tracker) {
  if (!tracker) return;
  const bool large = tracker->memory_bytes() >= kTrimAfterBytes;
  const bool last =
      tracker.use_count() == 1;  // a call in flight may still hold it: freed then, untrimmed
  tracker.reset();
  if (large && last) ::malloc_trim(0);
}

}  // namespace

void TrackerMap::drop(const std::string& uuid) {
  TrackedEpisode dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(uuid);
    if (it == map_.end()) return;
    dropped = std::move(it->second);
    map_.erase(it);
  }
  release_tracker(std::move(dropped.tracker));  // outside the mutex
}

void TrackerMap::clear() {
  std::unordered_map<std::string, TrackedEpisode> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old.swap(map_);
  }
  size_t bytes = 0;
  for (auto& [uuid, tracked] : old) bytes += tracked.tracker ? tracked.tracker->memory_bytes() : 0;
  old.clear();
  if (bytes >= kTrimAfterBytes) ::malloc_trim(0);
}

size_t TrackerMap::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace ajet::episodes
