// The classic run's reward_curve.html: the front's live dashboard (web/) as one self-contained
// file, with every series of the front's GET /metrics_history inlined.
#pragma once

#include <filesystem>
#include <string>

#include "client/swarm_client.h"
#include "common/json.h"

namespace ajet::classic {

// Every series the front holds, in the shape web::dashboard_snapshot_html takes, and the engine's
// latest checkpoint (GET /get_engine_status). Throws what the client throws when the front does not
// answer.
Json fetch_dashboard_snapshot(client::SwarmClient& client, const std::string& title);

// Writes the page atomically.
void write_dashboard_snapshot(const std::filesystem::path& path, const Json& snapshot);

}  // namespace ajet::classic
