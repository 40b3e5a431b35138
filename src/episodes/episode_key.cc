#include "episodes/episode_key.h"

#include <algorithm>

#include "common/encoding.h"
#include "common/error.h"
#include "common/json.h"

namespace ajet::episodes {

namespace {

constexpr std::string_view kDomain = "ajet-episode-key-v1\n";
constexpr size_t kMaxKeyBytes = 8192;

[[noreturn]] void reject(const std::string& why) {
  fail(ErrorCode::kUnauthenticated, "invalid episode key: " + why);
}

// nlohmann's default object is a std::map, so dump() is canonical (sorted keys, no spaces).
std::string signature(std::string_view secret, const Json& unsigned_fields) {
  return hex_encode(hmac_sha256(secret, std::string(kDomain) + unsigned_fields.dump()));
}

std::string_view strip_bearer(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  for (std::string_view prefix : {"Bearer ", "bearer ", "BEARER "}) {
    if (text.substr(0, prefix.size()) == prefix) {
      text.remove_prefix(prefix.size());
      break;
    }
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '\n'))
    text.remove_suffix(1);
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return text;
}

}  // namespace

EpisodeKeySigner::EpisodeKeySigner(std::string secret) : secret_(std::move(secret)) {
  if (secret_.size() < 16) invalid_argument("episode key secret must be at least 16 bytes");
}

std::string EpisodeKeySigner::make_key(const EpisodeKeyClaims& claims) const {
  Json fields = {{"agent_name", claims.agent_name},
                 {"target_tag", claims.target_tag},
                 {"episode_uuid", claims.episode_uuid},
                 {"episode_address", claims.episode_address}};
  if (!claims.adapter.empty()) fields["adapter"] = claims.adapter;
  fields["sig"] = signature(secret_, fields);
  return std::string(kKeyPrefix) + base64_encode(fields.dump());
}

EpisodeKeyClaims EpisodeKeySigner::verify(std::string_view authorization_or_key) const {
  std::string_view key = strip_bearer(authorization_or_key);
  if (key.empty())
    reject("no key given (send `Authorization: Bearer <openai_api_key from claim_episode>`)");
  if (key.size() > kMaxKeyBytes)
    reject("key is longer than " + std::to_string(kMaxKeyBytes) + " bytes");
  if (key.substr(0, kKeyPrefix.size()) != kKeyPrefix) {
    reject(
        "not an AgentJet episode key (it must start with 'sk-ajet-'; use the openai_api_key from "
        "claim_episode)");
  }
  auto decoded = base64_decode(key.substr(kKeyPrefix.size()));
  if (!decoded) reject("the part after 'sk-ajet-' is not base64");
  std::optional<Json> parsed = try_parse_json(*decoded);
  if (!parsed || !parsed->is_object()) reject("the decoded key is not a JSON object");
  Json& fields = *parsed;
  for (const char* name : {"agent_name", "target_tag", "episode_uuid"}) {
    auto it = fields.find(name);
    if (it == fields.end() || !it->is_string())
      reject(std::string("field '") + name + "' is missing");
  }
  auto sig = fields.find("sig");
  if (sig == fields.end() || !sig->is_string()) {
    reject(
        "it is not signed by this server (an unsigned upstream-style key, or from another server)");
  }
  std::string given = sig->get<std::string>();
  fields.erase("sig");
  if (!constant_time_equal(given, signature(secret_, fields))) {
    reject("signature does not match (the key was altered, or was issued by another server)");
  }
  EpisodeKeyClaims claims;
  claims.agent_name = fields["agent_name"].get<std::string>();
  claims.target_tag = fields["target_tag"].get<std::string>();
  claims.episode_uuid = fields["episode_uuid"].get<std::string>();
  if (auto addr = fields.find("episode_address"); addr != fields.end() && addr->is_string()) {
    claims.episode_address = addr->get<std::string>();
  }
  if (auto adapter = fields.find("adapter"); adapter != fields.end() && adapter->is_string()) {
    claims.adapter = adapter->get<std::string>();
  }
  return claims;
}

void check_episode_command_key(const EpisodeKeySigner& signer,
                               std::optional<std::string_view> authorization,
                               std::string_view episode_uuid, std::string_view command,
                               bool keyless_allowed) {
  if (!authorization || strip_bearer(*authorization).empty()) {
    if (keyless_allowed) return;
    fail(ErrorCode::kUnauthenticated,
         std::string(command) +
             " needs the episode's key: send `Authorization: Bearer <openai_api_key from "
             "claim_episode>` for episode " +
             std::string(episode_uuid.substr(0, 256)) +
             " (or the admin token). A front started with --allow-keyless-episode-commands accepts "
             "clients that "
             "send none.");
  }
  EpisodeKeyClaims claims;
  try {
    claims = signer.verify(*authorization);
  } catch (const Error& e) {
    fail(ErrorCode::kUnauthenticated,
         std::string(command) + ": " + e.what() +
             " (send the openai_api_key of the episode's claim, or the admin token)");
  }
  if (claims.episode_uuid != episode_uuid) {
    fail(ErrorCode::kUnauthenticated, std::string(command) + ": the key is episode " +
                                          claims.episode_uuid.substr(0, 256) + "'s, not episode " +
                                          std::string(episode_uuid.substr(0, 256)) +
                                          "'s: send the key its claim answered");
  }
}

std::string resolve_agent_name(const EpisodeKeyClaims& claims,
                               std::optional<std::string_view> header,
                               std::optional<std::string_view> model, const AgentNames& names) {
  auto check = [](std::string_view name, std::string_view source) {
    bool control = std::any_of(name.begin(), name.end(),
                               [](unsigned char c) { return c < 0x20 || c == 0x7f; });
    if (name.size() > 128 || control) {
      invalid_argument(std::string(source) +
                       ": agent name must be at most 128 bytes without control characters");
    }
    return std::string(name);
  };
  if (header && !header->empty()) return check(*header, "X-Agent-Name");
  if (model && !model->empty()) {
    if (auto it = names.by_model.find(*model); it != names.by_model.end()) {
      return check(it->second, "ajet.context_tracker.model_agents");
    }
    if (names.known.contains(*model)) return check(*model, "model");
  }
  return claims.agent_name;
}

}  // namespace ajet::episodes
