// What `ajet episode list` and `ajet episode show` print for people: an aligned table of an episode
// page, and one episode as readable text (its LLM calls as messages, its merged samples with tokens
// marked trained or masked). Both read the JSON the front serves (GET /episodes and
// GET /episodes/{uuid}; shapes in docs/protocol.md and docs/tracking.md), so --store and --url
// print the same. Text from the model or the agent never reaches the terminal raw: control
// characters (an ESC in a completion could repaint the screen) are shown escaped.
#pragma once

#include <string>

#include "common/json.h"

namespace ajet::cli {

struct TextStyle {
  // ANSI colours: trained tokens blue, masked tokens orange, dim for a generated token the policy
  // found unlikely (logprob below kLowLogprob). false: plain text with [trained]/[masked] markers.
  bool color = false;
};

// ln(0.3): a generated token sampled with probability under 30 % is shown dim.
inline constexpr double kLowLogprob = -1.2039728043259361;

// The page ({"episodes": [...], "next_cursor", "total", "total_is_lower_bound"}) as a table with a
// header line; `now` (unix s) gives each episode's age. full_uuids: whole uuids instead of 12
// chars.
std::string episode_table(const Json& page, double now, bool full_uuids);

// One episode document (docs/tracking.md); `summary` is its GET /episodes row (step, client,
// times) or null when unavailable.
std::string episode_text(const Json& document, const Json& summary, const TextStyle& style);

// `text` with control characters other than newline and tab written as \xNN.
std::string printable(const std::string& text);

}  // namespace ajet::cli
