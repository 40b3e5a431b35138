// Signed episode keys: api_key = "sk-ajet-" + base64(JSON{agent_name, target_tag, episode_uuid,
// episode_address, sig}), where sig = hex HMAC-SHA256(secret, "ajet-episode-key-v1\n" + the JSON of
// every other field, keys sorted). Wire-compatible with upstream's unsigned key (same prefix, same
// fields), but a key whose signature does not verify is rejected, so keys cannot be forged or
// edited. Thread-safe (immutable after construction). Never log a secret.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ajet::episodes {

inline constexpr std::string_view kKeyPrefix = "sk-ajet-";
inline constexpr std::string_view kDefaultAgentName = "default_agent_name";
inline constexpr std::string_view kDefaultTargetTag = "default_target_tag";

struct EpisodeKeyClaims {
  std::string agent_name = std::string(kDefaultAgentName);
  std::string target_tag = std::string(kDefaultTargetTag);
  std::string episode_uuid;
  std::string episode_address;  // upstream's routing address; kept for compatibility, unused here
  // The LoRA adapter the episode's calls use unless their "model" names one (claim_episode's
  // "adapter"); signed with the rest. Empty: none (and absent from the key).
  std::string adapter;
};

class EpisodeKeySigner {
 public:
  // `secret`: at least 16 bytes (Store::load_or_create_secret gives 64 hex characters).
  explicit EpisodeKeySigner(std::string secret);

  std::string make_key(const EpisodeKeyClaims& claims) const;

  // Accepts the key alone or an Authorization header value ("Bearer sk-ajet-…" / "bearer …").
  // Throws Error(kUnauthenticated) with a message saying what is wrong (missing, not an AgentJet
  // key, not base64, not JSON, missing field, bad signature) — never echoing the secret.
  EpisodeKeyClaims verify(std::string_view authorization_or_key) const;

 private:
  std::string secret_;
};

// The episode commands (end_episode, abort_episode, prepare_end_episode, commit_episode,
// resolve_episode_group) are bound to their episode: the caller sends the episode's key, the
// openai_api_key its claim answered (docs/protocol.md "Command API"). Checks `authorization` (the
// Authorization header, if any) against `episode_uuid`, the body's episode; throws
// Error(kUnauthenticated) naming what to send when the key is missing (unless `keyless_allowed`,
// the compatibility switch --allow-keyless-episode-commands), invalid, or another episode's. The
// admin token is the caller's to check before (it passes every episode).
void check_episode_command_key(const EpisodeKeySigner& signer,
                               std::optional<std::string_view> authorization,
                               std::string_view episode_uuid, std::string_view command,
                               bool keyless_allowed);

// Which request `model` names an agent (ajet.context_tracker.model_agents, trainable_agents).
struct AgentNames {
  std::map<std::string, std::string, std::less<>> by_model;  // model -> agent (model_agents)
  std::set<std::string, std::less<>> known;  // trainable_agents and the agents of by_model
};

// The agent a call belongs to: the X-Agent-Name header; else the agent `names.by_model` gives the
// request's `model`; else the `model` itself when it is a known agent name; else the key's
// agent_name. Any other `model` (a CLI's "claude-opus-…", a served model's name, a placeholder)
// names no agent, so a client's side calls on other model names stay in the episode's agent. Throws
// Error(kInvalidArgument) for a name longer than 128 bytes or with control characters.
std::string resolve_agent_name(const EpisodeKeyClaims& claims,
                               std::optional<std::string_view> header,
                               std::optional<std::string_view> model, const AgentNames& names = {});

}  // namespace ajet::episodes
