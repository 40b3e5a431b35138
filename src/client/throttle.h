// The client-side throttle of cocktail training (upstream `_check_throttle_policy`): before
// claiming a train episode for a *new* task, a client holds back while it already has
// expected_batch_size x ratio distinct tasks of its own in the batch. Pure logic on the pool info;
// the same rules as the Python client (clients/python/ajet_swarm/throttle.py).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "client/swarm_types.h"
#include "common/json.h"

namespace ajet::client {

// Task ids this client started recently (upstream keeps batch x repeat x 3 of them).
class RecentTasks {
 public:
  bool contains(const std::string& task_id) const;
  void remember(const std::string& task_id, int64_t batch, int64_t repeat);

 private:
  std::deque<std::string> ids_;
};

// std::nullopt: claim now (and the task is remembered). Otherwise the reason to wait. Throws
// Error(kInvalidArgument) for an empty current_task_id, a non task-based trigger, or sizes that
// neither the policy nor the pool info supply.
std::optional<std::string> throttle_decision(const ThrottlePolicy& policy, const Json& pool_info,
                                             const std::string& client_uuid, RecentTasks& recent);

}  // namespace ajet::client
