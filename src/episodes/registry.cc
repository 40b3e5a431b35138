// Registry: construction, engine lifecycle, claims, aborts and LLM-call bookkeeping.
// end_episode lives in registry_end.cc, batches and the janitor in registry_batch.cc, pool info and
// the episode buffer in pool_info.cc.
#include "episodes/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "common/encoding.h"
#include "common/log.h"
#include "config/config.h"
#include "store/store.h"

namespace ajet::episodes {

double system_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string_view episode_end_name(EpisodeEnd end) {
  switch (end) {
    case EpisodeEnd::kFinished: return "finished";
    case EpisodeEnd::kAborted: return "aborted";
    case EpisodeEnd::kReclaimed: return "reclaimed";
    case EpisodeEnd::kDropped: return "dropped";
  }
  return "dropped";
}

namespace {
EpisodeKeyClaims claims_for(const std::string& episode_uuid) {
  EpisodeKeyClaims claims;
  claims.episode_uuid = episode_uuid;
  return claims;
}
}  // namespace

RegistryOptions RegistryOptions::from_config(const config::Config& c, std::string openai_base_url) {
  RegistryOptions o;
  o.backbone = parse_backbone(c.backbone);
  o.sample_collection = parse_sample_collection(c.swarm_mode_sample_collection_method);
  o.train_batch_size = c.data.train_batch_size;
  o.num_repeat = c.rollout.num_repeat;
  o.max_env_worker = c.rollout.max_env_worker;
  o.max_cached_episodes = c.swarm_mode_sample_collection_max_cached_episodes;
  o.drain_timeout = c.swarm_mode_drain_timeout;
  o.drain_idle_grace = c.swarm_mode_drain_idle_grace;
  o.agree_boundary_dwell = c.swarm_mode_agree_boundary_dwell;
  o.max_staleness = c.async.max_staleness;
  o.call_retention = {c.store_retention.full_steps, c.store_retention.sample_episodes};
  o.openai_base_url = std::move(openai_base_url);
  o.training_model_path = c.model.path;
  return o;
}

Registry::Registry(RegistryOptions options, EpisodeKeySigner signer, store::Store* store,
                   UnixClock clock)
    : options_(std::move(options)),
      signer_(std::move(signer)),
      view_salt_(new_uuid_hex()),
      store_(store),
      clock_(std::move(clock)) {}

Registry::~Registry() {
  std::unique_lock<std::mutex> lock(mu_);
  callbacks_cv_.wait(lock, [&] { return pending_store_callbacks_ == 0; });
}

void Registry::set_hooks(RegistryHooks hooks) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_ = std::move(hooks);
}

RegistryOptions Registry::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

void Registry::deliver(Outbox& out) {
  for (const auto& [tag, message] : out.logs) {
    log().info("[{}] {}", tag, message);
    if (hooks_.on_verbose_log) hooks_.on_verbose_log(tag, message);
  }
  if (hooks_.on_episode_closed) {
    for (const auto& closed : out.closed) hooks_.on_episode_closed(closed);
  }
  if (hooks_.on_metrics) {
    for (const auto& m : out.metrics) hooks_.on_metrics(m.step, m.values, m.at);
  }
  if (out.batch_ready) batch_cv_.notify_all();
}

void Registry::transition_locked(EnginePhase to, double now, std::string detail, Outbox& out) {
  EnginePhase from = engine_.status();
  engine_.transition(to, now, std::move(detail));
  out.logs.emplace_back("engine",
                        fmt::format("{} -> {}{}", engine_phase_name(from), engine_phase_name(to),
                                    engine_.detail().empty() ? "" : ": " + engine_.detail()));
  if (store_ != nullptr)
    store_->put_state(store::kStateEngineStatus, std::string(engine_phase_name(to)));
  if (to == EnginePhase::kRolling) {
    refresh_activity_locked(now);  // nobody could call the model while we were not rolling
    refill_pool_locked();
  }
}

void Registry::refresh_activity_locked(double now) {
  for (auto& [uuid, e] : live_) {
    if (e.state != State::kRegistered && !e.restored_clock) e.latest_activity = now;
  }
}

void Registry::refill_pool_locked() {
  if (engine_.status() != EnginePhase::kRolling) return;
  double now = clock_();
  while (int64_t(live_.size()) < options_.max_env_worker) {
    Episode e;
    e.uuid = new_uuid_hex();
    e.latest_activity = now;
    e.api_key = signer_.make_key(claims_for(e.uuid));
    unclaimed_.push_back(e.uuid);
    live_.emplace(e.uuid, std::move(e));
  }
}

void Registry::retire_locked(const std::string& uuid, EpisodeEnd how, std::string note, Outbox& out,
                             bool store_it) {
  auto it = live_.find(uuid);
  if (it == live_.end()) return;
  Episode& e = it->second;
  if (e.state == State::kRegistered) {
    unclaimed_.erase(std::remove(unclaimed_.begin(), unclaimed_.end(), uuid), unclaimed_.end());
  } else {
    out.closed.push_back(EpisodeClosed{uuid, e.episode_type, how});
    ended_counts_[{std::string(episode_end_name(how)), e.episode_type}] += 1;
    if (store_it && store_ != nullptr)
      store_->retire_episode(uuid, std::string(episode_end_name(how)), clock_());
    retired_[uuid] = Retired{how,
                             e.client_uuid,
                             e.episode_type,
                             std::move(note),
                             e.prepared ? e.prepared->group.group_id : std::string(),
                             std::nullopt};
    retired_order_.push_back(uuid);
    while (retired_order_.size() > kRetiredEpisodesKept) {
      retired_.erase(retired_order_.front());
      retired_order_.pop_front();
    }
  }
  live_.erase(it);
}

void Registry::touch_client_locked(const std::string& client_uuid, double now) {
  if (auto it = clients_.find(client_uuid); it != clients_.end()) it->second.latest_activity = now;
}

void Registry::expire_clients_locked(double now, std::vector<std::string>* expired) {
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (now - it->second.latest_activity > options_.client_active_timeout) {
      if (expired != nullptr) expired->push_back(it->first);
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- lifecycle ----

void Registry::configure(RegistryOptions options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (engine_.status() != EnginePhase::kOffline) {
    fail(ErrorCode::kFailedPrecondition,
         "the registry can only be reconfigured in ENGINE.OFFLINE (current: " +
             std::string(engine_phase_name(engine_.status())) + ")");
  }
  options_ = std::move(options);
}

void Registry::restore(const store::RecoveredState& recovered) {
  double now = clock_();
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_.status() != EnginePhase::kOffline) {
      fail(ErrorCode::kFailedPrecondition,
           "restore() must run in ENGINE.OFFLINE, before start_booting()");
    }
    engine_.set_global_step(recovered.global_step);
    next_batch_id_ = std::max(next_batch_id_, recovered.next_batch_id);
    std::vector<FinishedEpisode> pending;
    for (const auto& row : recovered.pending_finished) {
      pending.push_back(FinishedEpisode{row.uuid,
                                        row.task_id,
                                        row.client_uuid,
                                        row.reward.value_or(0.0),
                                        row.is_success,
                                        row.metadata,
                                        row.log_metrics,
                                        {},
                                        row.ended_at.value_or(0)});
    }
    current_.prepend(std::move(pending));
    for (const auto& claimed : recovered.claimed) {
      const auto& row = claimed.episode;
      Episode e;
      e.uuid = row.uuid;
      e.api_key = signer_.make_key(claims_for(row.uuid));
      e.state = State::kClaimed;
      if (row.status ==
          store::kEpisodePrepared) {  // episode groups: prepared again, with its deadline
        e.prepared = prepared_from_row(row, now);
        if (e.prepared) e.state = State::kPrepared;
      }
      e.client_uuid = row.client_uuid;
      e.episode_type = row.episode_type;
      e.optional_task_id = row.optional_task_id;
      e.claimed_at = row.claimed_at;
      // The idle clock goes on from the client's last sign of life before the restart, so a loop of
      // quick restarts cannot keep a dead client's claim alive (a fresh clock each time would).
      e.latest_activity = e.client_seen = std::min(now, last_activity_of(claimed));
      e.restored_clock = true;
      e.discard_episode_timeout = row.discard_episode_timeout;
      for (const auto& call : claimed.calls) {
        e.call_indices.push_back(call.call_index);
        e.stored_bytes += call.stored_bytes();
        e.next_call_index = std::max(e.next_call_index, call.call_index + 1);
        for (int32_t v : call.policy_versions) {
          if (e.oldest_policy_version < 0 || v < e.oldest_policy_version)
            e.oldest_policy_version = v;
        }
      }
      e.llm_call_count = int64_t(claimed.calls.size());
      live_[e.uuid] = std::move(e);
    }
    if (recovered.registry_snapshot.is_object()) {
      for (const auto& c : recovered.registry_snapshot.value("active_clients", Json::array())) {
        if (c.is_object() && c.contains("client_uuid") && c["client_uuid"].is_string()) {
          clients_[c["client_uuid"].get<std::string>()] =
              ActiveClient{now, c.value("agreed_sync_weight", false)};
        }
      }
    }
    out.logs.emplace_back(
        "swarm", fmt::format("restored from the store: global_step {}, {} finished episodes in the "
                             "current batch, {} claimed episodes",
                             recovered.global_step, recovered.pending_finished.size(),
                             recovered.claimed.size()));
  }
  deliver(out);
}

void Registry::start_booting(std::string detail, bool continues_run) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_.status() != EnginePhase::kOffline) {
      fail(ErrorCode::kFailedPrecondition, "Engine is already started (current status: " +
                                               std::string(engine_phase_name(engine_.status())) +
                                               "). Call `stop_engine` first.");
    }
    continues_run_ = continues_run;
    if (!continues_run && store_ != nullptr)
      store_->put_state(store::kStateRunFirstBatch, std::to_string(next_batch_id_));
    transition_locked(EnginePhase::kBooting, clock_(),
                      detail.empty() ? "starting the engine" : std::move(detail), out);
  }
  deliver(out);
}

void Registry::engine_ready(std::string detail, std::optional<int64_t> engine_policy_version,
                            bool roll_back) {
  Outbox out;
  std::vector<Batch> replays;
  if (engine_policy_version && roll_back) replays = roll_back_to(*engine_policy_version);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_.status() != EnginePhase::kBooting) {
      fail(ErrorCode::kFailedPrecondition, "engine_ready() needs ENGINE.BOOTING (current: " +
                                               std::string(engine_phase_name(engine_.status())) +
                                               ")");
    }
    if (engine_policy_version)
      adopt_engine_version_locked(*engine_policy_version, "on connecting", out);
    queue_replays_locked(std::move(replays), out);
    double now = clock_();
    transition_locked(EnginePhase::kRolling, now, std::move(detail), out);
    check_trigger_locked(now, out);  // restored episodes may already fill a batch
  }
  deliver(out);
}

void Registry::engine_restarting(std::string detail) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_.status() == EnginePhase::kOffline) {
      fail(ErrorCode::kFailedPrecondition, "the engine is offline; start it with start_booting()");
    }
    continues_run_ = true;  // the engine restarts from the newest checkpoint
    // A batch the trainer never finished is formed again as it was (registry_replay.cc), oldest
    // first, after the batches the weights lost: it needs no trigger (an agree-based one would
    // wait for an agreement its clients already gave).
    for (auto& [id, batch] : training_) replay_.push_back(std::move(batch));
    if (ready_) replay_.push_back(std::move(*ready_));
    training_.clear();
    ready_.reset();
    transition_locked(EnginePhase::kBooting, clock_(), std::move(detail), out);
  }
  deliver(out);
}

std::vector<std::string> Registry::stop(std::string detail) {
  Outbox out;
  std::vector<std::string> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    double now = clock_();
    std::vector<std::string> uuids;
    for (const auto& [uuid, e] : live_) uuids.push_back(uuid);
    for (const auto& uuid : uuids) {
      if (live_.at(uuid).state != State::kRegistered) dropped.push_back(uuid);
      retire_locked(uuid, EpisodeEnd::kDropped,
                    "it was dropped when the engine stopped (ENGINE.OFFLINE).", out, true);
    }
    bool pending =
        current_.episodes() > 0 || ready_.has_value() || !training_.empty() || !replay_.empty();
    if (pending && store_ != nullptr)
      store_->abandon_pending(next_batch_id_++, engine_.global_step(), now);
    current_.take_all();
    batch_aborted_by_cause_.clear();
    ready_.reset();
    replay_.clear();  // abandon_pending abandoned the rolled-back batches too
    training_.clear();
    clients_.clear();
    transition_locked(EnginePhase::kOffline, now, detail.empty() ? "stopped" : std::move(detail),
                      out);
    if (!dropped.empty())
      out.logs.emplace_back("swarm",
                            fmt::format("stop: dropped {} running episodes", dropped.size()));
    out.batch_ready = true;  // wake a waiting trainer driver so it sees OFFLINE
  }
  deliver(out);
  return dropped;
}

void Registry::set_status_detail(std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_.set_detail(std::move(detail));
}

void Registry::begin_weight_export() {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    transition_locked(EnginePhase::kWeightExporting, clock_(), "exporting a checkpoint", out);
  }
  deliver(out);
}

void Registry::end_weight_export() {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (engine_.status() != EnginePhase::kWeightExporting) {
      fail(ErrorCode::kFailedPrecondition, "end_weight_export() needs ENGINE.WEIGHT_EXPORTING");
    }
    transition_locked(EnginePhase::kWeightSyncing, clock_(), "checkpoint exported", out);
  }
  deliver(out);
}

EnginePhase Registry::engine_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_.status();
}

int64_t Registry::global_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_.global_step();
}

Json Registry::engine_status_json(const ViewScope& scope) const {
  std::lock_guard<std::mutex> lock(mu_);
  Json out = engine_.to_json();
  Json& recent = out["recent_batches"] = Json::array();
  for (const Json& b : recent_batches_) {
    recent.push_back(b);
    // A public view: each client's share under the id it shows there (pool_info's pseudonyms).
    Json* shares = nullptr;
    if (auto s = recent.back().find("stats"); s != recent.back().end() && s->is_object()) {
      if (auto r = s->find("rollout"); r != s->end() && r->is_object()) {
        if (auto c = r->find("client_shares"); c != r->end() && c->is_object()) shares = &*c;
      }
    }
    if (shares == nullptr) continue;
    Json shown = Json::object();
    for (auto& [client, share] : shares->items())
      shown[shown_id(scope, "client", client, client)] = share;
    *shares = std::move(shown);
  }
  return out;
}

double Registry::last_activity_of(const store::RecoveredEpisode& claimed) {
  double last = claimed.episode.claimed_at;
  for (const auto& call : claimed.calls) last = std::max({last, call.started_at, call.finished_at});
  if (claimed.episode.ended_at) last = std::max(last, *claimed.episode.ended_at);  // a prepare
  return last;
}

// ---- claims, aborts ----

int64_t Registry::claims_of_locked(const std::string& client_uuid) const {
  int64_t n = 0;
  for (const auto& [uuid, e] : live_)
    n += e.state != State::kRegistered && e.client_uuid == client_uuid ? 1 : 0;
  return n;
}

int64_t Registry::claimed_locked() const {
  int64_t n = 0;
  for (const auto& [uuid, e] : live_) n += e.state != State::kRegistered ? 1 : 0;
  return n;
}

void Registry::set_admission_cap(int64_t cap) {
  std::lock_guard<std::mutex> lock(mu_);
  admission_cap_ = cap;
}

int64_t Registry::claim_share_locked() const {
  if (options_.max_claims_per_client < 0) return std::numeric_limits<int64_t>::max();
  if (options_.max_claims_per_client == 0) return std::max<int64_t>(1, options_.max_env_worker / 2);
  return options_.max_claims_per_client;
}

ClaimResponse Registry::claim_episode(const ClaimRequest& request) {
  if (request.episode_type != "train" && request.episode_type != "eval") {
    invalid_argument("claim_episode body: Unknown episode_type: '" + request.episode_type +
                     "' (expected train or eval)");
  }
  ClaimResponse resp;
  resp.client_uuid = request.client_uuid;
  double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  if (request.discard_episode_timeout > options_.max_discard_episode_timeout) {
    invalid_argument(fmt::format(
        "claim_episode body: field 'discard_episode_timeout' is {:g} s; at most {:g} s are "
        "accepted (an idle claim must expire; ajet-swarm start --max-discard-episode-timeout "
        "sets the bound)",
        request.discard_episode_timeout, options_.max_discard_episode_timeout));
  }
  EnginePhase status = engine_.status();
  if (!claims_allowed(status)) {
    resp.fail_cause = claim_fail_cause(status);
    return resp;
  }
  if (claims_paused_locked()) {
    resp.fail_cause = fmt::format(
        "Engine not ready. Current status: [{}]. The trainer is {} batches behind "
        "(ajet.async.max_staleness = {}). "
        "Try again (maybe 1 minute) later.",
        engine_phase_name(status), training_.size() + (ready_ ? 1 : 0), options_.max_staleness);
    return resp;
  }
  if (unclaimed_.empty()) {
    resp.fail_cause = "No available episodes to claim. Try again (maybe 1 minute) later.";
    return resp;
  }
  // Worded as an empty pool ("No available episodes"), which every client already waits out.
  if (const int64_t claimed = admission_cap_ > 0 ? claimed_locked() : 0;
      admission_cap_ > 0 && claimed >= admission_cap_) {
    resp.fail_cause = fmt::format(
        "No available episodes to claim: {} episodes are claimed, at least as many as the engines' "
        "KV caches hold now (the admission cap is {} of the pool's {}, lowered under KV-cache "
        "pressure; GET /metrics ajet_admission_cap). Try again shortly.",
        claimed, admission_cap_, options_.max_env_worker);
    return resp;
  }
  if (const int64_t share = claim_share_locked(); claims_of_locked(request.client_uuid) >= share) {
    resp.fail_cause = fmt::format(
        "No available episodes for this client: client {} holds {} claimed episodes, its share of "
        "the pool of {} "
        "(ajet-swarm start --max-claims-per-client). End or abort one first, or try again later.",
        request.client_uuid, share, options_.max_env_worker);
    return resp;
  }
  std::string uuid = unclaimed_.front();
  unclaimed_.pop_front();
  Episode& e = live_.at(uuid);
  e.state = State::kClaimed;
  e.client_uuid = request.client_uuid;
  e.episode_type = request.episode_type;
  e.claimed_at = now;
  e.seen(now);
  e.discard_episode_timeout = request.discard_episode_timeout;
  e.llm_call_count = 0;
  e.optional_task_id = request.throttle_policy ? request.throttle_policy->current_task_id : "";
  e.claim_global_step = engine_.global_step();
  // The key names the adapter the claim assigned (signed: calls cannot change it).
  EpisodeKeyClaims claims = claims_for(uuid);
  claims.adapter = request.adapter;
  e.api_key = signer_.make_key(claims);
  touch_client_locked(request.client_uuid, now);
  if (store_ != nullptr) {
    store::EpisodeRow row;
    row.uuid = uuid;
    row.client_uuid = e.client_uuid;
    row.episode_type = e.episode_type;
    row.optional_task_id = e.optional_task_id;
    row.discard_episode_timeout = e.discard_episode_timeout;
    row.claimed_at = now;
    store_->upsert_episode(std::move(row));
  }
  resp.success = true;
  resp.episode_uuid = uuid;
  resp.openai_base_url = options_.openai_base_url;
  resp.openai_api_key = e.api_key;
  resp.global_step = e.claim_global_step;
  return resp;
}

namespace {

// At most kMaxAbortCauses distinct causes per map; later ones count as "other".
void count_cause(std::map<std::string, int64_t>& counts, const std::string& cause) {
  const bool known = counts.count(cause) > 0;
  counts[known || counts.size() < kMaxAbortCauses ? cause : "other"] += 1;
}

}  // namespace

void Registry::abort_episode(const AbortRequest& request) {
  Outbox out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    double now = clock_();
    auto it = live_.find(request.episode_uuid);
    // Unknown, ended or being stored: still a success. A prepared episode (episode groups) aborts.
    if (it == live_.end() ||
        (it->second.state != State::kClaimed && it->second.state != State::kPrepared))
      return;
    if (!request.client_uuid.empty() && request.client_uuid != it->second.client_uuid) {
      out.logs.emplace_back(
          "swarm", fmt::format("abort_episode: client {} tried to abort episode {} of client {}; "
                               "ignored",
                               request.client_uuid, request.episode_uuid, it->second.client_uuid));
    } else {
      touch_client_locked(it->second.client_uuid, now);
      if (request.declare_client_active && it->second.episode_type == "train") {
        clients_[it->second.client_uuid].latest_activity = now;
      }
      const bool train = it->second.episode_type == "train";
      retire_locked(request.episode_uuid, EpisodeEnd::kAborted,
                    fmt::format("it was aborted by its client (cause {}).", request.cause), out,
                    true);
      count_cause(aborted_by_cause_, request.cause);
      if (train) count_cause(batch_aborted_by_cause_, request.cause);
      refill_pool_locked();
      check_drained_locked(now, out);
    }
  }
  deliver(out);
}

bool Registry::can_continue_episode(const EpisodeRef& request) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(request.episode_uuid);
  if (it == live_.end() || it->second.state != State::kClaimed) return false;
  return request.client_uuid.empty() || request.client_uuid == it->second.client_uuid;
}

// ---- LLM calls ----

LlmCallTicket Registry::begin_llm_call(const std::string& episode_uuid) {
  return begin_llm_calls(episode_uuid, CallReservation{}).front();
}

namespace {

// 67108864 -> "64", 10485 -> "0.01": the --max-episode-mb value that gives this many bytes.
std::string mib_text(int64_t bytes) {
  return fmt::format("{}", std::stod(fmt::format("{:.3g}", double(bytes) / double(1 << 20))));
}

}  // namespace

std::vector<LlmCallTicket> Registry::begin_llm_calls(const std::string& episode_uuid,
                                                     const CallReservation& want) {
  double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  EnginePhase status = engine_.status();
  auto it = live_.find(episode_uuid);
  if (!chat_allowed(status)) {
    // The client is alive and waiting for the engine (a boot after a restart may outlast its
    // discard_episode_timeout): its idle clock starts again, restored claim or not.
    if (it != live_.end() && it->second.state == State::kClaimed) it->second.seen(now);
    fail(ErrorCode::kUnavailable, chat_unavailable_message(status));
  }
  if (it == live_.end()) {
    if (auto r = retired_.find(episode_uuid); r != retired_.end()) {
      fail(ErrorCode::kNotFound, "Episode " + episode_uuid + " has ended: " + r->second.note);
    }
    fail(ErrorCode::kNotFound, "Episode " + episode_uuid + " not found.");
  }
  Episode& e = it->second;
  if (e.state == State::kRegistered) {
    fail(ErrorCode::kNotFound,
         "Episode " + episode_uuid + " is not claimed; call claim_episode first.");
  }
  if (e.state == State::kEnding)
    fail(ErrorCode::kNotFound, "Episode " + episode_uuid + " has ended.");
  if (e.state == State::kPrepared) {
    fail(ErrorCode::kNotFound,
         "Episode " + episode_uuid + " has ended (prepared in an episode group).");
  }
  const int64_t held = int64_t(e.call_indices.size() + e.pending_calls.size());
  if (want.max_calls > 0 && held + want.calls > want.max_calls) {
    fail(ErrorCode::kResourceExhausted,
         fmt::format("episode {} has {} LLM calls recorded or in flight; {} more (n) would pass "
                     "this front's limit "
                     "of {} calls per episode (ajet-swarm --max-episode-calls). End the episode "
                     "and claim another.",
                     episode_uuid, held, want.calls, want.max_calls));
  }
  if (want.max_bytes > 0 && e.stored_bytes + want.request_bytes > want.max_bytes) {
    fail(ErrorCode::kResourceExhausted,
         fmt::format("episode {} has stored {} bytes of LLM calls (bodies and token arrays); this "
                     "request's {} bytes "
                     "would pass this front's limit of {} bytes per episode (ajet-swarm "
                     "--max-episode-mb {}). End "
                     "the episode and claim another.",
                     episode_uuid, e.stored_bytes, want.request_bytes, want.max_bytes,
                     mib_text(want.max_bytes)));
  }
  e.seen(now);
  touch_client_locked(e.client_uuid, now);
  std::vector<LlmCallTicket> tickets;
  for (int64_t i = 0; i < std::max<int64_t>(1, want.calls); ++i) {
    e.llm_call_count += 1;
    e.calls_in_flight += 1;
    e.pending_calls.insert(e.next_call_index);
    tickets.push_back(LlmCallTicket{e.uuid, e.episode_type, e.client_uuid, e.next_call_index++});
  }
  return tickets;
}

void Registry::end_llm_call(const std::string& episode_uuid, int64_t call_index) {
  double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(episode_uuid);
  if (it == live_.end() || it->second.calls_in_flight == 0) return;
  it->second.calls_in_flight -= 1;
  it->second.pending_calls.erase(call_index);
  it->second.seen(now);
}

bool Registry::is_live(const std::string& episode_uuid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(episode_uuid) > 0;
}

CallInFlight::~CallInFlight() {
  for (int64_t call_index : call_indices_) registry_.end_llm_call(uuid_, call_index);
}

bool Registry::record_llm_call(store::CallRow call) {
  double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(call.episode_uuid);
  if (it == live_.end() || it->second.state != State::kClaimed) return false;
  Episode& e = it->second;
  e.seen(now);
  e.call_indices.push_back(call.call_index);
  e.pending_calls.erase(call.call_index);
  e.stored_bytes += call.stored_bytes();
  e.next_call_index = std::max(e.next_call_index, call.call_index + 1);
  for (int32_t v : call.policy_versions) {
    if (e.oldest_policy_version < 0 || v < e.oldest_policy_version) e.oldest_policy_version = v;
  }
  // Enqueued under the mutex: a later end_episode's write is queued after this one.
  if (store_ != nullptr) store_->put_call(std::move(call));
  return true;
}

}  // namespace ajet::episodes
