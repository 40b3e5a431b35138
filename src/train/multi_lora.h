// Helpers over model/multi_lora.h that speak the trainer's LoRA options: attaching by PEFT target
// names and adding random adapters (tests and benchmarks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/multi_lora.h"
#include "train_data/options.h"

namespace ajet::train {

using model::LoraRouting;
using model::MultiLoraAdapter;

// Attaches a MultiLoraAdapter on every projection `targets` names ("all-linear": all seven) of
// every layer; returns the model's routing. Throws when the model already has adapters.
std::shared_ptr<LoraRouting> attach_multi_lora(model::Qwen2Model& model,
                                               const std::vector<std::string>& targets);
// Adds one adapter to every MultiLoraAdapter of the model: A and B drawn from `seed` (both
// non-zero, so the adapter changes outputs; tests and benchmarks), rank and scale from `options`.
// Returns its slot.
int32_t add_random_adapter(model::Qwen2Model& model, const train_data::LoraOptions& options,
                           uint64_t seed);

}  // namespace ajet::train
