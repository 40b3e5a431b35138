// Read-only look at the front's SQLite store for what its HTTP API does not report yet: the trainer
// metrics of a trained batch (the `stats` the front stored with it: engine loss/KL/entropy, merge
// counts, rollout summary). Opens the file read-only (WAL allows a reader beside the writer) and
// never writes; any failure reads as "nothing there".
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "common/json.h"

namespace ajet::classic {

// The stats of the trained batch of `global_step` (the step that trained on it), or nullopt.
std::optional<Json> trained_batch_stats(const std::filesystem::path& store_file, int64_t global_step);

// The newest checkpoint directory the front recorded (its `latest_checkpoint` state), or nullopt.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& store_file);

}  // namespace ajet::classic
