// Timeline merging: the calls of one episode become the fewest exact training samples. Per agent,
// every call's stream (prompt ids, then completion ids) goes into a token trie; every root-to-leaf
// path is one sample. A linear multi-turn conversation (each prompt = previous prompt + completion
// + new messages, which token-in/token-out rendering guarantees) is one sample; retries, n > 1,
// sub-agents, edited or summarised history and template rewrites make branches, and the diagnostics
// say where and why each branch split. It never invents a token: every sample token is a token some
// call had at that position after that prefix.
//
// Loss mask rule. A node of the trie is *generated* when some call generated that token after that
// prefix (its origin: the first such call in call_index order, whose behaviour logprob and policy
// version the node keeps; identical tokens generated after an identical prefix by several calls,
// e.g. retries sampling the same first tokens, are one node: generated_count says how many).
// Everything else (prompt text, template tokens, an <|im_end|> the template supplies after a
// length-truncated completion) is environment. Each generated node is trained in exactly one
// sample: the first sample (depth-first order, earlier calls first) that contains it; in other
// samples that share it, it is context (loss_mask 0, logprob and policy version still given). So
// summing the loss over samples counts every generated token once, as one-sample-per-call training
// of distinct tokens would. Environment tokens after the last generated token of a path carry no
// loss and are left out (e.g. a call aborted before generating anything): every sample ends with a
// generated token, no sample is a prefix of another, and each sample trains at least its last
// token.
//
// Text level (timeline_compare_level: text), upstream's fallback for clients that re-render
// history: calls are compared message by message (role + trimmed content; tool definitions only
// when ignore_tools is false, tool calls never), in a trie of messages; where a later prompt
// repeats an earlier completion's text, the completion's exact ids (its generation prompt,
// generated ids, then the template footer) replace the re-rendered message, as upstream's toggle
// does. The merged streams then go through the token trie above. Needs MergeOptions::format.
//
// Samples of an episode share its reward; trainable samples carry weight 1 / (trainable samples in
// the episode), so an episode counts once however many branches it has; task_id is the GRPO group.
// Agents are merged separately (each its own trie); calls of agents not in trainable_agents become
// samples with trainable = false, weight 0 and an all-zero loss mask (shown, never trained).
// Cap (max_samples_per_episode > 0, from ajet.rollout.multi_turn.max_sample_per_task): when an
// episode has more trainable samples, those with the most generated tokens are kept (ties: earlier
// first; deterministic, unlike upstream's random subset), trained-token ownership is recomputed
// over the kept ones, and the tokens only dropped samples held are reported as untrained.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracking/call_record.h"
#include "tracking/chat_format.h"
#include "tracking/token_trie.h"

namespace ajet::config {
struct Config;
}

namespace ajet::tracking {

enum class CompareLevel { kToken, kText };

std::string_view compare_level_name(CompareLevel level);
// "token" | "text"; throws Error(kInvalidArgument) naming the value otherwise.
CompareLevel compare_level_from_name(std::string_view name);

struct MergeOptions {
  CompareLevel compare_level = CompareLevel::kToken;
  bool ignore_tools = true;                   // text level only
  std::vector<std::string> trainable_agents;  // empty: every agent is trainable
  int64_t max_samples_per_episode = 0;        // 0: no cap
  const ChatFormat* format = nullptr;         // required at text level (template footer ids)

  // ajet.context_tracker.timeline_merging_policy.{timeline_compare_level, ignore_tools},
  // ajet.context_tracker.trainable_agents, ajet.rollout.multi_turn.max_sample_per_task.
  static MergeOptions from_config(const config::Config& config, const ChatFormat* format);
  bool is_trainable(const std::string& agent_name) const;
};

struct EpisodeInfo {
  std::string episode_uuid;
  std::string task_id;  // the GRPO group
  double reward = 0;
};

struct Sample {
  std::string episode_uuid;
  std::string task_id;
  std::string agent_name;
  std::string
      adapter;        // the LoRA adapter its calls ran on ("" = the base model): it trains that one
  int32_t index = 0;  // in MergedEpisode::samples
  bool trainable = true;
  double reward = 0;
  double weight = 0;               // 1 / (trainable samples of the episode); 0 when not trainable
  std::vector<TokenId> token_ids;  // (L,)
  std::vector<uint8_t> loss_mask;  // (L,) 1 = trained in this sample
  std::vector<float> logprobs;     // (L,) behaviour logprob of generated tokens, 0 elsewhere
  std::vector<int32_t> policy_versions;  // (L,) of generated tokens, -1 elsewhere
  std::vector<int32_t>
      source_calls;  // (L,) call_index that generated the token, or first had it in its prompt
  std::vector<int64_t> calls;  // call_index of every call whose stream (up to its last
                               // generated token) is a prefix of this sample
  size_t trained_tokens() const;
};

// Why a sample is not part of an earlier one: where its path leaves the earlier sample's.
struct BranchDiagnostic {
  int32_t sample = -1;         // MergedEpisode::samples index
  int32_t from_sample = -1;    // the earlier sample it shares the longest prefix with
  int32_t position = 0;        // first token position where they differ
  int64_t call = -1;           // call_index that brought this sample's token at `position`
  int32_t message_index = -1;  // message of `call`'s request at `position`; -1 outside messages
  std::string part;  // "preamble" | "message" | "generation_prompt" | "completion" | "footer"
  std::string role;  // of that message, when known
  TokenId token = -1;
  int64_t other_call = -1;  // the same for the earlier sample's token at `position`
  int32_t other_message_index = -1;
  std::string other_part;
  std::string other_role;
  TokenId other_token = -1;
  // "retry" (same prompt, different completion), "edited_completion" (a later prompt changes an
  // earlier completion), "template_rewrote" (the template re-rendered an earlier completion
  // differently, e.g. dropped <think>: from the render notes, or, for calls read back from the
  // store, from the message repeating the completion's content and tool calls with other ids; the
  // paths may part inside the earlier call's generation prompt when it opened <think>),
  // "history_differs" (messages differ: sub-agent, summarised
  // or edited history), "different_start" (nothing shared).
  std::string kind;
  std::string reason;  // one sentence naming the calls and messages
};

struct AgentMergeDiagnostics {
  std::string agent_name;
  bool trainable = true;
  int64_t calls = 0;
  int64_t samples = 0;
  int64_t samples_dropped_by_cap = 0;
  int64_t tokens_before = 0;     // sum over calls of prompt + completion tokens
  int64_t tokens_after = 0;      // sum over samples of their tokens
  double compression_ratio = 0;  // tokens_before / tokens_after (0 when there are no samples)
  int64_t generated_tokens = 0;  // sum of completion lengths
  int64_t unique_generated_tokens = 0;     // generated trie nodes
  int64_t duplicate_generated_tokens = 0;  // generations merged into an existing generated node
  int64_t trained_tokens = 0;              // loss_mask ones over the agent's samples
  int64_t untrained_generated_tokens = 0;  // generated nodes in no kept sample (cap)
  std::vector<BranchDiagnostic> branches;
};

struct MergeDiagnostics {
  CompareLevel compare_level = CompareLevel::kToken;
  int64_t calls = 0;
  int64_t samples = 0;
  int64_t trainable_samples = 0;
  int64_t samples_dropped_by_cap = 0;
  int64_t tokens_before = 0;
  int64_t tokens_after = 0;
  double compression_ratio = 0;
  std::vector<AgentMergeDiagnostics> agents;  // in order of first call
};

struct MergedEpisode {
  std::vector<Sample> samples;  // agents in order of first call; per agent depth-first
  MergeDiagnostics diagnostics;
};

// `calls` may be in any order (merged in call_index order). Throws Error(kInvalidArgument) for
// inconsistent calls (validate_call) or text level without a format.
MergedEpisode merge_episode(const EpisodeInfo& episode, std::span<const CallRecord> calls,
                            const MergeOptions& options);

// ---- building blocks (merge.cc, merge_text.cc) ----

// One call's token stream as merging inserts it, with each token's origin and which part of the
// call's request it belongs to (for diagnostics).
struct StreamPart {
  int32_t begin = 0;  // position in the stream
  int32_t message_index = -1;
  enum class Kind {
    kPreamble,
    kMessage,
    kGenerationPrompt,
    kCompletion,
    kFooter
  } kind = Kind::kMessage;
};
std::string_view stream_part_name(StreamPart::Kind kind);

struct Stream {
  size_t call = 0;  // index into the calls given to merge_episode
  std::vector<TokenId> ids;
  std::vector<TokenOrigin> origins;  // origin.call indexes the same calls
  std::vector<StreamPart> parts;     // sorted by begin, tiling the stream
};

// Token level: prompt ids (environment) then completion ids (generated by the call).
Stream token_stream(const CallRecord& call, size_t call_pos);
// Text level: streams of `agent_calls` (positions into `calls`) rewritten as described above.
std::vector<Stream> text_streams(std::span<const CallRecord> calls,
                                 const std::vector<size_t>& agent_calls,
                                 const MergeOptions& options);

}  // namespace ajet::tracking
