#include "classic/episode_runner.h"

#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace ajet::classic {

EpisodeRunner::EpisodeRunner(client::SwarmClient& client, const Workflow& workflow,
                             RunnerOptions options, const std::atomic<bool>& stop)
    : client_(client), workflow_(workflow), options_(options), stop_(stop) {}

EpisodeResult EpisodeRunner::run_one(const EpisodeJob& job) {
  EpisodeResult result{job, {}, {}, false, 0, {}};
  while (result.attempts < options_.max_attempts && !stop_ && !fatal_) {
    result.attempts += 1;
    client::ClaimOptions claim;
    claim.episode_type = job.episode_type;
    claim.discard_episode_timeout = options_.discard_episode_timeout;
    claim.max_wait = 2.0;  // short waits so a stop request is seen; the loop below keeps waiting
    client::Episode episode;
    bool claimed = false;
    while (!claimed && !stop_ && !fatal_) {
      try {
        episode = client_.begin_episode(claim);
        claimed = true;
      } catch (const client::SwarmError& e) {
        if (e.kind() == client::SwarmErrorKind::kTimeout) {
          // A claim retries a front it cannot reach: a front this run started that exited will
          // never answer again.
          const std::string lost = options_.front_exit ? options_.front_exit() : "";
          if (lost.empty()) continue;
          if (!fatal_.exchange(true)) fatal_message_ = "the front exited:" + lost;
          break;
        }
        if (e.kind() == client::SwarmErrorKind::kOffline) {
          if (!fatal_.exchange(true))
            fatal_message_ = std::string("the engine went offline: ") + e.what();
          break;
        }
        result.error = e.what();
        break;
      }
    }
    if (!claimed) {
      if (stop_ || fatal_) break;
      continue;
    }
    EpisodeContext ctx{job.task,         episode,
                       job.episode_type, job.sampling,
                       job.env_seed,     [this] { return stop_.load() || fatal_.load(); }};
    result.report = workflow_.run(ctx);
    if (stop_ || fatal_) {
      client_.abort_episode(episode.episode_uuid);
      break;
    }
    try {
      client::EndResult end =
          client_.end_episode(job.task->task_id, episode.episode_uuid, result.report.output);
      if (end == client::EndResult::kEnded) {
        result.ended = true;
        result.episode_uuid = episode.episode_uuid;
        result.error.clear();
        return result;
      }
      result.error = end == client::EndResult::kDropped ? "dropped at a batch boundary"
                                                        : "expired before it ended";
    } catch (const std::exception& e) {
      result.error = e.what();
      client_.abort_episode(episode.episode_uuid);
    }
    log().warn("classic: episode of task {} not stored ({}); running it again", job.task->task_id,
               result.error);
  }
  if (result.error.empty())
    result.error = stop_ ? "stopped" : (fatal_ ? fatal_message_ : "gave up");
  return result;
}

std::vector<EpisodeResult> EpisodeRunner::run(
    const std::vector<EpisodeJob>& jobs, const std::function<void(const EpisodeResult&)>& on_done) {
  std::vector<EpisodeResult> results(jobs.size());
  std::atomic<size_t> next{0};
  std::mutex done_mu;
  const size_t n_workers =
      std::max<size_t>(1, std::min<size_t>(size_t(options_.workers), jobs.size()));
  std::vector<std::thread> workers;
  for (size_t w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      while (!stop_ && !fatal_) {
        size_t i = next.fetch_add(1);
        if (i >= jobs.size()) break;
        results[i] = run_one(jobs[i]);
        std::lock_guard<std::mutex> lock(done_mu);
        if (on_done) on_done(results[i]);
      }
    });
  }
  for (auto& t : workers) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (results[i].job.task == nullptr) {
      results[i].job = jobs[i];
      results[i].error = "not started";
    }
  }
  if (fatal_) fail(ErrorCode::kUnavailable, fatal_message_);
  return results;
}

}  // namespace ajet::classic
