// What `ajet-swarm overwatch` shows, without the terminal: a snapshot of each watched server (pool
// info, engine status, recent verbose log lines, fetched over HTTP) and its rendering into styled
// text lines of a given width: one server in full, or several (multi-model training: one server per
// model) as one compact block each. The ncurses front end draws these lines; `--once` prints them.
// Never throws for an unreachable or misbehaving server: the snapshot says CANNOT_CONNECT.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "http/client.h"

namespace ajet::client {

struct OverwatchSnapshot {
  std::string url;
  double fetched_at = 0;        // unix seconds
  double refresh_interval = 2;  // seconds (shown in the header)
  bool connected = false;
  std::string error;             // why not connected
  Json status = Json::object();  // /get_engine_status
  Json pool = Json::object();    // /get_current_batch_rollout_pool_information
  Json logs = Json::array();     // /get_verbose_logs entries
  uint64_t requests = 0;         // fetches so far (all attempts)
  uint64_t errors = 0;           // failed fetches so far
};

// Fetches the three endpoints with `http` (its timeout bounds each); counts into `previous`'s
// counters.
OverwatchSnapshot fetch_overwatch(http::HttpClient& http, const std::string& url,
                                  double refresh_interval, uint64_t requests, uint64_t errors);

enum class LineStyle { kNormal, kTitle, kSection, kColumns, kGood, kWarn, kBad, kDim, kChosen };

struct StyledLine {
  std::string text;
  LineStyle style = LineStyle::kNormal;
};

struct OverwatchLayout {
  size_t width = 120;         // columns; lines are cut to it (UTF-8 safe)
  size_t max_episodes = 30;   // running-episode rows
  size_t max_tasks = 30;      // task rows
  size_t max_log_lines = 12;  // verbose log rows
  size_t max_clients = 8;     // client-share rows per server
};

// One server in full: header, engine, progress to the next weight update, the newest trained
// batch's metrics, each client's share of the current batch, running episodes, tasks, recent log
// lines.
std::vector<StyledLine> render_overwatch(const OverwatchSnapshot& snapshot,
                                         const OverwatchLayout& layout);
// Several servers (one per model): a title, then one block per server in order — engine, progress,
// newest trained batch, client shares, a one-line pool summary. One snapshot renders as above.
std::vector<StyledLine> render_overwatch(const std::vector<OverwatchSnapshot>& snapshots,
                                         const OverwatchLayout& layout);
// The plain-text form (`--once`): the rendered lines, each ended by '\n'.
std::string overwatch_text(const OverwatchSnapshot& snapshot, const OverwatchLayout& layout);
std::string overwatch_text(const std::vector<OverwatchSnapshot>& snapshots,
                           const OverwatchLayout& layout);

}  // namespace ajet::client
