// Registry: batch triggers, the ROLLING_POST drain, handing batches to the trainer, the debug
// backbone's recording, and the janitor sweep.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "episodes/batch_metrics.h"
#include "episodes/registry.h"
#include "store/store.h"

namespace ajet::episodes {

TriggerInput Registry::trigger_input_locked() const {
  TriggerInput in;
  in.method = options_.sample_collection;
  in.train_batch_size = options_.train_batch_size;
  in.num_repeat = options_.num_repeat;
  in.active_clients = clients_.size();
  for (const auto& [uuid, c] : clients_) in.agreed_clients += c.agreed ? 1 : 0;
  return in;
}

bool Registry::claims_paused_locked() const {
  if (options_.backbone != Backbone::kAsync) return false;
  return int64_t(training_.size() + (ready_ ? 1 : 0)) > options_.max_staleness;
}

double Registry::drain_waits_until_locked(const Episode& e) const {
  constexpr double kForever = std::numeric_limits<double>::infinity();
  if (e.episode_type != "train" || e.state == State::kRegistered) return -kForever;
  if (e.state == State::kEnding || e.calls_in_flight > 0) return kForever;
  return e.client_seen + options_.drain_idle_grace;
}

size_t Registry::train_alive_locked(double now) const {
  size_t n = 0;
  for (const auto& [uuid, e] : live_) n += now < drain_waits_until_locked(e) ? 1 : 0;
  return n;
}

std::optional<std::chrono::milliseconds> Registry::next_sweep_due() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (engine_.status() != EnginePhase::kRollingPost || ready_) return std::nullopt;
  const double now = clock_();
  std::optional<double> soonest;
  if (!agree_boundary_shown_locked(now))
    soonest = rolling_post_since_ + options_.agree_boundary_dwell - now;
  for (const auto& [uuid, e] : live_) {
    const double left = drain_waits_until_locked(e) - now;
    if (left >= 0 && std::isfinite(left) && (!soonest || left < *soonest)) soonest = left;
  }
  if (!soonest) return std::nullopt;
  return std::chrono::milliseconds(int64_t(*soonest * 1000) + 10);
}

void Registry::check_trigger_locked(double now, Outbox& out) {
  if (engine_.status() != EnginePhase::kRolling) return;
  if (ready_) return;  // async: one batch waits for the trainer at a time
  if (form_replay_batch_locked(now, out)) return;
  TriggerInput in = trigger_input_locked();
  if (!batch_triggered(current_, in)) return;
  out.logs.emplace_back("swarm",
                        fmt::format("batch trigger {} fired: {} episodes, {} finished tasks",
                                    sample_collection_name(in.method), current_.episodes(),
                                    current_.finished_tasks(in.num_repeat)));
  const bool agreed = is_agree_based(in.method);
  if (options_.backbone == Backbone::kAsync && !agreed) {
    form_ready_batch_locked(now,
                            out);  // rollouts go on; episodes still running join the next batch
    return;
  }
  transition_locked(EnginePhase::kRollingPost, now,
                    agreed && options_.backbone == Backbone::kAsync
                        ? fmt::format("the clients agreed; the batch closes after {:.1f} s",
                                      options_.agree_boundary_dwell)
                        : fmt::format("the batch is full; waiting for {} running train episodes",
                                      train_alive_locked(now)),
                    out);
  rolling_post_since_ = now;
  check_drained_locked(now, out);
}

bool Registry::agree_boundary_shown_locked(double now) const {
  return !is_agree_based(options_.sample_collection) ||
         now - rolling_post_since_ >= options_.agree_boundary_dwell;
}

void Registry::check_drained_locked(double now, Outbox& out) {
  if (engine_.status() != EnginePhase::kRollingPost || ready_) return;
  // Clients that agreed wait for the boundary by polling the status (upstream's client:
  // ROLLING_POST or WEIGHT_SYNCING): it stays visible for agree_boundary_dwell on every backbone.
  if (!agree_boundary_shown_locked(now)) return;
  if (options_.backbone == Backbone::kAsync) {  // only agree-based triggers get here: no drain
    form_ready_batch_locked(now, out);
    transition_locked(EnginePhase::kRolling, now, "the agreed batch is ready; rollouts go on", out);
    return;
  }
  const size_t alive = train_alive_locked(now);
  const bool timed_out = now - rolling_post_since_ >= options_.drain_timeout;
  if (alive > 0 && !timed_out) return;
  size_t carried = 0;
  for (const auto& [uuid, e] : live_)
    carried += (e.episode_type == "train" && e.state != State::kRegistered) ? 1 : 0;
  if (carried > 0) {
    out.logs.emplace_back(
        "swarm",
        fmt::format("batch closed {}: {} train episodes still claimed carry into the next batch "
                    "({} of them "
                    "active; idle ones are reclaimed after their discard_episode_timeout as usual)",
                    timed_out
                        ? fmt::format("by the drain timeout ({:.0f} s)", options_.drain_timeout)
                        : fmt::format("with no train episode active within {:.1f} s",
                                      options_.drain_idle_grace),
                    carried, alive));
  }
  form_ready_batch_locked(now, out);
  if (options_.backbone == Backbone::kDebug) record_debug_batch_locked(now, out);
}

namespace {

// The batch summary for the log line: the per-client shares (one entry per client, 16 KB a step
// with 200 clients) become their count and the largest; the whole map stays in the store's batch
// stats.
Json ready_summary_for_log(const Batch& batch) {
  Json summary = batch.summary();
  double largest = 0;
  for (const auto& [client, share] : summary["client_shares"].items()) {
    largest = std::max(largest, share.value("share", 0.0));
  }
  summary["clients"] = summary["client_shares"].size();
  summary["largest_client_share"] = largest;
  summary.erase("client_shares");
  return summary;
}

}  // namespace

void Registry::form_ready_batch_locked(double now, Outbox& out) {
  Batch batch;
  batch.batch_id = next_batch_id_++;
  batch.global_step = engine_.global_step();
  batch.created_at = now;
  batch.episodes = current_.take_all();
  batch.aborted_by_cause = std::exchange(batch_aborted_by_cause_, {});
  ready_ = std::move(batch);
  clients_
      .clear();  // agreement and activity count from the last batch boundary (upstream resets too)
  cache_warned_ = false;
  out.batch_ready = true;
  out.logs.emplace_back("swarm", fmt::format("batch {} ready: {}", ready_->batch_id,
                                             ready_summary_for_log(*ready_).dump()));
}

void Registry::drop_stale_episodes_locked(Batch& batch, Outbox& out) {
  // The trainer trains batches one after another: this one starts from the version now served.
  batch.policy_version = engine_.global_step();
  std::vector<FinishedEpisode> kept;
  std::vector<std::string> dropped;
  for (auto& e : batch.episodes) {
    const int64_t staleness = e.policy_version < 0 ? 0 : batch.policy_version - e.policy_version;
    if (staleness > options_.max_staleness) {
      dropped.push_back(fmt::format("{} ({} versions behind)", e.episode_uuid, staleness));
      batch.left_out_stale.push_back(std::move(e));
    } else {
      kept.push_back(std::move(e));
    }
  }
  batch.episodes = std::move(kept);
  if (!dropped.empty()) {
    constexpr size_t kNamed = 5;  // the log names a few; the count says how many
    const size_t more = dropped.size() > kNamed ? dropped.size() - kNamed : 0;
    dropped.resize(std::min(dropped.size(), kNamed));
    out.logs.emplace_back(
        "swarm",
        fmt::format("batch {}: left out {} episodes staler than ajet.async.max_staleness = {} "
                    "at policy_version {}: {}{}",
                    batch.batch_id, dropped.size() + more, options_.max_staleness,
                    batch.policy_version, fmt::join(dropped, ", "),
                    more > 0 ? fmt::format(" and {} more", more) : ""));
  }
  // One line a step: the per-episode map (once 1 MB of a 1.1 MB log) is in the store's batch stats.
  out.logs.emplace_back(
      "swarm",
      fmt::format("batch {} trains from policy_version {}: {} (ajet.async.max_staleness = {})",
                  batch.batch_id, batch.policy_version, batch.staleness_text(),
                  options_.max_staleness));
}

void Registry::adopt_engine_version_locked(int64_t version, const char* why, Outbox& out) {
  if (version < 0 || version == engine_.global_step()) return;
  // The weights are what count: an engine that resumed from an older checkpoint (or from none)
  // serves that checkpoint's version, and the steps after it are gone.
  out.logs.emplace_back(
      "swarm", fmt::format("global_step {} -> {}: adopted the policy_version the engine serves {}",
                           engine_.global_step(), version, why));
  engine_.set_global_step(version);
  if (store_ != nullptr) store_->put_state(store::kStateGlobalStep, std::to_string(version));
}

void Registry::record_debug_batch_locked(double now, Outbox& out) {
  Batch batch = std::move(*ready_);
  ready_.reset();
  if (store_ != nullptr) {
    std::vector<std::string> uuids;
    for (const auto& e : batch.episodes) uuids.push_back(e.episode_uuid);
    Json summary = batch.summary();
    store_->put_batch(store::BatchRow{batch.batch_id, batch.global_step, now, store::kBatchRecorded,
                                      now, summary},
                      std::move(uuids));
    // The debug backbone never advances global_step: its batches are numbered by id so curves
    // advance.
    put_batch_metrics_locked(batch.batch_id - 1, Json{{"rollout", summary}}, now, out);
  }
  batches_recorded_ += 1;
  std::string detail = fmt::format(
      "debug backbone: batch {} recorded ({} episodes); nothing trains, global_step "
      "stays {}",
      batch.batch_id, batch.episodes.size(), batch.global_step);
  last_recorded_ = std::move(batch);
  transition_locked(EnginePhase::kRolling, now, detail, out);
}

bool Registry::batch_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_.has_value();
}

bool Registry::wait_batch_ready(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  batch_cv_.wait_for(lock, timeout, [&] {
    return ready_.has_value() || engine_.status() == EnginePhase::kOffline;
  });
  return ready_.has_value();
}

Batch Registry::take_batch() {
  Outbox out;
  Batch batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_) fail(ErrorCode::kFailedPrecondition, "take_batch(): no batch is ready");
    double now = clock_();
    batch = std::move(*ready_);
    ready_.reset();
    // Episodes carried across a batch boundary are off-policy: at most max_staleness versions
    // behind.
    if (options_.backbone != Backbone::kDebug) drop_stale_episodes_locked(batch, out);
    if (options_.backbone == Backbone::kTorch) {
      transition_locked(
          EnginePhase::kWeightSyncing, now,
          fmt::format("training step {} on {} episodes", batch.global_step, batch.episodes.size()),
          out);
    }
    if (store_ != nullptr) {
      std::vector<std::string> uuids;
      for (const auto& e : batch.episodes) uuids.push_back(e.episode_uuid);
      store_->put_batch(store::BatchRow{batch.batch_id, batch.global_step, batch.created_at,
                                        store::kBatchTaken, std::nullopt, Json::object()},
                        std::move(uuids));
    }
    training_[batch.batch_id] = batch;
  }
  deliver(out);
  return batch;
}

void Registry::finish_batch(int64_t batch_id, Json stats) {
  Outbox out;
  std::future<void> durable;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = training_.find(batch_id);
    if (it == training_.end()) {
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("finish_batch(): batch {} is not being trained", batch_id));
    }
    if (options_.backbone == Backbone::kTorch && engine_.status() != EnginePhase::kWeightSyncing) {
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("finish_batch(): needs ENGINE.WEIGHT_SYNCING (current: {})",
                       engine_phase_name(engine_.status())));
    }
    double now = clock_();
    Json summary = it->second.summary();
    const int64_t batch_global_step = it->second.global_step;
    training_.erase(it);
    int64_t step = engine_.global_step() + 1;
    // The engine's count wins: the front's global_step is the policy version the engine now serves.
    if (stats.is_object() && stats.contains("policy_version") &&
        stats["policy_version"].is_number_integer()) {
      const int64_t version = stats["policy_version"].get<int64_t>();
      if (version != step) {
        out.logs.emplace_back(
            "swarm", fmt::format("the engine reports policy_version {} after batch {}; global_step "
                                 "follows it (the front expected {})",
                                 version, batch_id, step));
      }
      step = version;
    }
    engine_.set_global_step(step);
    Json all = stats.is_object() ? stats : Json::object();
    all["rollout"] = summary;
    Json polled = all;  // GET /get_engine_status is polled: its copy leaves out the per-episode map
    polled["rollout"].erase("staleness");
    note_batch_outcome_locked(Json{{"batch_id", batch_id},
                                   {"global_step", batch_global_step},
                                   {"trained", true},
                                   {"stats", std::move(polled)}});
    if (store_ != nullptr) {
      store_->update_batch(batch_id, store::kBatchTrained, now, all);
      store_->retain_calls(options_.call_retention, now);
      put_batch_metrics_locked(step - 1, all, now, out);
      durable = store_->put_state(store::kStateGlobalStep, std::to_string(step));
    }
    if (options_.backbone == Backbone::kTorch) {
      transition_locked(EnginePhase::kRolling, now, fmt::format("step {} done", step - 1), out);
    } else {
      out.logs.emplace_back("swarm",
                            fmt::format("step {} done; global_step is {}", step - 1, step));
    }
    check_trigger_locked(now, out);
  }
  deliver(out);
  if (durable.valid()) durable.get();
}

void Registry::put_batch_metrics_locked(int64_t step, const Json& stats, double now, Outbox& out) {
  MetricValues values = batch_metrics(stats);
  if (values.empty()) return;
  store_->put_metrics(step, values, now);
  out.metrics.push_back(Outbox::Metrics{step, std::move(values), now});
}

void Registry::note_batch_outcome_locked(Json outcome) {
  recent_batches_.push_back(std::move(outcome));
  while (recent_batches_.size() > kRecentBatches) recent_batches_.pop_front();
}

void Registry::fail_batch(int64_t batch_id, ErrorCode code, const std::string& reason) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = training_.find(batch_id);
    if (it == training_.end()) {
      fail(ErrorCode::kFailedPrecondition,
           fmt::format("fail_batch(): batch {} is not being trained", batch_id));
    }
    double now = clock_();
    Json stats{{"error", reason}, {"rollout", it->second.summary()}};
    note_batch_outcome_locked(
        Json{{"batch_id", batch_id},
             {"global_step", it->second.global_step},
             {"trained", false},
             {"error", Json{{"code", error_code_name(code)}, {"message", reason}}}});
    training_.erase(it);
    if (store_ != nullptr) store_->update_batch(batch_id, store::kBatchAbandoned, now, stats);
    std::string detail = fmt::format("batch {} was not trained ({}); global_step stays {}",
                                     batch_id, reason, engine_.global_step());
    if (options_.backbone == Backbone::kTorch && engine_.status() == EnginePhase::kWeightSyncing) {
      transition_locked(EnginePhase::kRolling, now, detail, out);
    } else {
      out.logs.emplace_back("swarm", detail);
    }
    check_trigger_locked(now, out);
  }
  deliver(out);
}

int64_t Registry::batches_behind() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(training_.size() + (ready_ ? 1 : 0));
}

std::optional<Batch> Registry::last_recorded_batch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_recorded_;
}

SweepResult Registry::sweep() {
  Outbox out;
  SweepResult result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    double now = clock_();
    // Idle time only counts while the model can be called; entering ROLLING restarts every clock.
    if (chat_allowed(engine_.status())) {
      std::vector<std::pair<std::string, double>> idle;
      for (const auto& [uuid, e] : live_) {
        if (e.state == State::kClaimed && e.calls_in_flight == 0 &&
            now - e.latest_activity > e.discard_episode_timeout) {
          idle.emplace_back(uuid, now - e.latest_activity);
        }
      }
      for (const auto& [uuid, seconds] : idle) {
        double timeout = live_.at(uuid).discard_episode_timeout;
        retire_locked(
            uuid, EpisodeEnd::kReclaimed,
            fmt::format(
                "it was reclaimed after {:.1f} s without activity (discard_episode_timeout = "
                "{:.1f} "
                "s). Maybe you take **too long** to submit the workflow output, try increase "
                "`discard_episode_timeout` when `begin_episode`.",
                seconds, timeout),
            out, true);
        result.reclaimed.push_back(uuid);
      }
      if (!idle.empty()) {
        out.logs.emplace_back("janitor", fmt::format("reclaimed {} idle episodes", idle.size()));
        refill_pool_locked();
      }
    }
    settle_expired_prepared_locked(now, result, out);
    expire_clients_locked(now, &result.expired_clients);
    check_trigger_locked(now, out);
    check_drained_locked(now, out);
    if (store_ != nullptr) {
      Json clients = Json::array();
      for (const auto& [uuid, c] : clients_)
        clients.push_back({{"client_uuid", uuid}, {"agreed_sync_weight", c.agreed}});
      store_->put_state(store::kStateRegistrySnapshot,
                        Json{{"active_clients", clients}, {"written_at", now}}.dump());
    }
  }
  deliver(out);
  // A participant whose coordinator episode is on this front asks this registry, not another front.
  std::vector<PendingResolution> remote;
  for (PendingResolution& pending : result.to_resolve) {
    if (!pending.group.is_local_participant()) {
      remote.push_back(std::move(pending));
      continue;
    }
    settle_prepared(pending.episode_uuid,
                    resolve_group(ResolveRequest{pending.group.group_id,
                                                 pending.group.coordinator_episode_uuid}));
  }
  result.to_resolve = std::move(remote);
  return result;
}

BoolResponse Registry::agree_sync_weight(const AgreeRequest& request) {
  Outbox out;
  BoolResponse resp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    double now = clock_();
    if (!is_agree_based(options_.sample_collection)) {
      resp.failure_reason = fmt::format(
          "agree_sync_weight only applies when ajet.swarm_mode_sample_collection_method is "
          "rollout_until_any_client_agree_sync_weight or "
          "rollout_until_all_clients_agree_sync_weight (current: {}).",
          sample_collection_name(options_.sample_collection));
      return resp;
    }
    expire_clients_locked(now, nullptr);
    auto it = clients_.find(request.client_uuid);
    if (it == clients_.end()) {
      resp.failure_reason =
          "Client " + request.client_uuid +
          " is not an active client: it must have completed at least one rewarded (non-abort) "
          "episode since the last weight sync.";
      return resp;
    }
    it->second.agreed = true;
    it->second.latest_activity = now;
    resp.success = true;
    check_trigger_locked(now, out);
  }
  deliver(out);
  return resp;
}

}  // namespace ajet::episodes
