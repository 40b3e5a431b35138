#include "episodes/tracker_map.h"

namespace ajet::swarm {

TrackedEpisode TrackerMap::get_or_create(const std::string& uuid, const std::shared_ptr<const ModelContext>& model) {
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

void TrackerMap::drop(const std::string& uuid) {
  TrackedEpisode dropped;  // destroyed outside the mutex
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(uuid);
  if (it == map_.end()) return;
  dropped = std::move(it->second);
  map_.erase(it);
}

void TrackerMap::clear() {
  std::unordered_map<std::string, TrackedEpisode> old;
  std::lock_guard<std::mutex> lock(mu_);
  old.swap(map_);
}

size_t TrackerMap::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace ajet::swarm
