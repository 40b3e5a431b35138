// Named model architectures for `model init`: micro (unit tests), tiny (trains in minutes on 2 cores),
// small (a realistic CPU test). Pure configuration: no libtorch, no weights.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hf/hf_config.h"

namespace ajet::model {

struct PresetInfo {
  std::string name;
  std::string description;
};

std::vector<PresetInfo> presets();

// The preset's config.json for a tokenizer with `vocab_size` ids. Unknown names throw
// Error(kInvalidArgument) listing the known ones. Token ids (bos/eos) are left for the caller.
hf::ModelConfig preset_config(std::string_view name, int64_t vocab_size);

// Number of weights a model with this config has (tied embeddings counted once), as
// Qwen2ModelImpl::parameter_count() would report it.
int64_t count_parameters(const hf::ModelConfig& config);

}  // namespace ajet::model
