// Fuzz target: arbitrary bytes as a HF config.json. Rejection must be an ajet::Error; every
// accepted config must convert back to JSON and parse to the same ModelConfig.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "hf/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ajet::hf;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ModelConfig config;
  try {
    config = parse_model_config_text(text, "fuzz input");
  } catch (const ajet::Error&) {
    return 0;
  }
  std::string written = model_config_to_json(config).dump();
  ModelConfig reread = parse_model_config_text(written, "round trip");
  if (!(reread == config)) std::abort();
  return 0;
}
