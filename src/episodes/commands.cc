#include "episodes/commands.h"

#include "common/strings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "http/response.h"

namespace ajet::episodes {

// The HTTP layer's mapping, except that another client's episode is 404, as upstream answers (the
// layer says 403): one table, one exception.
int http_status_for(ErrorCode code) {
  return code == ErrorCode::kPermissionDenied ? 404 : http::status_for(code);
}

namespace {

// `value` of field `key`, refused when longer than `limit` bytes.
std::string bounded(std::string value, std::string_view key, std::string_view where,
                    size_t limit = kMaxIdBytes) {
  if (value.size() > limit) {
    invalid_argument(std::string(where) + ": field '" + std::string(key) + "' is " +
                     std::to_string(value.size()) + " bytes long; at most " +
                     std::to_string(limit) + " are accepted");
  }
  return value;
}

std::optional<std::string> bounded(std::optional<std::string> value, std::string_view key,
                                   std::string_view where, size_t limit = kMaxIdBytes) {
  if (value) bounded(*value, key, where, limit);
  return value;
}

std::string required_id(const Json& body, std::string_view key, std::string_view where) {
  std::string value = bounded(get_string(body, key, where), key, where);
  if (value.empty())
    invalid_argument(std::string(where) + ": field '" + std::string(key) + "' must not be empty");
  return value;
}

const Json* optional_object(const Json& obj, std::string_view key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  if (!it->is_object()) {
    invalid_argument(std::string(where) + ": field '" + std::string(key) +
                     "' must be an object, got " + std::string(json_type_name(*it)));
  }
  return &*it;
}

std::string size_text(size_t bytes) {
  if (bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes % (1u << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

// An object the server keeps until the episode's batch trains: refused above `limit` serialized.
void check_kept_size(const Json& value, std::string_view field, std::string_view where,
                     size_t limit) {
  const size_t bytes = value.dump().size();
  if (bytes > limit) {
    fail(ErrorCode::kResourceExhausted,
         fmt::format("{}: field '{}' is {} bytes serialized; at most {} are accepted (it is kept "
                     "until the batch "
                     "trains; ajet-swarm start --max-episode-metadata-mb sets the limit)",
                     where, field, bytes, size_text(limit)));
  }
}

}  // namespace

std::string normalized_coordinator_url(std::string_view url, std::string_view where) {
  auto refuse = [&](const std::string& why) {
    std::string shown(url.substr(0, 200));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        c = '?';  // never echo CR/LF into a message
    }
    invalid_argument(fmt::format("{} must be http://host:port, got '{}': {}", where, shown, why));
  };
  if (url.size() > 512) refuse("longer than 512 bytes");
  for (char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) refuse("it holds a space or a control character");
  }
  std::string lower(url);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower.rfind("https://", 0) == 0)
    refuse("https is not supported: this front dials coordinators over plain HTTP");
  if (lower.rfind("http://", 0) != 0) refuse("the scheme must be http://");
  std::string_view authority = std::string_view(lower).substr(7);
  if (!authority.empty() && authority.back() == '/') authority.remove_suffix(1);
  if (authority.find_first_of("/?#") != std::string_view::npos)
    refuse("no path, query or fragment is allowed");
  if (authority.find('@') != std::string_view::npos) refuse("no user information is allowed");
  std::string_view host, port;
  if (!authority.empty() && authority.front() == '[') {  // [::1]:10086
    const size_t close = authority.find(']');
    if (close == std::string_view::npos || close + 1 >= authority.size() ||
        authority[close + 1] != ':') {
      refuse("an IPv6 host is written [addr]:port");
    }
    host = authority.substr(0, close + 1);
    port = authority.substr(close + 2);
    for (char c : host.substr(1, host.size() - 2)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.')
        refuse("bad IPv6 address");
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == std::string_view::npos) refuse("a port is required");
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    for (char c : host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') {
        refuse("the host may hold letters, digits, '.' and '-' only");
      }
    }
  }
  if (host.empty() || host == "[]") refuse("the host is empty");
  if (port.empty() || port.size() > 5) refuse("the port must be a number in 1..65535");
  int number = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c)))
      refuse("the port must be a number in 1..65535");
    number = number * 10 + (c - '0');
  }
  if (number < 1 || number > 65535) refuse("the port must be a number in 1..65535");
  return "http://" + std::string(host) + ":" + std::to_string(number);
}

Json ThrottlePolicy::to_json() const {
  return Json{
      {"ratio", ratio},
      {"expected_batch_size", expected_batch_size ? Json(*expected_batch_size) : Json(nullptr)},
      {"expected_num_repeat", expected_num_repeat ? Json(*expected_num_repeat) : Json(nullptr)},
      {"current_task_id", current_task_id}};
}

ClaimRequest ClaimRequest::from_json(const Json& body) {
  constexpr std::string_view where = "claim_episode body";
  ClaimRequest req;
  req.client_uuid = required_id(body, "client_uuid", where);
  req.episode_type = get_optional_string(body, "episode_type", where).value_or("train");
  req.discard_episode_timeout =
      get_optional_number(body, "discard_episode_timeout", where).value_or(240.0);
  if (!(req.discard_episode_timeout > 0) || !std::isfinite(req.discard_episode_timeout)) {
    invalid_argument(
        "claim_episode body: field 'discard_episode_timeout' must be a positive number of seconds");
  }
  if (const Json* tp = optional_object(body, "throttle_policy", where)) {
    constexpr std::string_view tp_where = "claim_episode body: throttle_policy";
    ThrottlePolicy policy;
    policy.ratio = get_optional_number(*tp, "ratio", tp_where).value_or(1.5);
    policy.expected_batch_size = get_optional_int(*tp, "expected_batch_size", tp_where);
    policy.expected_num_repeat = get_optional_int(*tp, "expected_num_repeat", tp_where);
    policy.current_task_id = bounded(get_optional_string(*tp, "current_task_id", tp_where),
                                     "current_task_id", tp_where, kMaxTaskIdBytes)
                                 .value_or("");
    req.throttle_policy = policy;
  }
  req.adapter = get_optional_string(body, "adapter", where).value_or("");
  if (!req.adapter.empty()) {
    if (std::string why = adapter_name_problem(req.adapter); !why.empty())
      invalid_argument("claim_episode body: field 'adapter' " + why);
  }
  return req;
}

Json ClaimResponse::to_json() const {
  return Json{{"success", success},
              {"client_uuid", client_uuid},
              {"episode_uuid", episode_uuid},
              {"openai_base_url", openai_base_url},
              {"openai_api_key", openai_api_key},
              {"fail_cause", fail_cause},
              {"global_step", global_step}};
}

EndRequest EndRequest::from_json(const Json& body, std::string_view command,
                                 size_t max_field_bytes) {
  const std::string where_text = std::string(command) + " body";
  const std::string_view where = where_text;
  const std::string out_text = where_text + ": workflow_output";
  const std::string_view out_where = out_text;
  auto fail_field = [&](const std::string& rest) { invalid_argument(where_text + ": " + rest); };
  EndRequest req;
  req.client_uuid = required_id(body, "client_uuid", where);
  req.episode_uuid = required_id(body, "episode_uuid", where);
  req.declare_client_active =
      get_optional_bool(body, "declare_client_active", where).value_or(true);
  const Json* out = optional_object(body, "workflow_output", where);
  if (out == nullptr) fail_field("missing required field 'workflow_output'");
  auto reward = out->find("reward");
  if (reward == out->end() || reward->is_null())
    fail_field("workflow_output.reward is required (a number)");
  if (reward->is_array()) {
    fail_field(
        "workflow_output.reward must be one number; step rewards (a list) are not supported");
  }
  req.workflow_output.reward = get_number(*out, "reward", out_where);
  if (!std::isfinite(req.workflow_output.reward))
    fail_field("workflow_output.reward must be finite");
  req.workflow_output.is_success = get_optional_bool(*out, "is_success", out_where);
  if (const Json* m = optional_object(*out, "metadata", out_where))
    req.workflow_output.metadata = *m;
  if (req.workflow_output.metadata.contains("ajet_group")) {
    // The server records an episode group's membership there; a client's own would read as one
    // after a restart (resolve_episode_group answers from the store).
    fail_field(
        "workflow_output.metadata.ajet_group is reserved for the server's episode-group record");
  }
  if (const Json* lm = optional_object(*out, "log_metrics", out_where))
    req.workflow_output.log_metrics = *lm;
  check_kept_size(req.workflow_output.metadata, "workflow_output.metadata", where, max_field_bytes);
  check_kept_size(req.workflow_output.log_metrics, "workflow_output.log_metrics", where,
                  max_field_bytes);

  auto body_task =
      bounded(get_optional_string(body, "task_id", where), "task_id", where, kMaxTaskIdBytes);
  auto meta_task =
      bounded(get_optional_string(req.workflow_output.metadata, "task_id", out_text + ".metadata"),
              "task_id", out_text + ".metadata", kMaxTaskIdBytes);
  if (body_task && meta_task && *body_task != *meta_task) {
    fail_field("task_id '" + *body_task + "' does not match workflow_output.metadata.task_id '" +
               *meta_task + "'");
  }
  if (!body_task && !meta_task)
    fail_field("task_id is required (it names the task, i.e. the GRPO group)");
  req.task_id = body_task ? *body_task : *meta_task;
  req.workflow_output.metadata["task_id"] = req.task_id;
  return req;
}

AbortRequest AbortRequest::from_json(const Json& body) {
  constexpr std::string_view where = "abort_episode body";
  AbortRequest req;
  req.client_uuid =
      bounded(get_optional_string(body, "client_uuid", where), "client_uuid", where).value_or("");
  req.episode_uuid = required_id(body, "episode_uuid", where);
  req.declare_client_active =
      get_optional_bool(body, "declare_client_active", where).value_or(true);
  if (auto cause = get_optional_string(body, "cause", where)) {
    const bool valid = !cause->empty() && cause->size() <= kMaxAbortCauseBytes &&
                       std::all_of(cause->begin(), cause->end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                       });
    if (!valid) {
      invalid_argument(std::string(where) +
                       ": cause must match [a-z0-9_]{1,48} (e.g. \"verifier_timeout\"), got '" +
                       cause->substr(0, 64) + "'");
    }
    req.cause = *cause;
  }
  return req;
}

EpisodeRef EpisodeRef::from_json(const Json& body, std::string_view command, bool client_required) {
  const std::string where = std::string(command) + " body";
  std::string client = client_required ? required_id(body, "client_uuid", where)
                                       : bounded(get_optional_string(body, "client_uuid", where),
                                                 "client_uuid", where)
                                             .value_or("");
  return EpisodeRef{std::move(client), required_id(body, "episode_uuid", where)};
}

Json EpisodeGroup::to_json() const {
  Json out{{"group_id", group_id},
           {"coordinator_url", coordinator_url},
           {"coordinator_episode_uuid", coordinator_episode_uuid},
           {"prepare_timeout", prepare_timeout}};
  if (!coordinator_episode_key.empty()) out["coordinator_episode_key"] = coordinator_episode_key;
  return out;
}

EpisodeGroup EpisodeGroup::from_json(const Json& obj, std::string_view where, bool key_required) {
  EpisodeGroup g;
  g.group_id = required_id(obj, "group_id", where);  // at most kMaxIdBytes
  g.coordinator_url = get_optional_string(obj, "coordinator_url", where).value_or("");
  g.coordinator_episode_uuid = bounded(get_optional_string(obj, "coordinator_episode_uuid", where),
                                       "coordinator_episode_uuid", where)
                                   .value_or("");
  g.coordinator_episode_key = bounded(get_optional_string(obj, "coordinator_episode_key", where),
                                      "coordinator_episode_key", where, 8192)
                                  .value_or("");
  if (!g.coordinator_url.empty()) {
    g.coordinator_url = normalized_coordinator_url(
        g.coordinator_url, std::string(where) + ": field 'coordinator_url'");
    if (g.coordinator_episode_uuid.empty()) {
      invalid_argument(
          std::string(where) +
          ": field 'coordinator_episode_uuid' is required with coordinator_url (a participant)");
    }
    if (key_required && g.coordinator_episode_key.empty()) {
      invalid_argument(
          std::string(where) +
          ": field 'coordinator_episode_key' is required with coordinator_url (a participant): the "
          "openai_api_key the coordinator's claim_episode answered for coordinator_episode_uuid; "
          "this "
          "server sends it when it asks the coordinator for the group's decision");
    }
  }
  g.prepare_timeout = get_optional_number(obj, "prepare_timeout", where).value_or(60.0);
  if (!(g.prepare_timeout > 0) || !(g.prepare_timeout <= kMaxPrepareTimeout)) {
    invalid_argument(std::string(where) +
                     ": field 'prepare_timeout' must be a number of seconds in (0, " +
                     std::to_string(int64_t(kMaxPrepareTimeout)) + "]");
  }
  return g;
}

PrepareRequest PrepareRequest::from_json(const Json& body, size_t max_field_bytes) {
  constexpr std::string_view where = "prepare_end_episode body";
  PrepareRequest req;
  req.end = EndRequest::from_json(body, "prepare_end_episode", max_field_bytes);
  const Json* group = optional_object(body, "group", where);
  if (group == nullptr)
    invalid_argument("prepare_end_episode body: missing required field 'group'");
  req.group =
      EpisodeGroup::from_json(*group, "prepare_end_episode body: group", /*key_required=*/true);
  return req;
}

Json PrepareResponse::to_json() const {
  return Json{{"success", true},
              {"episode_uuid", episode_uuid},
              {"global_step_at_claim", global_step_at_claim},
              {"global_step", global_step},
              {"weights_changed", weights_changed()},
              {"oldest_policy_version",
               oldest_policy_version ? Json(*oldest_policy_version) : Json(nullptr)}};
}

ResolveRequest ResolveRequest::from_json(const Json& body) {
  constexpr std::string_view where = "resolve_episode_group body";
  return ResolveRequest{required_id(body, "group_id", where),
                        required_id(body, "episode_uuid", where)};
}

AgreeRequest AgreeRequest::from_json(const Json& body) {
  return AgreeRequest{required_id(body, "client_uuid", "agree_sync_weight body")};
}

}  // namespace ajet::episodes
