// Listing episodes over the store a page at a time (GET /episodes, `ajet episode list`): the
// filters, the opaque keyset cursor, one summary row per episode and the bounded count. Never loads
// every episode: a page reads `limit` rows along the claimed_at index, and the count stops at
// 10,000. The query itself is Store::list_episodes (store_list.cc); this file is the plain data,
// the parameters as HTTP and the CLI spell them, and the page as JSON (shape in docs/protocol.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ajet::store {

inline constexpr int kEpisodePageDefaultLimit = 50;
inline constexpr int kEpisodePageMaxLimit = 500;
// The count is exact up to here; above it the page says "10,000+" (total_is_lower_bound).
inline constexpr int64_t kEpisodeCountBound = 10'000;

// Every filter set must hold; an unset one matches everything.
struct EpisodeFilter {
  std::optional<std::string> uuid;
  std::optional<int64_t> global_step;  // the global_step of the episode's batch
  std::optional<std::string> task_id;
  std::optional<std::string> client_uuid;
  std::optional<std::string> agent_name;  // made at least one LLM call as this agent
  std::optional<std::string>
      status;  // claimed | prepared | finished | aborted | reclaimed | dropped
  std::optional<std::string> episode_type;  // train | eval
  std::optional<double> reward_min;         // inclusive; an episode without a reward never matches
  std::optional<double> reward_max;         // inclusive
  std::optional<bool> is_success;
};

struct EpisodePageRequest {
  EpisodeFilter filter;
  int limit = kEpisodePageDefaultLimit;  // 1..kEpisodePageMaxLimit
  std::string cursor;  // "" = the newest episodes; else a next_cursor given out before
};

struct EpisodeSummary {
  std::string uuid;
  std::string task_id;
  std::string client_uuid;
  std::string episode_type;
  std::string status;
  std::optional<double> reward;
  std::optional<bool> is_success;
  double claimed_at = 0;  // unix seconds
  std::optional<double> ended_at;
  std::optional<int64_t> batch_id;
  std::optional<int64_t> global_step;  // null when the episode is in no batch
  int64_t llm_calls = 0;
  int64_t llm_calls_not_retained = 0;  // deleted by the store's retention (Store::retain_calls)
  std::vector<std::string> agents;     // distinct, in order of first call
  // Sums over the calls of prompt / completion lengths (a prompt repeats the history it continues).
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Newest first: claimed_at descending, then uuid descending among episodes claimed at the same
// time.
struct EpisodePage {
  std::vector<EpisodeSummary> episodes;
  std::optional<std::string> next_cursor;  // absent on the last page
  int64_t total = 0;  // episodes matching the filter (the cursor aside), at most the bound
  bool total_is_lower_bound = false;  // true: at least `total` (more than kEpisodeCountBound match)
};

// The query parameters of GET /episodes: limit, cursor, uuid, step, task, client, agent, status,
// type, reward_min, reward_max, success (true|false). An empty value is the same as leaving the
// parameter out (what an empty form field sends). Error(kInvalidArgument) naming the parameter for
// a bad value or an unknown parameter.
EpisodePageRequest episode_page_request_from_params(
    const std::map<std::string, std::string>& params);
// The parameter names episode_page_request_from_params accepts, in documentation order.
const std::vector<std::string>& episode_page_parameter_names();

// The cursor pointing after `last` (opaque to clients: hex of claimed_at's bits and the uuid), and
// back; decode fails with Error(kInvalidArgument) naming "cursor" for text it never gave out.
std::string encode_episode_cursor(double claimed_at, const std::string& uuid);
struct EpisodeCursor {
  double claimed_at = 0;
  std::string uuid;
};
EpisodeCursor decode_episode_cursor(const std::string& cursor);

// {"episodes": [...], "next_cursor": str|null, "total": int, "total_is_lower_bound": bool}.
Json episode_summary_json(const EpisodeSummary& summary);
Json episode_page_json(const EpisodePage& page);

}  // namespace ajet::store
