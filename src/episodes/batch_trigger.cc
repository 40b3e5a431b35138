#include "episodes/batch_trigger.h"

#include <cmath>

#include "common/error.h"

namespace ajet::episodes {

namespace {
constexpr std::pair<SampleCollection, std::string_view> kMethods[] = {
    {SampleCollection::kEnoughTasks, "rollout_until_finish_enough_tasks"},
    {SampleCollection::kEnoughEpisodes, "rollout_until_finish_enough_episodes"},
    {SampleCollection::kEnoughNonDummyTasks, "rollout_until_finish_enough_non_dummy_tasks"},
    {SampleCollection::kAnyClientAgrees, "rollout_until_any_client_agree_sync_weight"},
    {SampleCollection::kAllClientsAgree, "rollout_until_all_clients_agree_sync_weight"},
};
}  // namespace

std::string_view sample_collection_name(SampleCollection method) {
  for (const auto& [m, name] : kMethods) {
    if (m == method) return name;
  }
  return kMethods[0].second;
}

SampleCollection parse_sample_collection(std::string_view name) {
  for (const auto& [m, n] : kMethods) {
    if (n == name) return m;
  }
  invalid_argument("ajet.swarm_mode_sample_collection_method: unknown method '" +
                   std::string(name) + "'");
}

bool is_agree_based(SampleCollection method) {
  return method == SampleCollection::kAnyClientAgrees ||
         method == SampleCollection::kAllClientsAgree;
}

void BatchProgress::count(const FinishedEpisode& e) {
  TaskCount& c = counts_[e.task_id];
  if (c.episodes == 0) c.first_reward = e.reward;
  c.all_rewards_equal = c.all_rewards_equal && e.reward == c.first_reward;
  c.episodes += 1;
}

void BatchProgress::add(FinishedEpisode episode) {
  items_.push_back(std::move(episode));
  count(items_.back());
}

void BatchProgress::prepend(std::vector<FinishedEpisode> episodes) {
  for (auto& e : items_) episodes.push_back(std::move(e));
  items_ = std::move(episodes);
  counts_.clear();
  for (const auto& e : items_) count(e);
}

std::vector<FinishedEpisode> BatchProgress::take_all() {
  std::vector<FinishedEpisode> out = std::move(items_);
  items_.clear();
  counts_.clear();
  return out;
}

std::map<std::string, TaskStats> BatchProgress::task_stats() const {
  std::map<std::string, TaskStats> out;
  for (const auto& e : items_) {
    TaskStats& s = out[e.task_id];
    s.episode_uuids.push_back(e.episode_uuid);
    s.client_uuids.push_back(e.client_uuid);
    s.rewards.push_back(e.reward);
  }
  for (auto& [task, s] : out) {
    const auto& r = s.rewards;
    double sum = 0;
    for (double v : r) sum += v;
    s.reward_mean = sum / double(r.size());
    double sq = 0;
    for (double v : r) {
      sq += (v - s.reward_mean) * (v - s.reward_mean);
      if (v != r.front()) s.all_rewards_equal = false;
    }
    s.reward_std = std::sqrt(sq / double(r.size()));
  }
  return out;
}

size_t BatchProgress::finished_tasks(int64_t num_repeat) const {
  size_t n = 0;
  for (const auto& [task, c] : counts_) n += c.episodes >= num_repeat ? 1 : 0;
  return n;
}

size_t BatchProgress::finished_non_dummy_tasks(int64_t num_repeat) const {
  size_t n = 0;
  for (const auto& [task, c] : counts_)
    n += (c.episodes >= num_repeat && !c.all_rewards_equal) ? 1 : 0;
  return n;
}

bool batch_triggered(const BatchProgress& progress, const TriggerInput& in) {
  switch (in.method) {
    case SampleCollection::kEnoughTasks:
      return int64_t(progress.finished_tasks(in.num_repeat)) >= in.train_batch_size;
    case SampleCollection::kEnoughEpisodes:
      return int64_t(progress.episodes()) >= in.train_batch_size * in.num_repeat;
    case SampleCollection::kEnoughNonDummyTasks:
      return int64_t(progress.finished_non_dummy_tasks(in.num_repeat)) >= in.train_batch_size;
    case SampleCollection::kAnyClientAgrees:
      return progress.episodes() > 0 && in.agreed_clients > 0;
    case SampleCollection::kAllClientsAgree:
      return progress.episodes() > 0 && in.active_clients > 0 &&
             in.agreed_clients == in.active_clients;
  }
  return false;
}

}  // namespace ajet::episodes
