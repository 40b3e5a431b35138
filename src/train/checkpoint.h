// Trainer checkpoints: everything needed to continue a run exactly. A checkpoint is a directory
// base/global_step_<policy version>/ holding
//   model/                  the trained model in HF layout with the tokenizer files, loadable
//   anywhere;
//                           with LoRA the merged model W + scale B A (and model::kMergedLoraFile)
//   adapter/                LoRA only: the adapters in PEFT layout (adapter_model.safetensors +
//   adapter_config.json) reference/              full fine-tuning with a KL term only: the frozen
//   reference weights optimizer.safetensors   AdamW moments per trainable parameter
//   ("<name>.exp_avg", "<name>.exp_avg_sq") trainer_state.json      step counters, RNG states,
//   optimizer step counts, the caller's JSON blob
// written into a temp directory and renamed into place, then base/latest is updated; only the
// newest keep_last checkpoints stay. It never writes half a checkpoint where a reader would find
// it. A LoRA checkpoint does not hold the frozen base: resuming uses the trainer's own base weights
// (from ajet.model.path), which must hash to the fingerprint trainer_state.json records.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "common/json.h"
#include "train/trainer.h"

namespace ajet::config {
struct Config;
}

namespace ajet::train {

struct CheckpointOptions {
  std::filesystem::path base_dir;                      // ajet.trainer_common.checkpoint_base_dir
  int64_t keep_last = 3;                               // newest checkpoints kept; <= 0 keeps all
  std::optional<std::filesystem::path> tokenizer_dir;  // tokenizer files copied into model/
  std::string base_model_name_or_path;  // for adapter_config.json and the merged model's provenance

  // ajet.trainer_common.checkpoint_base_dir, ajet.trainer_common.max_checkpoints_to_keep,
  // ajet.model.path.
  static CheckpointOptions from_config(const config::Config& config);
};

// Writes a checkpoint of `trainer` (named after its policy version) with `user` stored verbatim
// (e.g. the front's cursor). Returns its directory.
std::filesystem::path save_checkpoint(Trainer& trainer, const CheckpointOptions& options,
                                      const Json& user = Json::object());

struct LoadedCheckpoint {
  std::filesystem::path dir;
  int64_t global_step = 0;
  int64_t policy_version = 0;
  Json user;
  // What the weights came from, as logged: "model DIR/model", "base model (...) + adapter
  // DIR/adapter".
  std::string weights;
};

// Restores weights, adapters, reference, optimizer and RNG states into a trainer built with the
// same options (and model config). With LoRA the trainer's base stays (checked against the
// fingerprint; checkpoints from before merged export load their model/ as the base). Problems name
// the file and what is wrong; the trainer is only changed once everything has been read and
// checked. Logs what it loaded.
LoadedCheckpoint load_checkpoint(Trainer& trainer, const std::filesystem::path& dir);

// The trainer's state without its parameters — optimizer.safetensors (AdamW moments per trainable
// parameter) and trainer_state.json (step counters, RNG states, optimizer step counts, and the
// members of `extra`) — written into `dir` (a named adapter's checkpoint holds these beside its
// PEFT files).
void write_trainer_state(Trainer& trainer, const std::filesystem::path& dir,
                         const Json& extra = Json::object());
// Reads what write_trainer_state wrote (changing no trainer); `json`, when given, gets the whole
// trainer_state.json. Problems name the file and what is wrong.
Trainer::State read_trainer_state(const std::filesystem::path& dir, Json* json = nullptr);

// The checkpoint base/latest names, or the newest global_step_* directory; nullopt when none.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& base_dir);

// True when a checkpoint is due after reaching `policy_version` (save_freq > 0 and a multiple).
bool checkpoint_due(int64_t save_freq, int64_t policy_version);

}  // namespace ajet::train
