#include "client/throttle.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace ajet::client {

namespace {

constexpr const char* kTaskBasedMethod = "rollout_until_finish_enough_tasks";

int64_t int_field(const Json& pool, const char* key) {
  auto it = pool.find(key);
  return it != pool.end() && it->is_number() ? it->get<int64_t>() : 0;
}

std::string string_field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

bool RecentTasks::contains(const std::string& task_id) const {
  return std::find(ids_.begin(), ids_.end(), task_id) != ids_.end();
}

void RecentTasks::remember(const std::string& task_id, int64_t batch, int64_t repeat) {
  ids_.erase(std::remove(ids_.begin(), ids_.end(), task_id), ids_.end());
  ids_.push_back(task_id);
  const size_t cap = size_t(std::max<int64_t>(1, batch * repeat * 3));
  while (ids_.size() > cap) ids_.pop_front();
}

std::optional<std::string> throttle_decision(const ThrottlePolicy& policy, const Json& pool,
                                             const std::string& client_uuid, RecentTasks& recent) {
  const std::string& task = policy.current_task_id;
  if (task.empty()) invalid_argument("throttle policy: current_task_id must be set");
  if (!pool.is_object()) invalid_argument("throttle policy: the pool info is not a JSON object");
  const std::string method = string_field(pool, "sample_collection_method");
  if (!method.empty() && method != kTaskBasedMethod) {
    invalid_argument(fmt::format(
        "throttle policy needs ajet.swarm_mode_sample_collection_method = {} (the server "
        "uses {})",
        kTaskBasedMethod, method));
  }
  const int64_t batch =
      policy.expected_batch_size.value_or(int_field(pool, "completed_task_target"));
  const int64_t repeat =
      policy.expected_num_repeat.value_or(int_field(pool, "task_expected_num_repeat"));
  if (batch <= 0 || repeat <= 0) {
    invalid_argument(
        fmt::format("throttle policy: expected_batch_size and expected_num_repeat must be positive "
                    "(got {} and {})",
                    batch, repeat));
  }

  std::set<std::string> mine, alien;
  std::map<std::string, int64_t> counts;
  if (auto it = pool.find("completed_tasks_client_uuids"); it != pool.end() && it->is_object()) {
    for (const auto& [task_id, clients] : it->items()) {
      if (!clients.is_array()) continue;
      for (const auto& c : clients) {
        counts[task_id] += 1;
        (c.is_string() && c.get<std::string>() == client_uuid ? mine : alien).insert(task_id);
      }
    }
  }
  bool any_running = false;
  if (auto it = pool.find("running_episode_details"); it != pool.end() && it->is_object()) {
    for (const auto& [uuid, detail] : it->items()) {
      any_running = true;
      if (!detail.is_object()) continue;
      const std::string task_id = string_field(detail, "optional_task_id");
      if (task_id.empty()) continue;
      counts[task_id] += 1;
      (string_field(detail, "client_uuid") == client_uuid ? mine : alien).insert(task_id);
    }
  }

  auto admit = [&]() -> std::optional<std::string> {
    recent.remember(task, batch, repeat);
    return std::nullopt;
  };
  if (!any_running) {
    int64_t finished = 0;
    for (const auto& [id, n] : counts) finished += n >= repeat ? 1 : 0;
    if (finished < batch) return admit();
  }
  if (recent.contains(task) || mine.count(task) || alien.count(task)) return admit();
  int64_t own_unique = 0;
  for (const auto& t : mine) own_unique += alien.count(t) ? 0 : 1;
  const double limit = double(batch) * policy.ratio;
  if (double(own_unique) >= limit) {
    return fmt::format(
        "this client already has {} distinct tasks in the batch (limit {:g} = expected_batch_size "
        "{} "
        "x ratio {:g}); holding back task '{}'",
        own_unique, limit, batch, policy.ratio, task);
  }
  return admit();
}

}  // namespace ajet::client
