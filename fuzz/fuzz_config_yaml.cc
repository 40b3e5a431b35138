// fuzz-smoke-runs: 500
// libFuzzer target: arbitrary bytes as a config synced with sync_train_config or given to `ajet`
// (config/load.h). Only ajet::Error may come out, naming the key or line; anchors and aliases must
// not expand past the limit, and whatever is accepted must dump to YAML that parses back. Inputs
// that expand aliases up to the 16 MiB limit are slow (~20 ms under ASan), hence fewer smoke runs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "config/load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<ajet::config::LoadedConfig> loaded;
  try {
    loaded = ajet::config::parse_config(text, "fuzz.yaml");
  } catch (const ajet::Error& e) {
    if (std::string_view(e.what()).empty()) std::abort();
    return 0;
  }
  const std::string dumped = ajet::config::to_yaml(loaded->config);
  ajet::config::parse_config(dumped,
                             "dumped.yaml");  // throws (and so fails) if the dump is not valid
  return 0;
}
