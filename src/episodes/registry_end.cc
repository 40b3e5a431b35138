// Registry::end_episode: validation (every error path of docs/protocol.md "POST /end_episode"), the
// durable commit, and what a finished episode changes (the batch, the pool, active clients, the
// trigger).
#include <fmt/format.h>

#include <future>

#include "common/log.h"
#include "episodes/registry.h"
#include "store/store.h"

namespace ajet::episodes {

namespace {
CommandError error(ErrorCode code, std::string message) {
  return CommandError{code, std::move(message)};
}
}  // namespace

std::optional<CommandError> Registry::retired_answer(const std::string& uuid, const Retired& r,
                                                     const std::string& client,
                                                     const EndRequest* repeat) const {
  if (r.client_uuid != client) {
    return error(ErrorCode::kPermissionDenied,
                 "Episode " + uuid + " is claimed by different client: " + r.client_uuid +
                     ", but got " + client + ".");
  }
  if (r.how == EpisodeEnd::kFinished) {
    return repeat != nullptr && r.result ? repeat_conflict(uuid, *r.result, *repeat) : std::nullopt;
  }
  return error(ErrorCode::kFailedPrecondition,
               "Episode " + uuid + " is not in claimed status: " + r.note);
}

std::optional<CommandError> Registry::repeat_conflict(const std::string& uuid,
                                                      const EndResult& stored,
                                                      const EndRequest& repeat) {
  const WorkflowOutput& sent = repeat.workflow_output;
  auto success_text = [](const std::optional<bool>& v) {
    return v ? (*v ? "true" : "false") : "unset";
  };
  std::vector<std::string> differs;
  if (sent.reward != stored.reward) {
    differs.push_back(
        fmt::format("workflow_output.reward {} (ended with {})", sent.reward, stored.reward));
  }
  if (repeat.task_id != stored.task_id) {
    differs.push_back(fmt::format("task_id '{}' (ended with '{}')", repeat.task_id.substr(0, 200),
                                  stored.task_id.substr(0, 200)));
  }
  if (sent.is_success != stored.is_success) {
    differs.push_back(fmt::format("workflow_output.is_success {} (ended with {})",
                                  success_text(sent.is_success), success_text(stored.is_success)));
  }
  if (differs.empty()) return std::nullopt;  // the idempotent repeat
  std::string list;
  for (const auto& d : differs) list += (list.empty() ? "" : ", ") + d;
  CommandError conflict =
      error(ErrorCode::kFailedPrecondition,
            "Episode " + uuid + " has already ended with another result: this end_episode sends " +
                list + ". A repeat must send what the first end sent; the stored end stands.");
  conflict.status = 409;
  return conflict;
}

Registry::EndVerdict Registry::end_precheck_locked(const EndRequest& req) const {
  auto refuse = [](ErrorCode code, std::string message) {
    return EndVerdict{false, error(code, std::move(message))};
  };
  const std::string& uuid = req.episode_uuid;
  EnginePhase status = engine_.status();
  std::string status_name(engine_phase_name(status));
  auto it = live_.find(uuid);
  if (it == live_.end()) {
    if (auto r = retired_.find(uuid); r != retired_.end()) {
      return EndVerdict{false, retired_answer(uuid, r->second, req.client_uuid, &req)};
    }
    EndVerdict unknown = refuse(ErrorCode::kFailedPrecondition, "Episode " + uuid + " not found.");
    if (!chat_allowed(status)) {
      unknown = refuse(ErrorCode::kFailedPrecondition,
                       "Engine is not in rolling state. Current status: [" + status_name +
                           "]. Cannot end episode.");
    }
    unknown.unknown = true;
    return unknown;
  }
  const Episode& e = it->second;
  if (e.state == State::kRegistered) {
    return refuse(
        ErrorCode::kFailedPrecondition,
        "Episode " + uuid +
            " is not in claimed status (it was never claimed); call claim_episode first.");
  }
  if (e.client_uuid != req.client_uuid) {
    return refuse(ErrorCode::kPermissionDenied,
                  "Episode " + uuid + " is claimed by different client: " + e.client_uuid +
                      ", but got " + req.client_uuid + ".");
  }
  if (e.state == State::kEnding) {
    return refuse(ErrorCode::kFailedPrecondition,
                  "Episode " + uuid + ": end_episode is already in progress.");
  }
  if (e.state == State::kPrepared) {
    return refuse(ErrorCode::kFailedPrecondition,
                  "Episode " + uuid + " is prepared in episode group '" +
                      e.prepared->group.group_id + "': call commit_episode or abort_episode.");
  }
  // A live train episode outside ROLLING/ROLLING_POST was carried over a batch boundary (training
  // states) or across an engine restart (BOOTING): its calls and reward are still good, and it
  // joins the batch being collected.
  return EndVerdict{true, std::nullopt};
}

void Registry::run_blocking(std::function<void()> task) {
  if (hooks_.run_blocking) {
    hooks_.run_blocking(std::move(task));
  } else {
    task();
  }
}

std::optional<CommandError> Registry::end_of_stored(const EndRequest& request,
                                                    const store::EpisodeRow& row,
                                                    bool compare_result) const {
  const std::string& uuid = request.episode_uuid;
  if (row.client_uuid != request.client_uuid) {
    return error(ErrorCode::kPermissionDenied,
                 "Episode " + uuid + " is claimed by different client: " + row.client_uuid +
                     ", but got " + request.client_uuid + ".");
  }
  if (row.status ==
      store::kEpisodeFinished) {  // the idempotent repeat, unless it sends another result
    return !compare_result
               ? std::nullopt
               : repeat_conflict(uuid,
                                 EndResult{row.reward.value_or(0.0), row.task_id, row.is_success},
                                 request);
  }
  return error(
      ErrorCode::kFailedPrecondition,
      "Episode " + uuid + " is not in claimed status: it was " + row.status + " (stored).");
}

store::EpisodeRow Registry::ended_row_locked(const Episode& e, const EndRequest& request,
                                             double now, const char* status,
                                             const EpisodeGroup* group) const {
  store::EpisodeRow row;
  row.uuid = e.uuid;
  row.client_uuid = e.client_uuid;
  row.episode_type = e.episode_type;
  row.status = status;
  row.task_id = request.task_id;
  row.optional_task_id = e.optional_task_id;
  row.reward = request.workflow_output.reward;
  row.is_success = request.workflow_output.is_success;
  row.metadata = request.workflow_output.metadata;
  if (group != nullptr) {
    row.metadata["ajet_group"] = group->to_json();
    // The coordinator episode's key is needed only while prepared (to ask the coordinator).
    if (std::string_view(status) != store::kEpisodePrepared)
      row.metadata["ajet_group"].erase("coordinator_episode_key");
  }
  row.log_metrics = request.workflow_output.log_metrics;
  row.discard_episode_timeout = e.discard_episode_timeout;
  row.claimed_at = e.claimed_at;
  row.ended_at = now;
  return row;
}

void Registry::write_then(store::EpisodeRow row, std::function<void(std::exception_ptr)> then) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++pending_store_callbacks_;
  }
  // Queued after every call of this episode (those were queued under the mutex, before kEnding).
  store_->upsert_episode(std::move(row), [this, then = std::move(then)](std::exception_ptr error) {
    struct Release {  // the destructor of Registry waits for this, even if `then` throws
      Registry* registry;
      ~Release() {
        std::lock_guard<std::mutex> lock(registry->mu_);
        --registry->pending_store_callbacks_;
        registry->callbacks_cv_.notify_all();
      }
    } release{this};
    then(error);
  });
}

void Registry::end_episode(EndRequest request,
                           std::function<void(std::optional<CommandError>)> done) {
  double now = clock_();
  store::EpisodeRow row;
  EndVerdict verdict;
  {
    std::lock_guard<std::mutex> lock(mu_);
    verdict = end_precheck_locked(request);
    if (verdict.proceed) {
      Episode& e = live_.at(request.episode_uuid);
      e.state = State::kEnding;  // no more calls are recorded; concurrent ends are refused
      e.seen(now);
      row = ended_row_locked(e, request, now, store::kEpisodeFinished);
    }
  }
  if (!verdict.proceed && verdict.unknown && store_ != nullptr) {
    // Ended before this server (re)started, or longer ago than the memory of retired episodes
    // reaches: the store decides, so a repeat gets the same answer across restarts. One indexed
    // read, on this rare path only, where blocking is fine (RegistryHooks::run_blocking).
    auto lookup = [this, request = std::move(request), answer = verdict.answer,
                   done = std::move(done)]() mutable {
      if (std::optional<store::EpisodeRow> stored = store_->get_episode(request.episode_uuid);
          stored && stored->status != store::kEpisodeClaimed) {
        answer = end_of_stored(request, *stored);
      }
      done(answer);
    };
    run_blocking(std::move(lookup));
    return;
  }
  if (!verdict.proceed) {
    done(verdict.answer);
    return;
  }
  if (store_ == nullptr) {
    end_committed(request.episode_uuid, request, nullptr, done);
    return;
  }
  std::string uuid = request.episode_uuid;
  write_then(std::move(row),
             [this, uuid, request = std::move(request), done = std::move(done)](
                 std::exception_ptr error) { end_committed(uuid, request, error, done); });
}

std::string Registry::store_error_text(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "unknown error";
}

std::optional<CommandError> Registry::no_longer_running_locked(const std::string& uuid) const {
  auto r = retired_.find(uuid);  // stop() dropped it while the write was in flight
  return error(
      ErrorCode::kFailedPrecondition,
      "Episode " + uuid + " is not in claimed status: " +
          (r != retired_.end() ? r->second.note : std::string("it is no longer running.")));
}

void Registry::end_committed(const std::string& uuid, const EndRequest& request,
                             std::exception_ptr store_error,
                             const std::function<void(std::optional<CommandError>)>& done,
                             State back_to) {
  Outbox out;
  std::optional<CommandError> answer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    double now = clock_();
    auto it = live_.find(uuid);
    if (it == live_.end() || it->second.state != State::kEnding) {
      answer = no_longer_running_locked(uuid);
    } else if (store_error) {
      it->second.state = back_to;  // the client may retry end_episode / commit_episode
      answer =
          error(ErrorCode::kIo, "Episode " + uuid + " could not be stored, so it was not ended: " +
                                    store_error_text(store_error));
    } else {
      const Episode e = it->second;  // a copy: retire_locked below still reads the live entry
      const WorkflowOutput& output = request.workflow_output;
      if (e.episode_type == "train") {
        current_.add(FinishedEpisode{uuid, request.task_id, e.client_uuid, output.reward,
                                     output.is_success, output.metadata, output.log_metrics,
                                     e.call_indices, now, e.oldest_policy_version});
        if (request.declare_client_active) {
          ActiveClient& client = clients_[e.client_uuid];
          client.latest_activity = now;
        }
        int64_t n = int64_t(current_.episodes());
        if (!cache_warned_ && n * 5 >= options_.max_cached_episodes * 4) {
          cache_warned_ = true;
          out.logs.emplace_back(
              "swarm",
              fmt::format(
                  "the batch holds {} finished episodes, {}% of "
                  "ajet.swarm_mode_sample_collection_max_cached_episodes ({}); is the trigger "
                  "reachable (task ids, num_repeat, train_batch_size)?",
                  n, n * 100 / options_.max_cached_episodes, options_.max_cached_episodes));
        }
      } else {
        eval_finished_ += 1;
        eval_reward_sum_ += output.reward;
        eval_successes_ += output.is_success.value_or(false) ? 1 : 0;
      }
      retire_locked(uuid, EpisodeEnd::kFinished, "it has already ended.", out, /*store_it=*/false);
      if (auto r = retired_.find(uuid); r != retired_.end()) {
        r->second.result = EndResult{output.reward, request.task_id, output.is_success};
      }
      refill_pool_locked();
      check_trigger_locked(now, out);
      check_drained_locked(now, out);
    }
  }
  deliver(out);
  done(answer);
}

void Registry::end_episode_wait(EndRequest request) {
  std::promise<std::optional<CommandError>> result;
  auto future = result.get_future();
  end_episode(std::move(request),
              [&result](std::optional<CommandError> answer) { result.set_value(answer); });
  if (auto problem = future.get()) fail(problem->code, problem->message);
}

}  // namespace ajet::episodes
