// Registry: batches the weights lost are trained again. An engine that restarts from a checkpoint
// older than the front's global step serves weights without the batches trained since; the store
// marks them rolled back (with the task ledger's rows of those steps back in flight), and each is
// formed again, with the same episodes, before any new batch. So an acknowledged episode is never
// lost to a crash, and a classic run's step N still trains the tasks it drew.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "episodes/registry.h"
#include "store/store.h"

namespace ajet::episodes {

namespace {

FinishedEpisode finished_from_row(const store::EpisodeRow& row) {
  return FinishedEpisode{row.uuid,
                         row.task_id,
                         row.client_uuid,
                         row.reward.value_or(0.0),
                         row.is_success,
                         row.metadata,
                         row.log_metrics,
                         {},
                         row.ended_at.value_or(0)};
}

}  // namespace

std::vector<Batch> Registry::roll_back_to(int64_t version) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (store_ == nullptr || options_.backbone == Backbone::kDebug || !continues_run_) return {};
  }
  // Both block on the store; the writer thread's callbacks take mu_, so it is not held here.
  store_->rollback_after(version).get();
  std::vector<Batch> out;
  for (store::RolledBackBatch& rolled : store_->rolled_back_batches()) {
    Batch b;
    b.batch_id = rolled.batch.id;  // renumbered when formed again
    b.global_step = rolled.batch.global_step;
    b.created_at = rolled.batch.created_at;
    for (const store::EpisodeRow& row : rolled.episodes)
      b.episodes.push_back(finished_from_row(row));
    out.push_back(std::move(b));
  }
  return out;
}

void Registry::queue_replays_locked(std::vector<Batch> batches, Outbox& out) {
  if (batches.empty()) return;
  // The store names every rolled-back batch not yet taken again, including one formed again but
  // not taken when the engine died again (engine_restarting queued it too), or one whose episodes
  // a restarted front put into the current batch: those copies go.
  std::unordered_set<std::string> replayed;
  size_t episodes = 0;
  for (const Batch& b : batches) {
    for (const FinishedEpisode& e : b.episodes) replayed.insert(e.episode_uuid);
    episodes += b.episodes.size();
  }
  const auto known = [&](const FinishedEpisode& e) { return replayed.count(e.episode_uuid) > 0; };
  std::vector<FinishedEpisode> kept;
  for (FinishedEpisode& e : current_.take_all()) {
    if (!known(e)) kept.push_back(std::move(e));
  }
  current_.prepend(std::move(kept));
  std::deque<Batch> unfinished;  // batches the trainer never finished (engine_restarting)
  for (Batch& b : replay_) {
    if (std::none_of(b.episodes.begin(), b.episodes.end(), known))
      unfinished.push_back(std::move(b));
  }
  const size_t lost = batches.size();
  replay_.assign(std::make_move_iterator(batches.begin()), std::make_move_iterator(batches.end()));
  for (Batch& b : unfinished) replay_.push_back(std::move(b));
  out.logs.emplace_back(
      "swarm", fmt::format("the engine serves policy_version {}: {} batches trained after it are "
                           "lost from the weights; their {} episodes train again, batch by batch",
                           engine_.global_step(), lost, episodes));
}

bool Registry::form_replay_batch_locked(double now, Outbox& out) {
  if (replay_.empty()) return false;
  Batch batch = std::move(replay_.front());
  replay_.pop_front();
  const int64_t was = batch.batch_id;
  batch.policy_version = -1;
  batch.left_out_stale.clear();
  batch.batch_id = next_batch_id_++;
  batch.global_step = engine_.global_step();
  batch.created_at = now;
  out.logs.emplace_back("swarm", fmt::format("batch {} ready: batch {} again ({} episodes), not in "
                                             "the weights of the restarted engine",
                                             batch.batch_id, was, batch.episodes.size()));
  ready_ = std::move(batch);
  out.batch_ready = true;
  if (options_.backbone == Backbone::kTorch) {
    transition_locked(EnginePhase::kRollingPost, now,
                      fmt::format("training rolled-back batch {} again", was), out);
    rolling_post_since_ = now;
  }
  return true;
}

void Registry::return_batch(int64_t batch_id) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = training_.find(batch_id);
    if (it == training_.end()) return;
    replay_.push_front(std::move(it->second));
    training_.erase(it);
    out.logs.emplace_back("swarm", fmt::format("batch {}: the engine connection was lost while it "
                                               "trained; it trains again, as it was, once the "
                                               "engine is back",
                                               batch_id));
  }
  deliver(out);
}

}  // namespace ajet::episodes
