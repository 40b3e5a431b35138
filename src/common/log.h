// Logging through spdlog. Libraries log through ajet::log(); binaries choose the sink and level.
#pragma once

#include <spdlog/spdlog.h>

namespace ajet {

// The process-wide logger (stderr by default).
spdlog::logger& log();

// Sets the level from a name ("trace", "debug", "info", "warn", "error", "off"); unknown names
// throw.
void set_log_level(const std::string& name);

}  // namespace ajet
