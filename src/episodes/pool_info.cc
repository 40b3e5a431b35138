// The read-only views of the registry: the rollout-pool info object (upstream
// CurrentBatchRolloutPoolInformation, exact field names, plus marked extras for the monitor), the
// episode buffer, and batch summaries.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/encoding.h"
#include "episodes/registry.h"

namespace ajet::episodes {

Json Batch::summary() const {
  double sum = 0, sq = 0;
  int64_t judged = 0, successes = 0;
  std::map<std::string, std::vector<double>> tasks;
  for (const auto& e : episodes) {
    sum += e.reward;
    tasks[e.task_id].push_back(e.reward);
    if (e.is_success) {
      judged += 1;
      successes += *e.is_success ? 1 : 0;
    }
  }
  double n = double(episodes.size());
  double mean = episodes.empty() ? 0.0 : sum / n;
  std::map<std::string, std::pair<int64_t, std::set<std::string>>> by_client;  // episodes, task ids
  for (const auto& e : episodes) {
    auto& [count, task_ids] = by_client[e.client_uuid];
    count += 1;
    task_ids.insert(e.task_id);
  }
  Json client_shares = Json::object();
  for (const auto& [client, share] : by_client) {
    client_shares[client] = {{"episodes", share.first},
                             {"tasks", share.second.size()},
                             {"share", n > 0 ? double(share.first) / n : 0.0}};
  }
  for (const auto& e : episodes) sq += (e.reward - mean) * (e.reward - mean);
  int64_t non_dummy = 0;
  for (const auto& [task, rewards] : tasks) {
    for (double r : rewards) {
      if (r != rewards.front()) {
        non_dummy += 1;
        break;
      }
    }
  }
  Json out{{"batch_id", batch_id},
           {"global_step", global_step},
           {"episodes", episodes.size()},
           {"tasks", tasks.size()},
           {"non_dummy_tasks", non_dummy},
           {"reward_mean", mean},
           {"reward_std", episodes.empty() ? 0.0 : std::sqrt(sq / n)},
           {"success_rate", judged > 0 ? Json(double(successes) / double(judged)) : Json(nullptr)},
           {"client_shares", std::move(client_shares)}};
  if (!aborted_by_cause.empty()) out["aborted"] = aborted_by_cause;
  if (policy_version >= 0) {
    // async: versions behind the trainer, per episode (its oldest generated token; every sample
    // merged from the episode lags at most this much). Episodes without a known version are left
    // out.
    Json staleness = Json::object();
    int64_t most = 0;
    for (const auto& e : episodes) {
      if (e.policy_version < 0) continue;
      staleness[e.episode_uuid] = policy_version - e.policy_version;
      most = std::max(most, policy_version - e.policy_version);
    }
    out["policy_version"] = policy_version;
    out["staleness"] = std::move(staleness);
    out["staleness_max"] = most;
  }
  return out;
}

std::string Registry::shown_id(const ViewScope& scope, std::string_view kind, const std::string& id,
                               const std::string& owner) const {
  if (scope.all_ids || id.empty() || (!scope.client_uuid.empty() && owner == scope.client_uuid))
    return id;
  return std::string(kind) + "-" +
         hex_encode(hmac_sha256(view_salt_, std::string(kind) + "\n" + id)).substr(0, 12);
}

std::string Batch::staleness_text() const {
  std::map<int64_t, int64_t> count_of;  // staleness -> episodes
  int64_t known = 0, sum = 0;
  for (const auto& e : episodes) {
    if (e.policy_version < 0 || policy_version < 0) continue;
    count_of[policy_version - e.policy_version] += 1;
    known += 1;
    sum += policy_version - e.policy_version;
  }
  if (known == 0)
    return fmt::format("staleness unknown ({} episodes without a policy version)", episodes.size());
  std::vector<std::string> counts;
  for (const auto& [staleness, n] : count_of) counts.push_back(fmt::format("{}: {}", staleness, n));
  return fmt::format("staleness min {}, mean {:.2f}, max {} over {} episodes ({})",
                     count_of.begin()->first, double(sum) / double(known), count_of.rbegin()->first,
                     known, fmt::join(counts, ", "));
}

Json Registry::pool_info(const ViewScope& scope) const {
  double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  return pool_info_locked(now, scope);
}

Json Registry::pool_info_locked(double now, const ViewScope& scope) const {
  auto client_id = [&](const std::string& c) { return shown_id(scope, "client", c, c); };
  const int64_t batch = options_.train_batch_size;
  const int64_t repeat = options_.num_repeat;
  Json details = Json::object(), clients_by_task = Json::object(), rewards = Json::object(),
       reward_stats = Json::object();
  size_t finished_tasks = 0, non_dummy = 0;
  std::map<std::string, std::pair<int64_t, std::set<std::string>>> by_client;  // episodes, task ids
  for (const auto& [task, s] : current_.task_stats()) {
    Json episodes = Json::array(), clients = Json::array();
    for (size_t i = 0; i < s.client_uuids.size(); ++i) {
      const std::string& client = s.client_uuids[i];
      by_client[client].first += 1;
      by_client[client].second.insert(task);
      clients.push_back(client_id(client));
      if (i < s.episode_uuids.size())
        episodes.push_back(shown_id(scope, "episode", s.episode_uuids[i], client));
    }
    details[task] = std::move(episodes);
    clients_by_task[task] = std::move(clients);
    rewards[task] = s.rewards;
    reward_stats[task] = {{"episodes", s.episode_uuids.size()},
                          {"reward_mean", s.reward_mean},
                          {"reward_std", s.reward_std}};
    bool finished = int64_t(s.episode_uuids.size()) >= repeat;
    finished_tasks += finished ? 1 : 0;
    non_dummy += (finished && !s.all_rewards_equal) ? 1 : 0;
  }
  // Upstream types every value of a running episode as a string (Dict[str, Dict[str, str]]).
  Json running = Json::object();
  size_t claimed = 0;
  for (const auto& [uuid, e] : live_) {
    if (e.state == State::kRegistered) continue;
    claimed += 1;
    running[shown_id(scope, "episode", uuid, e.client_uuid)] = {
        {"episode_status", state_name(e.state)},
        {"time_since_last_activity", fmt::format("{:.1f}s", now - e.latest_activity)},
        {"discard_episode_timeout", fmt::format("{:.1f}s", e.discard_episode_timeout)},
        {"llm_call_count", std::to_string(e.llm_call_count)},
        {"client_uuid", client_id(e.client_uuid)},
        {"optional_task_id", e.optional_task_id}};
  }
  Json active = Json::array(), instruction = Json::array();
  for (const auto& [uuid, c] : clients_) {
    active.push_back({{"client_uuid", client_id(uuid)},
                      {"agreed_sync_weight", c.agreed},
                      {"time_since_last_activity", now - c.latest_activity}});
    instruction.push_back({{"client_uuid", client_id(uuid)},
                           {"last_activity_at", c.latest_activity},
                           {"allowed_sync_weight", c.agreed}});
  }
  Json client_shares = Json::object();
  const double episodes_in_batch = double(current_.episodes());
  for (const auto& [client, share] : by_client) {
    client_shares[client_id(client)] = {
        {"episodes", share.first},
        {"tasks", share.second.size()},
        {"share", episodes_in_batch > 0 ? double(share.first) / episodes_in_batch : 0.0}};
  }
  size_t prepared = 0;
  for (const auto& [uuid, e] : live_) prepared += e.state == State::kPrepared ? 1 : 0;
  std::optional<double> booting = engine_.booting_start_time();
  return Json{
      {"sample_collection_method", sample_collection_name(options_.sample_collection)},
      {"completed_episodes", current_.episodes()},
      {"completed_episode_target", batch * repeat},
      {"completed_tasks", finished_tasks},
      {"completed_task_target", batch},
      {"completed_non_dummy_tasks", non_dummy},
      {"completed_non_dummy_task_target", batch},
      {"task_expected_num_repeat", repeat},
      {"completed_tasks_details", details},
      {"completed_tasks_client_uuids", clients_by_task},
      {"completed_tasks_rewards", rewards},
      // null, not {}, when nothing is claimed: upstream's client applies its "batch not complete
      // and nothing running: never throttle" guard only on null, so a lone throttled client waited
      // forever.
      {"running_episode_details", claimed > 0 ? running : Json(nullptr)},
      {"swarm_client_instruction", {{"active_clients", instruction}}},
      {"engine_status", engine_phase_name(engine_.status())},
      {"global_step", engine_.global_step()},
      {"booting_start_time", booting ? Json(*booting) : Json(nullptr)},
      {"training_model_path", options_.training_model_path},
      // Extensions (not upstream): for overwatch and debugging.
      {"completed_tasks_reward_stats", reward_stats},
      {"backbone", backbone_name(options_.backbone)},
      {"pool_size", options_.max_env_worker},
      {"registered_episodes", unclaimed_.size()},
      {"claimed_episodes", claimed},
      {"prepared_episodes", prepared},
      {"completed_client_shares", client_shares},
      {"batch_ready", ready_.has_value()},
      {"batches_in_training", training_.size()},
      {"batches_recorded", batches_recorded_},
      {"active_clients", active},
      {"eval_episodes",
       {{"completed", eval_finished_},
        {"reward_mean",
         eval_finished_ > 0 ? Json(eval_reward_sum_ / double(eval_finished_)) : Json(nullptr)},
        {"success_rate", eval_finished_ > 0 ? Json(double(eval_successes_) / double(eval_finished_))
                                            : Json(nullptr)}}},
  };
}

RegistryFigures Registry::figures() const {
  std::lock_guard<std::mutex> lock(mu_);
  RegistryFigures f;
  f.engine_status = engine_.status();
  f.global_step = engine_.global_step();
  for (const auto& [uuid, e] : live_) {
    switch (e.state) {
      case State::kRegistered: f.registered += 1; break;
      case State::kClaimed: f.claimed += 1; break;
      case State::kEnding: f.ending += 1; break;
      case State::kPrepared: f.prepared += 1; break;
    }
    f.llm_calls_in_flight += e.calls_in_flight;
  }
  f.ended = ended_counts_;
  f.aborted_by_cause = aborted_by_cause_;
  f.batch_episodes = int64_t(current_.episodes());
  f.batch_episode_target = options_.train_batch_size * options_.num_repeat;
  f.batch_tasks = int64_t(current_.finished_tasks(options_.num_repeat));
  f.batch_non_dummy_tasks = int64_t(current_.finished_non_dummy_tasks(options_.num_repeat));
  f.batch_task_target = options_.train_batch_size;
  f.batch_ready = ready_.has_value();
  f.batches_in_training = int64_t(training_.size());
  f.batches_recorded = batches_recorded_;
  f.active_clients = int64_t(clients_.size());
  for (const auto& [uuid, c] : clients_) f.agreed_clients += c.agreed ? 1 : 0;
  return f;
}

Json Registry::episode_buffer(const ViewScope& scope) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto status_of = [this, &scope](const Episode& e) {
    // Upstream's EpisodeStatus fields. The key stays empty: episode keys are bearer credentials,
    // and this endpoint needs none (docs/protocol.md, deliberate differences); no ZeroMQ, an empty
    // debug log. Ids of other clients' episodes are pseudonyms (ViewScope).
    return Json{{"episode_uuid", shown_id(scope, "episode", e.uuid, e.client_uuid)},
                {"episode_status", state_name(e.state)},
                {"episode_type", e.episode_type},
                {"openai_base_url", options_.openai_base_url},
                {"openai_api_key", ""},
                {"client_uuid", shown_id(scope, "client", e.client_uuid, e.client_uuid)},
                {"zmq_listen_result_addr", ""},
                {"latest_activity_timestamp", e.latest_activity},
                {"discard_episode_timeout", e.discard_episode_timeout},
                {"llm_call_count", e.llm_call_count},
                {"debug_log", Json::array()},  // upstream: a list of strings
                {"optional_task_id", e.optional_task_id}};
  };
  // Registered episodes in claim order (FIFO), then claimed ones, oldest claim first.
  Json buffer = Json::array();
  for (const auto& uuid : unclaimed_) buffer.push_back(status_of(live_.at(uuid)));
  std::vector<const Episode*> claimed;
  for (const auto& [uuid, e] : live_) {
    if (e.state != State::kRegistered) claimed.push_back(&e);
  }
  std::sort(claimed.begin(), claimed.end(), [](const Episode* a, const Episode* b) {
    return a->claimed_at != b->claimed_at ? a->claimed_at < b->claimed_at : a->uuid < b->uuid;
  });
  for (const Episode* e : claimed) buffer.push_back(status_of(*e));
  return Json{{"buffer", buffer}};
}

}  // namespace ajet::episodes
