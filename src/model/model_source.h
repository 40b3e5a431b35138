// What a directory given as "the model" holds, and the one log line that says so: a Hugging Face
// model directory (plain, or a LoRA run's merged export), a trainer checkpoint (its model/), a PEFT
// adapter over its base, or an old LoRA checkpoint whose model/ is the untrained base beside its
// adapter/. It never guesses silently: every loader logs `description`, and a directory that is
// none of these is an error naming what was expected. No libtorch here: model_dir.h loads what this
// names.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace ajet::model {

// Written by a LoRA export beside the merged weights (src/train/lora.h's save_merged_model): its
// base, r, lora_alpha and target_modules. Its presence is what makes a directory a "merged model".
inline constexpr const char* kMergedLoraFile = "ajet_merged_lora.json";

struct ModelSource {
  std::filesystem::path weights;  // HF directory whose config.json and safetensors are read
  std::optional<std::filesystem::path>
      adapter;                          // PEFT adapter merged into those weights after loading
  std::filesystem::path tokenizer_dir;  // where tokenizer.json (and the chat template) are
  // "merged model DIR (base B + LoRA r=R, alpha A, merged)", "base model DIR + adapter DIR ...",
  // "model DIR".
  std::string description;
};

// Resolves `dir`:
//   * a trainer checkpoint (trainer_state.json + model/)       -> its model/, resolved as below
//   * config.json + kMergedLoraFile                             -> the merged model
//   * config.json as model/ of a LoRA checkpoint without it     -> that base + the checkpoint's
//   adapter/
//     (checkpoints written before model/ held the merged model)
//   * config.json                                               -> the model
//   * adapter_config.json (a PEFT adapter)                      -> its base_model_name_or_path +
//   the adapter
// Throws Error(kNotFound) naming the directory and what it lacks.
ModelSource resolve_model_source(const std::filesystem::path& dir);

}  // namespace ajet::model
