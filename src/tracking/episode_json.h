// The episode as JSON for people and the token-level viewer: its calls, its merged samples (token
// ids, text pieces, loss mask, behaviour logprobs, policy versions, reward, weight) and the merge
// diagnostics. Served at GET /episodes/{episode_uuid} and printed by `ajet episode show`. The shape
// is documented in docs/tracking.md; change both together. Never fails on odd text: invalid UTF-8
// in a piece becomes U+FFFD.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "common/json.h"
#include "store/records.h"
#include "text/tokenizer.h"
#include "tracking/call_record.h"
#include "tracking/merge.h"

namespace ajet::tracking {

inline constexpr int kEpisodeJsonVersion = 1;

struct EpisodeView {
  std::string episode_uuid;
  std::string task_id;
  std::string status;        // claimed | finished | aborted | ... ("" when unknown)
  std::string episode_type;  // train | eval
  std::optional<double> reward;
  // Set when the store's retention deleted the episode's calls (Store::get_dropped_calls): the
  // document says so instead of showing an episode without calls.
  std::optional<store::DroppedCalls> dropped_calls;

  static EpisodeView from_row(const store::EpisodeRow& row);
};

// `tokenizer` may be null: then no text pieces ("text_pieces" absent, "tokenizer": false).
Json episode_json(const EpisodeView& episode, std::span<const CallRecord> calls,
                  const MergedEpisode& merged, const text::Tokenizer* tokenizer);

// Text of each token, such that the pieces concatenate to the decoded text: a character split
// across tokens is attributed to the token that completes it (earlier ones get "").
std::vector<std::string> text_pieces(const text::Tokenizer& tokenizer,
                                     std::span<const TokenId> ids);

Json diagnostics_json(const MergeDiagnostics& diagnostics);

}  // namespace ajet::tracking
