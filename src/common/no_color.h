// NO_COLOR (https://no-color.org): when it is set to anything but "", no output gets colour codes,
// terminal or not. Every place that colours output asks here (the log sink, `ajet episode show`,
// `ajet-swarm overwatch`).
#pragma once

#include <cstdlib>

namespace ajet {

inline bool no_color_requested() {
  const char* value = std::getenv("NO_COLOR");
  return value != nullptr && value[0] != '\0';
}

}  // namespace ajet
