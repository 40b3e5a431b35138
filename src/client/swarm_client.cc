#include "client/swarm_client.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cstdlib>
#include <random>
#include <regex>
#include <string_view>
#include <thread>

#include "common/encoding.h"
#include "common/json.h"
#include "common/log.h"

namespace ajet::client {

namespace {

using Clock = std::chrono::steady_clock;
using Deadline = std::optional<Clock::time_point>;

constexpr int kMaxEpisodeTimeFactor = 8;                    // upstream: 8 x discard_episode_timeout
constexpr std::chrono::seconds kEngineCommandTimeout{600};  // start/stop_engine (upstream)

Deadline deadline_after(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*seconds));
}

std::string error_message(const http::ClientResponse& r) {
  Json body = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
  if (body.is_object()) {
    if (auto e = body.find("error"); e != body.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
        return (*e)["message"];
      if (e->is_string()) return *e;
    }
    for (const char* key : {"detail", "fail_cause", "failure_reason", "message"}) {
      if (auto it = body.find(key);
          it != body.end() && it->is_string() && !it->get<std::string>().empty()) {
        return *it;
      }
    }
  }
  return r.body.substr(0, 2000);
}

std::optional<std::string> status_in(const std::string& fail_cause) {
  static const std::regex re(R"(\[(ENGINE\.[A-Z_]+)\])");
  std::smatch m;
  if (std::regex_search(fail_cause, m, re)) return m[1].str();
  return std::nullopt;
}

double jittered(double seconds, double jitter) {
  if (seconds <= 0 || jitter <= 0) return std::max(0.0, seconds);
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return seconds * std::uniform_real_distribution<double>(1.0 - jitter, 1.0 + jitter)(rng);
}

http::ClientOptions http_options(const SwarmClientOptions& o, std::chrono::milliseconds timeout) {
  http::ClientOptions h;
  h.timeout = timeout;
  h.connect_timeout = o.connect_timeout;
  h.user_agent = "ajet-swarm-cpp";
  return h;
}

std::string percent_encode(const std::string& text) {
  std::string out;
  for (unsigned char ch : text) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += char(ch);
    } else {
      out += fmt::format("%{:02X}", unsigned(ch));
    }
  }
  return out;
}

std::string normalized_url(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.find("://") == std::string::npos) url = "http://" + url;
  return url;
}

}  // namespace

std::string admin_token_for(const std::string& server_url) {
  const std::string url = normalized_url(server_url);
  if (const char* list = std::getenv("AJET_ADMIN_TOKENS"); list != nullptr) {
    const std::string text = list;
    const char* kSeparators = ", \t\r\n";
    int index = 0;
    std::string found;
    for (size_t begin = text.find_first_not_of(kSeparators); begin != std::string::npos;
         begin = text.find_first_not_of(kSeparators, begin)) {
      const size_t end = std::min(text.find_first_of(kSeparators, begin), text.size());
      const std::string entry = text.substr(begin, end - begin);
      begin = end;
      ++index;
      // Messages name the entry by position and URL, never a token.
      const std::string which = "AJET_ADMIN_TOKENS: entry " + std::to_string(index);
      // https:// entries are accepted (the Python client dials them; one list serves both), so a
      // list that names a TLS proxy does not fail every client here.
      if (entry.rfind("http://", 0) != 0 && entry.rfind("https://", 0) != 0) {
        invalid_argument(which + " does not start with http:// or https:// (expected URL=TOKEN)");
      }
      const size_t eq = entry.find('=');
      if (eq == std::string::npos || eq + 1 == entry.size()) {
        invalid_argument(which + " (" + entry.substr(0, eq) + ") has no =TOKEN");
      }
      if (found.empty() && normalized_url(entry.substr(0, eq)) == url) found = entry.substr(eq + 1);
    }
    if (!found.empty())
      return found;  // after every entry was checked: a bad one fails for every server
  }
  const char* one = std::getenv("AJET_ADMIN_TOKEN");
  return one != nullptr ? one : "";
}

ErrorCode SwarmError::code_for(SwarmErrorKind kind, int status) {
  switch (kind) {
    case SwarmErrorKind::kConnection: return ErrorCode::kUnavailable;
    case SwarmErrorKind::kOffline: return ErrorCode::kFailedPrecondition;
    case SwarmErrorKind::kTimeout: return ErrorCode::kUnavailable;
    case SwarmErrorKind::kCommand:
    case SwarmErrorKind::kChat:
      switch (status) {
        case 400: return ErrorCode::kInvalidArgument;
        case 401: return ErrorCode::kUnauthenticated;
        case 403: return ErrorCode::kPermissionDenied;
        case 404: return ErrorCode::kNotFound;
        case 409: return ErrorCode::kFailedPrecondition;
        case 413: return ErrorCode::kResourceExhausted;
        case 429:
        case 503: return ErrorCode::kUnavailable;
        default: return ErrorCode::kInternal;
      }
  }
  return ErrorCode::kInternal;
}

Json WorkflowOutput::to_json(const std::string& task_id) const {
  Json meta = metadata.is_object() ? metadata : Json::object();
  meta["task_id"] = task_id;
  Json out = {{"reward", reward}, {"metadata", meta}};
  if (is_success) out["is_success"] = *is_success;
  if (log_metrics.is_object() && !log_metrics.empty()) out["log_metrics"] = log_metrics;
  return out;
}

Json GroupRole::to_json() const {
  Json out = {{"group_id", group_id}, {"prepare_timeout", prepare_timeout}};
  if (!coordinator_url.empty()) out["coordinator_url"] = coordinator_url;
  if (!coordinator_episode_uuid.empty()) {  // a participant (without a URL: on this same front)
    out["coordinator_episode_uuid"] = coordinator_episode_uuid;
    out["coordinator_episode_key"] = coordinator_episode_key;
  }
  return out;
}

Json ThrottlePolicy::to_json() const {
  Json out = {{"current_task_id", current_task_id}, {"ratio", ratio}};
  if (expected_batch_size) out["expected_batch_size"] = *expected_batch_size;
  if (expected_num_repeat) out["expected_num_repeat"] = *expected_num_repeat;
  return out;
}

SwarmClient::SwarmClient(std::string server_url, SwarmClientOptions options)
    : server_url_(normalized_url(std::move(server_url))),
      options_(std::move(options)),
      client_uuid_(options_.client_uuid.empty() ? new_uuid_hex() : options_.client_uuid),
      commands_(server_url_, http_options(options_, options_.timeout)),
      long_commands_(server_url_, http_options(options_, kEngineCommandTimeout), 2) {
  if (options_.admin_token.empty()) options_.admin_token = admin_token_for(server_url_);
}

http::ClientResponse SwarmClient::send(const std::string& method, const std::string& path,
                                       const Json* body, bool admin,
                                       std::optional<std::chrono::milliseconds> timeout,
                                       const http::Headers& extra) {
  http::Headers headers = extra;
  if (admin && !options_.admin_token.empty() && !headers.has("Authorization")) {
    headers.add("Authorization", "Bearer " + options_.admin_token);
  }
  ConnectionPool& pool = timeout && *timeout > options_.timeout ? long_commands_ : commands_;
  auto conn = pool.acquire();
  try {
    if (body != nullptr) return conn->post_json(path, *body, headers);
    return conn->request(method, path, headers);
  } catch (const Error& e) {
    conn.discard();
    if (e.code() == ErrorCode::kInvalidArgument) throw;
    throw SwarmError(SwarmErrorKind::kConnection,
                     fmt::format("{} {}{}: {}", method, server_url_, path, e.what()));
  }
}

http::Headers SwarmClient::episode_auth(const std::string& episode_uuid) const {
  http::Headers headers;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = keys_.find(episode_uuid); it != keys_.end()) {
    headers.add("Authorization", "Bearer " + it->second);
  } else if (!options_.admin_token
                  .empty()) {  // an episode another client claimed: the admin may end it
    headers.add("Authorization", "Bearer " + options_.admin_token);
  }
  return headers;
}

void SwarmClient::forget_key(const std::string& episode_uuid) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_.erase(episode_uuid);
}

http::ClientResponse SwarmClient::post_retrying(const std::string& path, const Json& body,
                                                int attempts, const http::Headers& headers) {
  std::optional<SwarmError> last;
  for (int attempt = 0; attempt < std::max(1, attempts); ++attempt) {
    if (attempt > 0) {
      double backoff =
          std::min(options_.retry.engine_busy, 0.5 * double(1 << std::min(attempt, 10)));
      std::this_thread::sleep_for(
          std::chrono::duration<double>(jittered(backoff, options_.retry.jitter)));
    }
    try {
      http::ClientResponse r = send("POST", path, &body, false, std::nullopt, headers);
      if (r.status >= 500 && attempt + 1 < attempts) {
        last.emplace(SwarmErrorKind::kCommand,
                     fmt::format("{}: HTTP {}: {}", path, r.status, error_message(r)), r.status);
        continue;
      }
      return r;
    } catch (const SwarmError& e) {
      if (e.kind() != SwarmErrorKind::kConnection) throw;
      log().warn("swarm client: {}; retrying", e.what());
      last = e;
    }
  }
  throw *last;
}

Json SwarmClient::json_or_throw(const http::ClientResponse& r, const std::string& what) const {
  Json body = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
  if (r.status != 200 || !body.is_object()) {
    std::string message = error_message(r);
    throw SwarmError(SwarmErrorKind::kCommand,
                     fmt::format("{} refused by {} ({}): {}", what, server_url_, r.status, message),
                     r.status);
  }
  if (body.value("success", true) == false && !body.contains("fail_cause") &&
      !body.contains("failure_reason")) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     fmt::format("{} failed on {}: {}", what, server_url_, error_message(r)),
                     r.status);
  }
  return body;
}

void SwarmClient::sleep_within(double seconds, const Deadline& deadline,
                               const std::string& what) const {
  auto wait = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(jittered(seconds, options_.retry.jitter)));
  if (deadline) {
    auto left = *deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      throw SwarmError(
          SwarmErrorKind::kTimeout,
          fmt::format("gave up waiting for {} at {} (max_wait passed)", what, server_url_));
    }
    wait = std::min(wait, left);
  }
  std::this_thread::sleep_for(wait);
}

void SwarmClient::note(const std::string& message) const {
  if (options_.verbose) {
    log().info("swarm client: {}", message);
  } else {
    log().debug("swarm client: {}", message);
  }
}

std::string SwarmClient::rewrite_base_url(const std::string& base_url) const {
  // Replace "scheme://host[:port]" (upstream: re.sub(r'^https?://[^/]+', server_url, base_url)).
  if (base_url.rfind("http://", 0) != 0 && base_url.rfind("https://", 0) != 0) return base_url;
  size_t host = base_url.find("://") + 3;
  size_t path = base_url.find('/', host);
  return server_url_ + (path == std::string::npos ? std::string() : base_url.substr(path));
}

std::variant<Episode, std::string> SwarmClient::claim_once(const ClaimOptions& o) {
  Json body = {{"client_uuid", client_uuid_},
               {"episode_type", o.episode_type},
               {"discard_episode_timeout", o.discard_episode_timeout}};
  if (o.throttle_policy) body["throttle_policy"] = o.throttle_policy->to_json();
  if (!o.adapter.empty()) body["adapter"] = o.adapter;
  if (const std::string run = followed_engine_run(); !run.empty()) body["engine_run"] = run;
  const http::ClientResponse r = send("POST", "/claim_episode", &body, false);
  if (r.status == 409) {
    throw SwarmError(SwarmErrorKind::kOffline,
                     fmt::format("the engine at {} is no longer the one this client follows: {}",
                                 server_url_, error_message(r)),
                     r.status);
  }
  Json data = json_or_throw(r, "claim_episode");
  if (!data.value("success", false)) {
    std::string cause = data.value("fail_cause", "");
    return cause.empty() ? std::string("claim_episode failed without a fail_cause") : cause;
  }
  Episode e;
  e.episode_uuid = get_string(data, "episode_uuid", "claim_episode answer");
  e.base_url = rewrite_base_url(get_string(data, "openai_base_url", "claim_episode answer"));
  e.api_key = get_string(data, "openai_api_key", "claim_episode answer");
  e.client_uuid = client_uuid_;
  e.episode_type = o.episode_type;
  e.global_step = data.value("global_step", Json(0)).is_number_integer()
                      ? data["global_step"].get<int64_t>()
                      : 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  expire_at_[e.episode_uuid] =
      now + std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(kMaxEpisodeTimeFactor * o.discard_episode_timeout));
  keys_[e.episode_uuid] = e.api_key;
  // Long expired: the server reclaimed them long ago, so neither record is needed any more.
  std::erase_if(expire_at_, [&](const auto& kv) {
    const bool old = kv.second + std::chrono::seconds(10) < now;
    if (old) keys_.erase(kv.first);
    return old;
  });
  return e;
}

Episode SwarmClient::begin_episode(const ClaimOptions& o) {
  if (o.episode_type != "train" && o.episode_type != "eval") {
    throw SwarmError(
        SwarmErrorKind::kCommand,
        "begin_episode: episode_type must be train or eval, got '" + o.episode_type + "'");
  }
  if (!(o.discard_episode_timeout > 0)) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     "begin_episode: discard_episode_timeout must be positive (seconds)");
  }
  const Deadline deadline = deadline_after(o.max_wait);
  bool seen_not_offline = false;
  double delay = 0;
  while (true) {
    if (delay > 0) sleep_within(delay, deadline, "an episode to claim");
    std::variant<Episode, std::string> claimed;
    try {
      if (o.throttle_policy && o.episode_type == "train") {
        std::lock_guard<std::mutex> claim_lock(claim_mu_);
        Json pool = get_rollout_stat();
        std::optional<std::string> reason;
        {
          std::lock_guard<std::mutex> lock(mu_);
          reason = throttle_decision(*o.throttle_policy, pool, client_uuid_, recent_);
        }
        if (reason) {
          note("throttle: " + *reason);
          delay = options_.retry.throttle;
          continue;
        }
        claimed = claim_once(o);
      } else {
        claimed = claim_once(o);
      }
    } catch (const SwarmError& e) {
      if (e.kind() != SwarmErrorKind::kConnection) throw;
      log().warn("swarm client: claim_episode: {}; retrying", e.what());
      delay = options_.retry.engine_busy;
      continue;
    }
    if (auto* episode = std::get_if<Episode>(&claimed)) {
      note("claimed episode " + episode->episode_uuid);
      return *episode;
    }
    const std::string& cause = std::get<std::string>(claimed);
    if (o.on_wait) o.on_wait(cause);
    if (std::optional<std::string> status = status_in(cause)) {
      // Following an engine (follow_engine_run): it was started, so OFFLINE means it is gone.
      if (*status == kOffline && (seen_not_offline || !followed_engine_run().empty())) {
        throw SwarmError(
            SwarmErrorKind::kOffline,
            fmt::format(
                "the engine at {} went to ENGINE.OFFLINE while this client waited to claim an "
                "episode (stop_engine was called, or the engine failed)",
                server_url_));
      }
      seen_not_offline = seen_not_offline || *status != kOffline;
      note("engine status " + *status + ": waiting for ENGINE.ROLLING");
      delay = options_.retry.status_poll;
    } else if (cause.rfind("No available episodes", 0) == 0) {
      seen_not_offline = true;
      delay = options_.retry.empty_pool;
    } else {
      log().warn("swarm client: claim_episode failed: {}; retrying", cause);
      delay = options_.retry.engine_busy;
    }
  }
}

EndResult SwarmClient::end_episode(const std::string& task_id, const std::string& episode_uuid,
                                   const WorkflowOutput& output) {
  if (episode_uuid.empty())
    throw SwarmError(SwarmErrorKind::kCommand, "end_episode: episode_uuid is empty");
  if (task_id.empty())
    throw SwarmError(SwarmErrorKind::kCommand, "end_episode: task_id must not be empty");
  std::optional<Clock::time_point> expire;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = expire_at_.find(episode_uuid); it != expire_at_.end()) {
      expire = it->second;
      expire_at_.erase(it);
    }
  }
  if (expire && Clock::now() > *expire) {
    log().warn(
        "swarm client: episode {} outlived {} x discard_episode_timeout; aborting it instead of "
        "ending it",
        episode_uuid, kMaxEpisodeTimeFactor);
    abort_episode(episode_uuid);
    return EndResult::kAbortedExpired;
  }
  Json body = {{"client_uuid", client_uuid_},
               {"episode_uuid", episode_uuid},
               {"task_id", task_id},
               {"workflow_output", output.to_json(task_id)}};
  http::ClientResponse r = post_retrying("/end_episode", body, options_.retry.end_episode_attempts,
                                         episode_auth(episode_uuid));
  if (r.status == 200) {
    Json data = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
    if (!data.is_object() || data.value("success", true)) {
      note(fmt::format("ended episode {} (task {}, reward {})", episode_uuid, task_id,
                       output.reward));
      forget_key(episode_uuid);
      return EndResult::kEnded;
    }
  }
  std::string message = error_message(r);
  if (message.find("WEIGHT_SYNCING") != std::string::npos ||
      message.find("WEIGHT_EXPORTING") != std::string::npos) {
    // The batch closed while this episode ran: part of every weight sync, not a problem (the caller
    // gets kDropped and counts it), so info with verbose, else debug.
    note(fmt::format(
        "end_episode {}: the engine already moved on to a weight update; the episode is dropped "
        "(expected at batch boundaries): {}",
        episode_uuid, message));
    return EndResult::kDropped;
  }
  throw SwarmError(SwarmErrorKind::kCommand,
                   fmt::format("end_episode {} refused by {} ({}): {}", episode_uuid, server_url_,
                               r.status, message),
                   r.status);
}

Prepared SwarmClient::prepare_end_episode(const std::string& task_id,
                                          const std::string& episode_uuid,
                                          const WorkflowOutput& output, const GroupRole& role) {
  if (episode_uuid.empty() || task_id.empty()) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     "prepare_end_episode: episode_uuid and task_id must not be empty");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    expire_at_.erase(episode_uuid);
  }
  Json body = {{"client_uuid", client_uuid_},
               {"episode_uuid", episode_uuid},
               {"task_id", task_id},
               {"workflow_output", output.to_json(task_id)},
               {"group", role.to_json()}};
  Json data =
      json_or_throw(post_retrying("/prepare_end_episode", body, options_.retry.end_episode_attempts,
                                  episode_auth(episode_uuid)),
                    "prepare_end_episode " + episode_uuid);
  Prepared p;
  p.global_step_at_claim = data.value("global_step_at_claim", int64_t(0));
  p.global_step = data.value("global_step", int64_t(0));
  p.weights_changed = data.value("weights_changed", false);
  return p;
}

void SwarmClient::commit_episode(const std::string& episode_uuid) {
  Json body = {{"client_uuid", client_uuid_}, {"episode_uuid", episode_uuid}};
  json_or_throw(post_retrying("/commit_episode", body, options_.retry.end_episode_attempts,
                              episode_auth(episode_uuid)),
                "commit_episode " + episode_uuid);
  forget_key(episode_uuid);
}

bool SwarmClient::abort_episode(const std::string& episode_uuid, const std::string& cause) {
  if (episode_uuid.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    expire_at_.erase(episode_uuid);
  }
  Json body = {{"client_uuid", client_uuid_},
               {"episode_uuid", episode_uuid},
               {"task_id", ""},
               {"workflow_output", {{"reward", 0.0}, {"metadata", {{"task_id", ""}}}}}};
  if (!cause.empty()) body["cause"] = cause;
  try {
    http::ClientResponse r = post_retrying("/abort_episode", body, 2, episode_auth(episode_uuid));
    if (r.status == 200) {
      note("aborted episode " + episode_uuid);
      forget_key(episode_uuid);
      return true;
    }
    log().error("swarm client: abort_episode {} refused ({}): {}", episode_uuid, r.status,
                error_message(r));
  } catch (const std::exception& e) {
    log().error("swarm client: abort_episode {}: {}", episode_uuid, e.what());
  }
  return false;
}

bool SwarmClient::can_continue_episode(const std::string& episode_uuid) {
  if (episode_uuid.empty()) return false;
  try {
    Json body = {{"client_uuid", client_uuid_}, {"episode_uuid", episode_uuid}};
    http::ClientResponse r = send("POST", "/can_continue_episode", &body, false);
    Json data = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
    return r.status == 200 && data.is_object() && data.value("can_continue", false);
  } catch (const std::exception& e) {
    log().warn("swarm client: can_continue_episode: {}", e.what());
    return false;
  }
}

Json SwarmClient::get_episode_buffer() {
  // Other clients' ids come back as pseudonyms unless the admin token is sent (docs/protocol.md).
  Json body = {{"client_uuid", client_uuid_}};
  return json_or_throw(send("POST", "/get_episode_buffer", &body, true), "get_episode_buffer")
      .value("buffer", Json::array());
}

std::vector<BatchOutcome> parse_recent_batches(const Json& status_body) {
  std::vector<BatchOutcome> out;
  auto it = status_body.find("recent_batches");
  if (it == status_body.end() || !it->is_array()) return out;
  for (const Json& b : *it) {
    if (!b.is_object()) continue;
    BatchOutcome o;
    o.batch_id = b.value("batch_id", int64_t{0});
    o.global_step = b.value("global_step", int64_t{-1});
    o.trained = b.value("trained", false);
    o.stats = b.value("stats", Json(nullptr));
    o.error = b.value("error", Json::object());
    out.push_back(std::move(o));
  }
  return out;
}

int64_t BatchOutcome::policy_version() const {
  return stats.is_object() ? stats.value("policy_version", int64_t{-1}) : -1;
}

std::string BatchOutcome::error_code() const {
  return error.is_object() ? error.value("code", "") : "";
}

const BatchOutcome* EngineStatus::batch_formed_at(int64_t step) const {
  for (auto b = recent_batches.rbegin(); b != recent_batches.rend(); ++b) {
    if (b->global_step == step) return &*b;
  }
  return nullptr;
}

const BatchOutcome* EngineStatus::newest_batch() const {
  return recent_batches.empty() ? nullptr : &recent_batches.back();
}

const BatchOutcome* EngineStatus::batch_trained_into(int64_t version, bool synchronous) const {
  for (auto b = recent_batches.rbegin(); b != recent_batches.rend(); ++b) {
    if (b->trained && b->stats.is_object() && b->policy_version() == version) return &*b;
  }
  if (!synchronous) return nullptr;
  const BatchOutcome* formed = batch_formed_at(version - 1);
  return formed != nullptr && formed->trained && formed->stats.is_object() ? formed : nullptr;
}

EngineStatus SwarmClient::get_engine_status() {
  EngineStatus s;
  s.status = kCannotConnect;
  s.body = Json::object();
  try {
    http::ClientResponse r = send("GET", "/get_engine_status", nullptr, false);
    Json data = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
    if (r.status != 200 || !data.is_object()) {
      log().warn("swarm client: get_engine_status: HTTP {}: {}", r.status, r.body.substr(0, 200));
      return s;
    }
    s.status = data.value("engine_status", "unknown");
    if (auto d = data.find("engine_status_detail"); d != data.end() && d->is_string())
      s.detail = *d;
    if (auto g = data.find("global_step"); g != data.end() && g->is_number())
      s.global_step = g->get<int64_t>();
    if (auto e = data.find("engine_run"); e != data.end() && e->is_string()) s.engine_run = *e;
    s.recent_batches = parse_recent_batches(data);
    s.body = std::move(data);
  } catch (const SwarmError& e) {
    log().debug("swarm client: get_engine_status: {}", e.what());
  }
  return s;
}

Json SwarmClient::sync_train_config(const std::string& yaml, const std::string& source) {
  Json body = {{"yaml_as_string", yaml}};
  if (!source.empty()) body["source"] = source;
  Json data = json_or_throw(send("POST", "/sync_train_config", &body, true), "sync_train_config");
  for (const auto& w : data.value("warnings", Json::array())) {
    log().warn("sync_train_config: {}", w.is_string() ? w.get<std::string>() : w.dump());
  }
  note("synced the train config");
  return data;
}

Json SwarmClient::sync_train_code(const std::string& zip_archive) {
  http::Headers headers{{"Content-Type", "application/zip"}};
  if (!options_.admin_token.empty()) headers.add("Authorization", "Bearer " + options_.admin_token);
  auto conn = long_commands_.acquire();
  try {
    return json_or_throw(conn->request("POST", "/sync_train_code", headers, zip_archive),
                         "sync_train_code");
  } catch (const SwarmError&) {
    throw;
  } catch (const Error& e) {
    conn.discard();
    throw SwarmError(SwarmErrorKind::kConnection,
                     fmt::format("POST {}/sync_train_code: {}", server_url_, e.what()));
  }
}

Json SwarmClient::start_engine(bool wait, std::optional<double> max_wait, bool from_checkpoint) {
  Json body = Json::object();
  if (from_checkpoint) body["from_checkpoint"] = true;
  Json data = json_or_throw(send("POST", "/start_engine", &body, true, kEngineCommandTimeout),
                            "start_engine");
  note("start_engine accepted");
  if (wait) wait_for_status(kRolling, max_wait, true);
  return data;
}

void SwarmClient::stop_engine(bool wait, std::optional<double> max_wait,
                              const std::string& engine_run) {
  if (get_engine_status().status == kOffline) return;
  Json body = Json::object();
  if (!engine_run.empty()) body["engine_run"] = engine_run;
  json_or_throw(send("POST", "/stop_engine", &body, true, kEngineCommandTimeout), "stop_engine");
  if (wait) wait_for_status(kOffline, max_wait);
}

void SwarmClient::follow_engine_run(const std::string& engine_run) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_run_ = engine_run;
}

std::string SwarmClient::followed_engine_run() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_run_;
}

std::string SwarmClient::auto_sync_train_config_and_start_engine(const std::string& yaml,
                                                                 bool force_restart,
                                                                 std::optional<double> max_wait) {
  if (force_restart) {
    log().warn("swarm client: force_restart: stopping the engine at {}", server_url_);
    stop_engine(true, max_wait);
  }
  std::string status = get_engine_status().status;
  if (status == kCannotConnect) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.retry.cannot_connect_retry));
    status = get_engine_status().status;
    if (status == kCannotConnect) {
      throw SwarmError(SwarmErrorKind::kConnection,
                       "cannot reach the swarm server at " + server_url_);
    }
  }
  if (status == kOffline) {
    sync_train_config(yaml);
    start_engine(true, max_wait);
  } else if (status == kBooting || status == kWeightSyncing || status == kWeightExporting) {
    wait_for_status(kRolling, max_wait, true);
  } else if (status != kRolling && status != kRollingPost) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     "cannot sync the train config or start the engine in status " + status);
  }
  return status;
}

EngineStatus SwarmClient::wait_for_status(const std::string& desired,
                                          std::optional<double> max_wait, bool started) {
  const Deadline deadline = deadline_after(max_wait);
  bool seen_not_offline = started;
  while (true) {
    EngineStatus s = get_engine_status();
    if (s.status == desired) return s;
    if (s.status != kOffline && s.status != kCannotConnect) {
      seen_not_offline = true;
    } else if (s.status == kOffline && seen_not_offline && desired != kOffline) {
      throw SwarmError(
          SwarmErrorKind::kOffline,
          fmt::format("the engine at {} went to ENGINE.OFFLINE while waiting for {}: {}",
                      server_url_, desired,
                      s.detail.empty() ? "no detail (see the server log)" : s.detail));
    }
    sleep_within(options_.retry.status_poll, deadline, desired);
  }
}

Json SwarmClient::get_rollout_stat() {
  try {
    // Naming this client shows its own ids (the throttle tells its tasks apart); the admin token,
    // all.
    http::ClientResponse r = send(
        "GET",
        "/get_current_batch_rollout_pool_information?client_uuid=" + percent_encode(client_uuid_),
        nullptr, true);
    Json data = try_parse_json(r.body).value_or(Json(Json::value_t::discarded));
    if (r.status == 200 && data.is_object()) return data;
  } catch (const SwarmError& e) {
    log().debug("swarm client: get_rollout_stat: {}", e.what());
  }
  return Json::object();
}

int64_t SwarmClient::get_global_step() {
  EngineStatus status = get_engine_status();
  if (status.status == kCannotConnect) {
    throw SwarmError(SwarmErrorKind::kConnection,
                     "get_global_step: " + server_url_ + " is unreachable");
  }
  return status.global_step;
}

std::vector<std::string> SwarmClient::start_multi_engine(
    const std::vector<std::pair<SwarmClient*, std::string>>& pairs, bool force_restart,
    std::optional<double> max_wait) {
  std::vector<std::string> found(pairs.size()), errors(pairs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < pairs.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        found[i] = pairs[i].first->auto_sync_train_config_and_start_engine(pairs[i].second,
                                                                           force_restart, max_wait);
      } catch (const std::exception& e) {
        errors[i] = pairs[i].first->server_url() + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> failed;
  for (const auto& e : errors) {
    if (!e.empty()) failed.push_back(e);
  }
  if (!failed.empty()) {
    throw SwarmError(SwarmErrorKind::kCommand,
                     fmt::format("failed to start {} of {} engines: {}", failed.size(),
                                 pairs.size(), fmt::join(failed, "; ")));
  }
  return found;
}

namespace {

// What tells a batch boundary apart: the status, the step, the debug backbone's recorded batches.
struct Boundary {
  std::string status;
  int64_t global_step = 0;
  int64_t batches_recorded = 0;
  static Boundary of(const Json& pool) {
    return Boundary{pool.value("engine_status", std::string()),
                    pool.value("global_step", int64_t(0)),
                    pool.value("batches_recorded", int64_t(0))};
  }
  bool passed_since(const Boundary& before) const {
    if (status.empty()) return false;  // unreachable: nothing seen
    return status == kRollingPost || status == kWeightSyncing || status == kWeightExporting ||
           global_step != before.global_step || batches_recorded != before.batches_recorded;
  }
};

}  // namespace

bool SwarmClient::agree_sync_weight(bool retry, std::optional<double> max_wait, bool wait) {
  const Deadline deadline = deadline_after(max_wait);
  const Boundary before = Boundary::of(wait ? get_rollout_stat() : Json::object());
  while (true) {
    std::string reason;
    try {
      Json body = {{"client_uuid", client_uuid_}};
      Json data =
          json_or_throw(send("POST", "/agree_sync_weight", &body, false), "agree_sync_weight");
      if (data.value("success", false)) {
        while (wait && !Boundary::of(get_rollout_stat()).passed_since(before)) {
          sleep_within(options_.retry.status_poll, deadline,
                       "the batch boundary after agree_sync_weight");
        }
        return true;
      }
      reason = data.value("failure_reason", "");
    } catch (const SwarmError& e) {
      if (e.kind() != SwarmErrorKind::kConnection) throw;
      reason = e.what();
    }
    note("agree_sync_weight refused: " + reason);
    if (!retry) return false;
    sleep_within(options_.retry.agree_sync_weight, deadline, "agree_sync_weight");
  }
}

Json SwarmClient::get_verbose_logs() {
  return json_or_throw(send("GET", "/get_verbose_logs", nullptr, false), "get_verbose_logs")
      .value("entries", Json::array());
}

Json SwarmClient::get_episode(const std::string& episode_uuid) {
  return json_or_throw(send("GET", "/episodes/" + episode_uuid, nullptr, true), "get_episode");
}

std::string SwarmClient::get_server_experiment_dir() {
  const Json data = json_or_throw(send("GET", "/get_server_experiment_dir", nullptr, false),
                                  "get_server_experiment_dir");
  const Json dir = data.value("server_experiment_dir", Json(nullptr));
  return dir.is_string() ? dir.get<std::string>() : std::string();
}

Json SwarmClient::log_metrics(int64_t step, const Json& metrics) {
  Json body = {{"step", step}, {"metrics", metrics}};
  return json_or_throw(send("POST", "/log_metrics", &body, true), "log_metrics");
}

Json SwarmClient::list_adapters() {
  return json_or_throw(send("GET", "/adapters", nullptr, true), "list_adapters");
}

Json SwarmClient::create_adapter(const Json& body) {
  // Making one builds a model object beside the served one: seconds on a large model.
  return json_or_throw(send("POST", "/adapters", &body, true, std::chrono::minutes(10)),
                       "create_adapter");
}

Json SwarmClient::save_adapter(const Json& body) {
  return json_or_throw(send("POST", "/adapters/save", &body, true, std::chrono::minutes(10)),
                       "save_adapter");
}

Json SwarmClient::get_metrics_history(const std::vector<std::string>& names, int64_t after_step) {
  std::string path = "/metrics_history";
  if (!names.empty()) {
    std::string joined;
    for (const std::string& n : names) {
      if (!joined.empty()) joined += ',';
      for (unsigned char ch : n) {  // names are [A-Za-z0-9_./@:-]; anything else is sent escaped
        if (std::isalnum(ch) ||
            std::string_view("_./@:-").find(char(ch)) != std::string_view::npos) {
          joined += char(ch);
        } else {
          joined += fmt::format("%{:02X}", unsigned(ch));
        }
      }
    }
    path += "?name=" + joined + "&after_step=" + std::to_string(after_step);
  }
  return json_or_throw(send("GET", path, nullptr, true), "metrics_history");
}

Json SwarmClient::ledger_draw(int64_t step, const Json& draws) {
  Json body = {{"step", step}, {"draws", draws}};
  return json_or_throw(send("POST", "/ledger/draw", &body, true), "ledger_draw");
}

Json SwarmClient::get_ledger(bool rows) {
  return json_or_throw(send("GET", rows ? "/ledger?rows=1" : "/ledger", nullptr, true), "ledger");
}

}  // namespace ajet::client
