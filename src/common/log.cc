#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/error.h"
#include "common/no_color.h"

namespace ajet {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    // Levels in colour on a terminal, never under NO_COLOR (spdlog itself looks only at TERM).
    auto l = spdlog::stderr_color_mt(
        "ajet", no_color_requested() ? spdlog::color_mode::never : spdlog::color_mode::automatic);
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%n] %v");
    return l;
  }();
  return *logger;
}

void set_log_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") {
    invalid_argument("unknown log level '" + name +
                     "' (use trace, debug, info, warn, error or off)");
  }
  log().set_level(level);
}

}  // namespace ajet
