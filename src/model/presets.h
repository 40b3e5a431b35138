// Named model architectures for `model init`: micro (unit tests), tiny (trains in minutes on 2
// cores), small (a realistic CPU test), and qwen2.5-0.5b (the published Qwen2.5-0.5B(-Instruct)
// shape, to run real model sizes with random weights). Pure configuration: no libtorch, no weights.
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
  // The published vocabulary size of a preset copied from a released model (embedding rows, padded
  // past the tokenizer's ids as the release is); 0: the tokenizer's size.
  int64_t vocab_size = 0;
};

std::vector<PresetInfo> presets();

// The preset's config.json for a tokenizer with `vocab_size` ids. Unknown names throw
// Error(kInvalidArgument) listing the known ones. A preset with a published vocabulary size keeps
// it and throws when the tokenizer has more ids than that. Token ids (bos/eos) are left for the
// caller.
hf::ModelConfig preset_config(std::string_view name, int64_t vocab_size);

// Number of weights a model with this config has (tied embeddings counted once), as
// Qwen2ModelImpl::parameter_count() would report it.
int64_t count_parameters(const hf::ModelConfig& config);

}  // namespace ajet::model
