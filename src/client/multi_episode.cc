#include "client/multi_episode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <exception>
#include <thread>

#include "common/encoding.h"
#include "common/log.h"

namespace ajet::client {

namespace {

// Runs fn(i) for every i on its own thread; returns each one's error message ("" when it
// succeeded).
std::vector<std::string> on_each(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const std::exception& e) {
        errors[i] = e.what();
        if (errors[i].empty()) errors[i] = "unknown error";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Two members on one server (several adapters of one engine).
bool same_server(SwarmClient* a, SwarmClient* b) {
  return a == b || a->server_url() == b->server_url();
}

std::string failures(const std::vector<SwarmClient*>& servers,
                     const std::vector<std::string>& errors) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i].empty()) parts.push_back(servers[i]->server_url() + ": " + errors[i]);
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

MultiEpisode::MultiEpisode(std::vector<SwarmClient*> servers, std::vector<Episode> episodes)
    : servers_(std::move(servers)), episodes_(std::move(episodes)), group_id_(new_uuid_hex()) {}

MultiEpisode MultiEpisode::begin(const std::vector<SwarmClient*>& servers,
                                 const ClaimOptions& options) {
  std::vector<GroupMember> members;
  for (SwarmClient* server : servers) members.push_back(GroupMember{server, options});
  return begin_members(members);
}

MultiEpisode MultiEpisode::begin_members(const std::vector<GroupMember>& members) {
  if (members.empty()) throw SwarmError(SwarmErrorKind::kCommand, "MultiEpisode: no servers given");
  std::vector<SwarmClient*> servers;
  for (const GroupMember& m : members) {
    if (m.server == nullptr)
      throw SwarmError(SwarmErrorKind::kCommand, "MultiEpisode: a member has no server");
    servers.push_back(m.server);
  }
  std::vector<Episode> episodes(servers.size());
  std::vector<std::string> errors = on_each(
      servers.size(), [&](size_t i) { episodes[i] = servers[i]->begin_episode(members[i].claim); });
  if (failures(servers, errors).empty()) {
    MultiEpisode group(servers, std::move(episodes));
    for (const GroupMember& m : members) group.adapters_.push_back(m.claim.adapter);
    return group;
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    if (errors[i].empty()) servers[i]->abort_episode(episodes[i].episode_uuid);
  }
  throw SwarmError(SwarmErrorKind::kCommand,
                   "MultiEpisode: claiming failed on " + failures(servers, errors));
}

MultiEpisode::~MultiEpisode() {
  if (!settled_ && !episodes_.empty()) abort();
}

void MultiEpisode::abort() {
  settled_ = true;
  on_each(servers_.size(),
          [&](size_t i) { servers_[i]->abort_episode(episodes_[i].episode_uuid); });
}

void MultiEpisode::end(const std::string& task_id, const std::vector<WorkflowOutput>& outputs,
                       const MultiEndOptions& options) {
  std::vector<std::string> task_ids;
  for (size_t i = 0; i < servers_.size(); ++i) task_ids.push_back(member_task_id(i, task_id));
  end(task_ids, outputs, options);
}

std::string MultiEpisode::member_task_id(size_t i, const std::string& task_id) const {
  size_t sharing = 0;
  for (SwarmClient* s : servers_) sharing += same_server(s, servers_.at(i)) ? 1 : 0;
  if (sharing < 2) return task_id;
  const std::string& adapter = i < adapters_.size() ? adapters_[i] : std::string();
  return task_id + "@" + (adapter.empty() ? "member" + std::to_string(i) : adapter);
}

void MultiEpisode::end(const std::vector<std::string>& task_ids,
                       const std::vector<WorkflowOutput>& outputs, const MultiEndOptions& options) {
  if (settled_)
    throw SwarmError(SwarmErrorKind::kCommand, "MultiEpisode " + group_id_ + " was already ended");
  if (outputs.size() != servers_.size()) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     fmt::format("MultiEpisode::end: {} outputs for {} servers", outputs.size(),
                                 servers_.size()));
  }
  if (task_ids.size() != servers_.size()) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     fmt::format("MultiEpisode::end: {} task ids for {} servers", task_ids.size(),
                                 servers_.size()));
  }
  // Phase 1: prepare everywhere. The coordinator (server 0) names no coordinator.
  std::vector<Prepared> prepared(servers_.size());
  std::vector<std::string> errors = on_each(servers_.size(), [&](size_t i) {
    GroupRole role;
    role.group_id = group_id_;
    role.prepare_timeout = options.prepare_timeout;
    if (i > 0) {
      // A member on the coordinator's own front is settled there (no URL: nothing to dial).
      if (!same_server(servers_[i], servers_[0])) role.coordinator_url = servers_[0]->server_url();
      role.coordinator_episode_uuid = episodes_[0].episode_uuid;
      role.coordinator_episode_key = episodes_[0].api_key;
    }
    prepared[i] =
        servers_[i]->prepare_end_episode(task_ids[i], episodes_[i].episode_uuid, outputs[i], role);
  });
  if (std::string failed = failures(servers_, errors); !failed.empty()) {
    abort();
    throw SwarmError(SwarmErrorKind::kCommand, "MultiEpisode " + group_id_ +
                                                   ": prepare failed on " + failed +
                                                   "; every member was aborted");
  }
  std::vector<std::string> changed;
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (prepared[i].weights_changed) {
      changed.push_back(fmt::format("{} (step {} -> {})", servers_[i]->server_url(),
                                    prepared[i].global_step_at_claim, prepared[i].global_step));
    }
  }
  if (!changed.empty() && !options.keep_if_weights_changed) {
    abort();
    throw WeightUpdatedHalfway(
        fmt::format("MultiEpisode {}: the weights changed during the rollout on {}; every "
                    "member was aborted, redo the rollout",
                    group_id_, fmt::join(changed, ", ")));
  }
  // Phase 2: the coordinator's commit decides; after it the group is committed everywhere.
  try {
    servers_[0]->commit_episode(episodes_[0].episode_uuid);
  } catch (const std::exception& e) {
    abort();
    throw SwarmError(SwarmErrorKind::kCommand,
                     fmt::format("MultiEpisode {}: the coordinator refused the commit ({}); "
                                 "every member was aborted",
                                 group_id_, e.what()));
  }
  settled_ = true;
  if (options.after_coordinator_commit) options.after_coordinator_commit();
  errors = on_each(servers_.size() - 1, [&](size_t i) {
    servers_[i + 1]->commit_episode(episodes_[i + 1].episode_uuid);
  });
  for (size_t i = 0; i < errors.size(); ++i) {
    // The group is committed: a participant the client could not tell commits when it asks the
    // coordinator after its prepare_timeout.
    if (!errors[i].empty()) {
      log().warn(
          "MultiEpisode {}: commit on {} failed ({}); that server commits it after its "
          "prepare_timeout",
          group_id_, servers_[i + 1]->server_url(), errors[i]);
    }
  }
}

}  // namespace ajet::client
