// The live episodes' trackers (tracking::EpisodeTracker), keyed by episode uuid, each kept with the
// ModelContext whose chat format it renders with (so the format outlives the tracker). Created on
// an episode's first LLM call (or restored from the store after a restart), dropped when the
// registry closes the episode. Thread-safe; lookups are O(1) under one short mutex. Dropping a
// large tracker hands the freed memory back to the system (malloc_trim), outside the mutex.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "episodes/model_context.h"
#include "tracking/episode_tracker.h"

namespace ajet::episodes {

struct TrackedEpisode {
  std::shared_ptr<const ModelContext> model;
  std::shared_ptr<tracking::EpisodeTracker> tracker;
};

class TrackerMap {
 public:
  // The episode's tracker, created for `model` when missing (or when it was made for another
  // model).
  TrackedEpisode get_or_create(const std::string& episode_uuid,
                               const std::shared_ptr<const ModelContext>& model);
  void put(const std::string& episode_uuid, TrackedEpisode tracked);
  void drop(const std::string& episode_uuid);
  void clear();
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, TrackedEpisode> map_;
};

}  // namespace ajet::episodes
