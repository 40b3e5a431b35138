// MultiEpisode: one rollout across several swarm servers (multi-model training: one server per
// model). It claims one episode on each server, hands each agent its server's base URL and key, and
// ends the group all-or-nothing by the protocol of docs/protocol.md "Episode groups across
// servers": prepare on every server, commit on the first (the coordinator: the group's decision),
// then commit on the rest. A weight update on any server between claim and end aborts the group and
// throws WeightUpdatedHalfway (upstream's name; redo the rollout), unless the caller keeps such
// groups.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "client/swarm_client.h"

namespace ajet::client {

// Some server trained between this group's claim and its end; every member was aborted.
class WeightUpdatedHalfway : public SwarmError {
 public:
  explicit WeightUpdatedHalfway(const std::string& message)
      : SwarmError(SwarmErrorKind::kCommand, message, 409) {}
};

struct MultiEndOptions {
  double prepare_timeout =
      60;  // seconds the servers wait for this client's commit before settling alone
  bool keep_if_weights_changed =
      false;  // true: commit anyway (trained off-policy, within max_staleness)
  // Test hook: runs after the coordinator's commit and before the participants' (kill the client
  // here).
  std::function<void()> after_coordinator_commit;
};

// One member of a group: the server its episode is claimed on and how (options.adapter: the LoRA
// adapter of that server's engine the episode's calls run on). Several members may share a server
// (several adapters of one engine): the group is all-or-nothing all the same.
struct GroupMember {
  SwarmClient* server = nullptr;
  ClaimOptions claim;
};

class MultiEpisode {
 public:
  // Claims one episode on each server, concurrently. If any claim fails, the claimed ones are
  // aborted and the error is rethrown. `servers` must outlive this object; the first is the
  // coordinator.
  static MultiEpisode begin(const std::vector<SwarmClient*>& servers,
                            const ClaimOptions& options = {});
  // The same with each member's own claim options; members on the first member's server are its
  // local participants (docs/protocol.md "Episode groups across servers").
  static MultiEpisode begin_members(const std::vector<GroupMember>& members);
  ~MultiEpisode();  // aborts every member unless the group was ended or aborted
  MultiEpisode(MultiEpisode&&) noexcept = default;
  MultiEpisode& operator=(MultiEpisode&&) = delete;
  MultiEpisode(const MultiEpisode&) = delete;

  size_t size() const { return episodes_.size(); }
  const Episode& episode(size_t i) const {
    return episodes_.at(i);
  }  // base_url, api_key of server i
  const std::string& group_id() const { return group_id_; }

  // Ends the group: outputs[i] is server i's workflow output (its model's reward); one task id for
  // all (the GRPO groups line up on every server), except that a member sharing its server with
  // another reports "<task_id>@<its adapter>" (member_task_id). All or nothing: throws after
  // aborting every member when any prepare or the coordinator's commit is refused
  // (WeightUpdatedHalfway for a weight update).
  void end(const std::string& task_id, const std::vector<WorkflowOutput>& outputs,
           const MultiEndOptions& options = {});
  // The same with each member's own task id (members sharing a server keep their GRPO groups apart
  // by task id: "t@caller", "t@answerer").
  void end(const std::vector<std::string>& task_ids, const std::vector<WorkflowOutput>& outputs,
           const MultiEndOptions& options = {});
  void abort();  // never throws
  // The task id member i reports for the group's `task_id` (see end).
  std::string member_task_id(size_t i, const std::string& task_id) const;

 private:
  MultiEpisode(std::vector<SwarmClient*> servers, std::vector<Episode> episodes);

  std::vector<SwarmClient*> servers_;
  std::vector<Episode> episodes_;
  std::vector<std::string> adapters_;  // each member's claim adapter ("" for the served model)
  std::string group_id_;
  bool settled_ = false;
};

}  // namespace ajet::client
