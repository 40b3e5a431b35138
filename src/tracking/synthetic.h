// Synthetic episodes for benchmarks and property tests: call records with made-up token ids (no
// tokenizer, no model), shaped like real agent traffic. Deterministic for a given seed. Used by
// bench/tracking/merge_tokens and tests/tracking; the trainer's benchmarks reuse it to build
// batches of the same shape. Never used by the server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tracking/call_record.h"

namespace ajet::tracking::synthetic {

// Ids: ordinary tokens are drawn from [kFirstToken, vocab_size); kEndOfTurn ends a completion that
// stopped normally; kTurnStart opens each message (so message boundaries are visible in ids).
inline constexpr TokenId kEndOfTurn = 2;
inline constexpr TokenId kTurnStart = 1;
inline constexpr TokenId kFirstToken = 16;

// A linear tool-using agent: call k's prompt is the system prompt, the task, and for every earlier
// turn j < k its completion followed by its observation; call k then generates one completion
// ending with kEndOfTurn. Each turn adds about generated + observation tokens (each drawn uniformly
// within
// +-25 % of the mean).
struct AgentShape {
  int turns = 5;
  int system_prompt_tokens = 256;
  int task_tokens = 32;
  int generated_tokens_per_turn = 40;
  int observation_tokens_per_turn = 24;
  int vocab_size = 32000;
};

// One episode (calls with consecutive call_index from 0, agent "agent", policy version 0,
// logprobs in (-3, 0)). `system_prompt` and `task` are shared by every episode of a GRPO group.
std::vector<CallRecord> linear_episode(const AgentShape& shape,
                                       const std::vector<TokenId>& system_prompt,
                                       const std::vector<TokenId>& task,
                                       const std::string& episode_uuid, uint64_t seed);

// A GRPO group: `group_size` episodes of one task (same system prompt and task tokens), each
// sampling its own completions and observations.
std::vector<std::vector<CallRecord>> grpo_group(const AgentShape& shape, int group_size,
                                                uint64_t seed);

// Random conversation trees for property tests: each call continues a random earlier call's stream
// (appending new environment messages), retries an earlier prompt, cuts an earlier stream back to a
// message boundary and continues differently (edited / summarised history), or starts afresh; its
// completion ends with kEndOfTurn (stop) or not (length). Agents are picked at random from
// `agents` names. A small vocabulary makes identical tokens at identical prefixes (merged
// generations) happen. Message spans and roles are set so diagnostics can name messages.
struct TreeShape {
  int calls = 12;
  std::vector<std::string> agents = {"agent"};
  int vocab_size = 40;      // ordinary tokens [kFirstToken, vocab_size)
  double p_continue = 0.6;  // else: retry 0.15, edit 0.15, fresh 0.1 (renormalised)
  double p_retry = 0.15;
  double p_edit = 0.15;
  int max_message_tokens = 6;
  int max_completion_tokens = 8;
};
std::vector<CallRecord> random_tree(const TreeShape& shape, const std::string& episode_uuid,
                                    uint64_t seed);

}  // namespace ajet::tracking::synthetic
