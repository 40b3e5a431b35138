// Episode groups across servers (docs/protocol.md "Episode groups across servers"): prepare,
// commit, the coordinator's resolution and the janitor's settling of prepared episodes whose client
// vanished. Commit on the coordinator is the group's decision; the coordinator aborts an
// uncommitted episode when a participant asks, so a late client finds its commit refused and aborts
// the rest.
#include <fmt/format.h>

#include <cmath>

#include "common/log.h"
#include "episodes/registry.h"
#include "store/store.h"

namespace ajet::episodes {

namespace {

CommandError group_error(ErrorCode code, std::string message) {
  return CommandError{code, std::move(message)};
}

}  // namespace

const char* Registry::state_name(State state) {
  switch (state) {
    case State::kRegistered: return "registered";
    case State::kClaimed: return "claimed";
    case State::kEnding: return "claimed";  // as upstream: an end being stored is still claimed
    case State::kPrepared: return "prepared";
  }
  return "claimed";
}

std::optional<Registry::Prepared> Registry::prepared_from_row(const store::EpisodeRow& row,
                                                              double now) {
  try {
    Prepared p;
    p.group = EpisodeGroup::from_json(row.metadata.at("ajet_group"),
                                      "stored episode " + row.uuid + ": ajet_group");
    p.request.client_uuid = row.client_uuid;
    p.request.episode_uuid = row.uuid;
    p.request.task_id = row.task_id;
    p.request.workflow_output.reward = row.reward.value_or(0.0);
    p.request.workflow_output.is_success = row.is_success;
    p.request.workflow_output.metadata = row.metadata;
    p.request.workflow_output.metadata.erase("ajet_group");
    p.request.workflow_output.log_metrics = row.log_metrics;
    // The deadline it had before the restart (prepared at ended_at), so restarts cannot extend it.
    p.deadline = std::min(now, row.ended_at.value_or(now)) + p.group.prepare_timeout;
    p.next_ask = p.deadline;
    return p;
  } catch (const std::exception& e) {
    log().warn(
        "episode {} was stored as prepared but its group cannot be read ({}); it is restored as "
        "claimed",
        row.uuid, e.what());
    return std::nullopt;
  }
}

std::optional<std::string> Registry::local_coordinator_problem_locked(
    const PrepareRequest& request) const {
  if (!request.group.is_local_participant()) return std::nullopt;
  // The front settles a local participant from its own registry, and asking the coordinator aborts
  // an uncommitted coordinator episode: so the coordinator must be another live episode of the same
  // client, or one whose key the caller showed (group.coordinator_episode_key), never someone
  // else's.
  const std::string& coordinator = request.group.coordinator_episode_uuid;
  auto c = live_.find(coordinator);
  if (coordinator == request.end.episode_uuid || c == live_.end() ||
      c->second.state == State::kRegistered ||
      (c->second.client_uuid != request.end.client_uuid && !request.coordinator_key_verified)) {
    return "Episode " + request.end.episode_uuid + ": group.coordinator_episode_uuid " +
           coordinator +
           " is not another running episode of this client on this front, nor one whose "
           "group.coordinator_episode_key was sent (a participant whose coordinator is elsewhere "
           "names its coordinator_url).";
  }
  return std::nullopt;
}

void Registry::prepare_end_episode(PrepareRequest request, PrepareDone done) {
  double now = clock_();
  store::EpisodeRow row;
  EndVerdict verdict;
  PrepareResponse repeat;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(request.end.episode_uuid);
    if (it != live_.end() && it->second.state == State::kPrepared &&
        it->second.client_uuid == request.end.client_uuid) {
      const Episode& e = it->second;
      if (e.prepared->group.group_id != request.group.group_id) {
        verdict.answer = group_error(
            ErrorCode::kFailedPrecondition,
            "Episode " + e.uuid + " is already prepared in episode group '" +
                e.prepared->group.group_id + "', not '" + request.group.group_id + "'.");
      } else {  // a repeat (the answer was lost): the same answer again
        repeat = prepare_answer_locked(e);
      }
    } else if (auto why = local_coordinator_problem_locked(request); why) {
      verdict.answer = group_error(ErrorCode::kFailedPrecondition, *why);
    } else {
      verdict = end_precheck_locked(request.end);
      if (verdict.proceed) {
        Episode& e = live_.at(request.end.episode_uuid);
        e.state = State::kEnding;  // no more calls; concurrent ends and prepares are refused
        e.seen(now);
        row = ended_row_locked(e, request.end, now, store::kEpisodePrepared, &request.group);
      } else if (!verdict.answer && !verdict.unknown) {
        verdict.answer = group_error(
            ErrorCode::kFailedPrecondition,
            "Episode " + request.end.episode_uuid + " has already ended; it cannot be prepared.");
      }
    }
  }
  if (!verdict.proceed) {
    done(verdict.answer, repeat);
    return;
  }
  if (store_ == nullptr) {
    prepare_committed(request.end.episode_uuid, request, nullptr, done);
    return;
  }
  std::string uuid = request.end.episode_uuid;
  write_then(std::move(row),
             [this, uuid, request = std::move(request), done = std::move(done)](
                 std::exception_ptr error) { prepare_committed(uuid, request, error, done); });
}

void Registry::prepare_committed(const std::string& uuid, const PrepareRequest& request,
                                 std::exception_ptr store_error, const PrepareDone& done) {
  std::optional<CommandError> answer;
  PrepareResponse response;
  {
    std::lock_guard<std::mutex> lock(mu_);
    double now = clock_();
    auto it = live_.find(uuid);
    if (it == live_.end() || it->second.state != State::kEnding) {
      answer = no_longer_running_locked(uuid);
    } else if (store_error) {
      it->second.state = State::kClaimed;
      answer = group_error(ErrorCode::kIo, "Episode " + uuid +
                                               " could not be stored, so it was not prepared: " +
                                               store_error_text(store_error));
    } else {
      Episode& e = it->second;
      e.state = State::kPrepared;
      const double deadline = now + request.group.prepare_timeout;
      e.prepared = Prepared{request.group, request.end, deadline, false, deadline, 0};
      response = prepare_answer_locked(e);
    }
  }
  done(answer, response);
}

PrepareResponse Registry::prepare_answer_locked(const Episode& e) const {
  return PrepareResponse{e.uuid, e.claim_global_step, engine_.global_step(),
                         e.oldest_policy_version >= 0
                             ? std::optional<int64_t>(e.oldest_policy_version)
                             : std::nullopt};
}

void Registry::begin_commit_locked(const std::string& uuid, const std::string& client,
                                   store::EpisodeRow& row, EndRequest& request) {
  Episode& e = live_.at(uuid);
  double now = clock_();
  e.state = State::kEnding;
  if (!client.empty()) e.seen(now);
  request = e.prepared->request;
  row = ended_row_locked(e, request, now, store::kEpisodeFinished, &e.prepared->group);
}

void Registry::commit_episode(const EpisodeRef& ref,
                              std::function<void(std::optional<CommandError>)> done) {
  const std::string& uuid = ref.episode_uuid;
  store::EpisodeRow row;
  EndRequest request;
  std::optional<CommandError> answer;
  bool proceed = false, unknown = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(uuid);
    if (it == live_.end()) {
      if (auto r = retired_.find(uuid); r != retired_.end()) {
        answer = retired_answer(uuid, r->second, ref.client_uuid);
      } else {
        unknown = true;
        answer = group_error(ErrorCode::kFailedPrecondition, "Episode " + uuid + " not found.");
      }
    } else if (it->second.state == State::kRegistered) {
      answer = group_error(ErrorCode::kFailedPrecondition,
                           "Episode " + uuid + " is not prepared (it was never claimed).");
    } else if (it->second.client_uuid != ref.client_uuid) {
      answer = group_error(ErrorCode::kPermissionDenied,
                           "Episode " + uuid + " is claimed by different client: " +
                               it->second.client_uuid + ", but got " + ref.client_uuid + ".");
    } else if (it->second.state == State::kEnding) {
      answer = group_error(ErrorCode::kFailedPrecondition,
                           "Episode " + uuid + ": an end or commit is already in progress.");
    } else if (it->second.state != State::kPrepared) {
      answer = group_error(ErrorCode::kFailedPrecondition,
                           "Episode " + uuid + " is not prepared; call prepare_end_episode first.");
    } else {
      proceed = true;
      begin_commit_locked(uuid, ref.client_uuid, row, request);
    }
  }
  if (!proceed && unknown && store_ != nullptr) {  // the store decides, read where blocking is fine
    run_blocking([this, ref, answer, done = std::move(done)]() mutable {
      if (std::optional<store::EpisodeRow> stored = store_->get_episode(ref.episode_uuid); stored) {
        EndRequest as_end;
        as_end.client_uuid = ref.client_uuid;
        as_end.episode_uuid = ref.episode_uuid;
        answer = end_of_stored(as_end, *stored, /*compare_result=*/false);
      }
      done(answer);
    });
    return;
  }
  if (!proceed) {
    done(answer);
    return;
  }
  if (store_ == nullptr) {
    end_committed(uuid, request, nullptr, done, State::kPrepared);
    return;
  }
  write_then(std::move(row), [this, uuid, request = std::move(request),
                              done = std::move(done)](std::exception_ptr error) {
    end_committed(uuid, request, error, done, State::kPrepared);
  });
}

std::string Registry::resolve_group(const ResolveRequest& request) {
  const std::string& uuid = request.episode_uuid;
  Outbox out;
  std::string decision;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(uuid);
    if (it != live_.end()) {
      Episode& e = it->second;
      if (e.state == State::kEnding) {
        decision = "pending";
      } else if (e.state == State::kPrepared && e.prepared->group.group_id != request.group_id) {
        out.logs.emplace_back(
            "swarm", fmt::format("resolve_episode_group: episode {} is prepared in group '{}', "
                                 "not '{}'; left alone, answered aborted",
                                 uuid, e.prepared->group.group_id, request.group_id));
        decision = "aborted";
      } else {
        if (e.state != State::kRegistered) {
          retire_locked(uuid, EpisodeEnd::kAborted,
                        "its episode group '" + request.group_id +
                            "' was aborted: a participant's prepare timed out before this "
                            "(coordinator) episode "
                            "was committed.",
                        out, true);
          refill_pool_locked();
          check_drained_locked(clock_(), out);
          out.logs.emplace_back(
              "swarm", fmt::format("group {}: coordinator episode {} aborted on a participant's "
                                   "request (no commit came)",
                                   request.group_id, uuid));
        }
        decision = "aborted";
      }
    } else if (auto r = retired_.find(uuid); r != retired_.end()) {
      // Committed in this group; an episode ended otherwise (another group, a plain end) is not the
      // decision of this group, which therefore never committed.
      decision = r->second.how == EpisodeEnd::kFinished && r->second.group_id == request.group_id
                     ? "committed"
                     : "aborted";
    }
  }
  deliver(out);
  if (!decision.empty()) return decision;
  if (store_ != nullptr) {  // ended before a restart or beyond the memory of retired episodes
    if (std::optional<store::EpisodeRow> stored = store_->get_episode(uuid); stored) {
      const Json group = stored->metadata.value("ajet_group", Json::object());
      const auto id = group.is_object() ? group.find("group_id") : group.end();
      const bool same_group =
          id != group.end() && id->is_string() && id->get<std::string>() == request.group_id;
      return stored->status == store::kEpisodeFinished && same_group ? "committed" : "aborted";
    }
  }
  return "aborted";  // presumed abort: an episode nobody committed
}

void Registry::schedule_next_ask_locked(Episode& e, double now) {
  Prepared& p = *e.prepared;
  p.resolving = false;
  const double wait =
      std::min(options_.resolve_backoff_max,
               options_.resolve_backoff_min * std::pow(2.0, double(std::min(p.asks, 40))));
  p.asks += 1;
  p.next_ask = now + std::max(wait, 0.0);
}

void Registry::settle_prepared(const std::string& uuid, const std::string& decision) {
  Outbox out;
  store::EpisodeRow row;
  EndRequest request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(uuid);
    if (it == live_.end() || it->second.state != State::kPrepared)
      return;  // the client settled it meanwhile
    Episode& e = it->second;
    e.prepared->resolving = false;
    if (decision == "aborted") {
      std::string group = e.prepared->group.group_id;
      retire_locked(
          uuid, EpisodeEnd::kAborted,
          "its episode group '" + group + "' was aborted (the coordinator never committed it).",
          out, true);
      refill_pool_locked();
      check_drained_locked(clock_(), out);
      out.logs.emplace_back(
          "janitor",
          fmt::format("group {}: episode {} aborted, as its coordinator decided", group, uuid));
    } else if (decision == "committed") {
      out.logs.emplace_back(
          "janitor", fmt::format("group {}: episode {} committed, as its coordinator decided",
                                 e.prepared->group.group_id, uuid));
      begin_commit_locked(uuid, "", row, request);
    } else {
      // pending, unreachable, refused: asked again later. The public log says only that no decision
      // came (not what the remote answered, nor whether it answered at all); the front's log has
      // the detail.
      schedule_next_ask_locked(e, clock_());
      out.logs.emplace_back(
          "janitor",
          fmt::format("group {}: episode {} has no decision from its coordinator yet; "
                      "asking again in {:.0f} s",
                      e.prepared->group.group_id, uuid, e.prepared->next_ask - clock_()));
    }
  }
  deliver(out);
  if (decision != "committed") return;
  auto logged = [uuid](std::optional<CommandError> problem) {
    if (problem)
      log().warn("committing episode {} for its group failed: {}", uuid, problem->message);
  };
  if (store_ == nullptr) {
    end_committed(uuid, request, nullptr, logged, State::kPrepared);
    return;
  }
  write_then(std::move(row),
             [this, uuid, request = std::move(request), logged](std::exception_ptr error) {
               end_committed(uuid, request, error, logged, State::kPrepared);
             });
}

void Registry::settle_expired_prepared_locked(double now, SweepResult& result, Outbox& out) {
  std::vector<std::string> expired, given_up;
  for (auto& [uuid, e] : live_) {
    if (e.state != State::kPrepared || now < e.prepared->deadline) continue;
    if (e.prepared->group.is_coordinator()) {
      expired.push_back(uuid);
    } else if (now >= e.prepared->deadline + options_.resolve_give_up) {
      given_up.push_back(uuid);
    } else if (!e.prepared->resolving && now >= e.prepared->next_ask) {
      e.prepared->resolving =
          true;  // one question in flight per episode; settle_prepared clears it
      result.to_resolve.push_back(PendingResolution{uuid, e.prepared->group});
    }
  }
  // Re-asking is capped: a coordinator that never answers must not hold a slot (and a question) for
  // ever. This abort may contradict a commit the coordinator made, so it is an error in the front's
  // log.
  for (const auto& uuid : given_up) {
    const Prepared& p = *live_.at(uuid).prepared;
    std::string group = p.group.group_id;
    log().error(
        "group {}: participant episode {} aborted: its coordinator {} gave no decision within "
        "{:.0f} s after "
        "the prepare_timeout (ajet-swarm start --group-resolve-give-up); if the coordinator "
        "committed, this "
        "group is split",
        group, uuid, p.group.coordinator_url, options_.resolve_give_up);
    retire_locked(
        uuid, EpisodeEnd::kAborted,
        fmt::format(
            "it was prepared in episode group '{}' and aborted: its coordinator gave no decision "
            "within {:.0f} s after the prepare_timeout.",
            group, options_.resolve_give_up),
        out, true);
    out.logs.emplace_back(
        "janitor", fmt::format("group {}: episode {} aborted: no decision from its coordinator in "
                               "time (see the front's log)",
                               group, uuid));
    result.group_aborted.push_back(uuid);
  }
  if (!given_up.empty()) refill_pool_locked();
  for (const auto& uuid : expired) {
    const Prepared& p = *live_.at(uuid).prepared;
    std::string group = p.group.group_id;
    retire_locked(
        uuid, EpisodeEnd::kAborted,
        fmt::format(
            "it was prepared in episode group '{}' and aborted when its prepare_timeout ({:.1f} s) "
            "passed without a commit.",
            group, p.group.prepare_timeout),
        out, true);
    out.logs.emplace_back(
        "janitor", fmt::format("group {}: coordinator episode {} aborted (prepare_timeout passed)",
                               group, uuid));
    result.group_aborted.push_back(uuid);
  }
  if (!expired.empty()) refill_pool_locked();
}

}  // namespace ajet::episodes
