#include "episodes/commands.h"

#include <cmath>

#include "http/response.h"

namespace ajet::swarm {

// The HTTP layer's mapping, except that another client's episode is 404, as upstream answers (the
// layer says 403): one table, one exception.
int http_status_for(ErrorCode code) {
  return code == ErrorCode::kPermissionDenied ? 404 : http::status_for(code);
}

namespace {

// `value` of field `key`, refused when longer than `limit` bytes.
std::string bounded(std::string value, std::string_view key, std::string_view where, size_t limit = kMaxIdBytes) {
  if (value.size() > limit) {
    invalid_argument(std::string(where) + ": field '" + std::string(key) + "' is " + std::to_string(value.size()) +
                     " bytes long; at most " + std::to_string(limit) + " are accepted");
  }
  return value;
}

std::optional<std::string> bounded(std::optional<std::string> value, std::string_view key, std::string_view where,
                                   size_t limit = kMaxIdBytes) {
  if (value) bounded(*value, key, where, limit);
  return value;
}

std::string required_id(const Json& body, std::string_view key, std::string_view where) {
  std::string value = bounded(get_string(body, key, where), key, where);
  if (value.empty()) invalid_argument(std::string(where) + ": field '" + std::string(key) + "' must not be empty");
  return value;
}

const Json* optional_object(const Json& obj, std::string_view key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  if (!it->is_object()) {
    invalid_argument(std::string(where) + ": field '" + std::string(key) + "' must be an object, got " +
                     std::string(json_type_name(*it)));
  }
  return &*it;
}

}  // namespace

Json ThrottlePolicy::to_json() const {
  return Json{{"ratio", ratio},
              {"expected_batch_size", expected_batch_size ? Json(*expected_batch_size) : Json(nullptr)},
              {"expected_num_repeat", expected_num_repeat ? Json(*expected_num_repeat) : Json(nullptr)},
              {"current_task_id", current_task_id}};
}

ClaimRequest ClaimRequest::from_json(const Json& body) {
  constexpr std::string_view where = "claim_episode body";
  ClaimRequest req;
  req.client_uuid = required_id(body, "client_uuid", where);
  req.episode_type = get_optional_string(body, "episode_type", where).value_or("train");
  req.discard_episode_timeout = get_optional_number(body, "discard_episode_timeout", where).value_or(240.0);
  if (!(req.discard_episode_timeout > 0) || !std::isfinite(req.discard_episode_timeout)) {
    invalid_argument("claim_episode body: field 'discard_episode_timeout' must be a positive number of seconds");
  }
  if (const Json* tp = optional_object(body, "throttle_policy", where)) {
    constexpr std::string_view tp_where = "claim_episode body: throttle_policy";
    ThrottlePolicy policy;
    policy.ratio = get_optional_number(*tp, "ratio", tp_where).value_or(1.5);
    policy.expected_batch_size = get_optional_int(*tp, "expected_batch_size", tp_where);
    policy.expected_num_repeat = get_optional_int(*tp, "expected_num_repeat", tp_where);
    policy.current_task_id =
        bounded(get_optional_string(*tp, "current_task_id", tp_where), "current_task_id", tp_where, kMaxTaskIdBytes)
            .value_or("");
    req.throttle_policy = policy;
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

EndRequest EndRequest::from_json(const Json& body, std::string_view command) {
  const std::string where_text = std::string(command) + " body";
  const std::string_view where = where_text;
  const std::string out_text = where_text + ": workflow_output";
  const std::string_view out_where = out_text;
  auto fail_field = [&](const std::string& rest) { invalid_argument(where_text + ": " + rest); };
  EndRequest req;
  req.client_uuid = required_id(body, "client_uuid", where);
  req.episode_uuid = required_id(body, "episode_uuid", where);
  req.declare_client_active = get_optional_bool(body, "declare_client_active", where).value_or(true);
  const Json* out = optional_object(body, "workflow_output", where);
  if (out == nullptr) fail_field("missing required field 'workflow_output'");
  auto reward = out->find("reward");
  if (reward == out->end() || reward->is_null()) fail_field("workflow_output.reward is required (a number)");
  if (reward->is_array()) {
    fail_field("workflow_output.reward must be one number; step rewards (a list) are not supported");
  }
  req.workflow_output.reward = get_number(*out, "reward", out_where);
  if (!std::isfinite(req.workflow_output.reward)) fail_field("workflow_output.reward must be finite");
  req.workflow_output.is_success = get_optional_bool(*out, "is_success", out_where);
  if (const Json* m = optional_object(*out, "metadata", out_where)) req.workflow_output.metadata = *m;
  if (req.workflow_output.metadata.contains("ajet_group")) {
    // The server records an episode group's membership there; a client's own would read as one after a
    // restart (resolve_episode_group answers from the store).
    fail_field("workflow_output.metadata.ajet_group is reserved for the server's episode-group record");
  }
  if (const Json* lm = optional_object(*out, "log_metrics", out_where)) req.workflow_output.log_metrics = *lm;

  auto body_task = bounded(get_optional_string(body, "task_id", where), "task_id", where, kMaxTaskIdBytes);
  auto meta_task = bounded(get_optional_string(req.workflow_output.metadata, "task_id", out_text + ".metadata"),
                           "task_id", out_text + ".metadata", kMaxTaskIdBytes);
  if (body_task && meta_task && *body_task != *meta_task) {
    fail_field("task_id '" + *body_task + "' does not match workflow_output.metadata.task_id '" + *meta_task + "'");
  }
  if (!body_task && !meta_task) fail_field("task_id is required (it names the task, i.e. the GRPO group)");
  req.task_id = body_task ? *body_task : *meta_task;
  req.workflow_output.metadata["task_id"] = req.task_id;
  return req;
}

AbortRequest AbortRequest::from_json(const Json& body) {
  constexpr std::string_view where = "abort_episode body";
  AbortRequest req;
  req.client_uuid = bounded(get_optional_string(body, "client_uuid", where), "client_uuid", where).value_or("");
  req.episode_uuid = required_id(body, "episode_uuid", where);
  req.declare_client_active = get_optional_bool(body, "declare_client_active", where).value_or(true);
  return req;
}

EpisodeRef EpisodeRef::from_json(const Json& body, std::string_view command, bool client_required) {
  const std::string where = std::string(command) + " body";
  std::string client = client_required ? required_id(body, "client_uuid", where)
                                       : bounded(get_optional_string(body, "client_uuid", where), "client_uuid", where)
                                             .value_or("");
  return EpisodeRef{std::move(client), required_id(body, "episode_uuid", where)};
}

Json EpisodeGroup::to_json() const {
  return Json{{"group_id", group_id},
              {"coordinator_url", coordinator_url},
              {"coordinator_episode_uuid", coordinator_episode_uuid},
              {"prepare_timeout", prepare_timeout}};
}

EpisodeGroup EpisodeGroup::from_json(const Json& obj, std::string_view where) {
  EpisodeGroup g;
  g.group_id = required_id(obj, "group_id", where);  // at most kMaxIdBytes
  g.coordinator_url = get_optional_string(obj, "coordinator_url", where).value_or("");
  g.coordinator_episode_uuid =
      bounded(get_optional_string(obj, "coordinator_episode_uuid", where), "coordinator_episode_uuid", where)
          .value_or("");
  if (!g.coordinator_url.empty()) {
    if (g.coordinator_url.rfind("http://", 0) != 0 || g.coordinator_url.size() > 2048) {
      invalid_argument(std::string(where) + ": field 'coordinator_url' must be an http://host:port URL, got '" +
                       g.coordinator_url.substr(0, 200) + "'");
    }
    if (g.coordinator_episode_uuid.empty()) {
      invalid_argument(std::string(where) +
                       ": field 'coordinator_episode_uuid' is required with coordinator_url (a participant)");
    }
  }
  g.prepare_timeout = get_optional_number(obj, "prepare_timeout", where).value_or(60.0);
  if (!(g.prepare_timeout > 0) || !(g.prepare_timeout <= kMaxPrepareTimeout)) {
    invalid_argument(std::string(where) + ": field 'prepare_timeout' must be a number of seconds in (0, " +
                     std::to_string(int64_t(kMaxPrepareTimeout)) + "]");
  }
  return g;
}

PrepareRequest PrepareRequest::from_json(const Json& body) {
  constexpr std::string_view where = "prepare_end_episode body";
  PrepareRequest req;
  req.end = EndRequest::from_json(body, "prepare_end_episode");
  const Json* group = optional_object(body, "group", where);
  if (group == nullptr) invalid_argument("prepare_end_episode body: missing required field 'group'");
  req.group = EpisodeGroup::from_json(*group, "prepare_end_episode body: group");
  return req;
}

Json PrepareResponse::to_json() const {
  return Json{{"success", true},
              {"episode_uuid", episode_uuid},
              {"global_step_at_claim", global_step_at_claim},
              {"global_step", global_step},
              {"weights_changed", weights_changed()},
              {"oldest_policy_version", oldest_policy_version ? Json(*oldest_policy_version) : Json(nullptr)}};
}

ResolveRequest ResolveRequest::from_json(const Json& body) {
  constexpr std::string_view where = "resolve_episode_group body";
  return ResolveRequest{required_id(body, "group_id", where), required_id(body, "episode_uuid", where)};
}

AgreeRequest AgreeRequest::from_json(const Json& body) {
  return AgreeRequest{required_id(body, "client_uuid", "agree_sync_weight body")};
}

}  // namespace ajet::swarm
