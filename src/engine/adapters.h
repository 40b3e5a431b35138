// Several LoRA adapters on the one base model an engine serves (docs/engine-rpc.md, "Adapters";
// docs/training.md, "Several adapters on one base"). Each adapter is a policy of its own: a name,
// its rank, alpha and target modules, and, once it trains, its own trainer (AdamW state, learning-
// rate schedule, step counters, GRPO groups over its own samples). Serving: the served model
// carries a multi-adapter projection on every linear layer (model/multi_lora.h) and each adapter
// has a slot there; a generate request names its adapter and decodes in the same batches as every
// other adapter's. Training: each adapter's trainer works on a model that shares the base weights
// (model::share_base_weights) with a train::LoraAdapter of its own, so training one adapter never
// touches the base or another adapter; after a step the trained adapters are copied into their
// slots between two engine steps, keeping the base's and the other adapters' cached prefixes.
// No libtorch in this header.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "engine/runtime.h"
#include "engine/train_methods.h"

namespace ajet::train_data {
struct Batch;
}

namespace ajet::engine {

class AdapterSet {
 public:
  // At most this many adapters at once (slots of the multi-adapter projections).
  static constexpr int kMaxAdapters = 256;

  AdapterSet(infer::InferenceEngine& engine, ModelInfo model, TrainingOptions options);
  ~AdapterSet();
  AdapterSet(const AdapterSet&) = delete;
  AdapterSet& operator=(const AdapterSet&) = delete;

  // Thread-safe. The slot and identity a generate request for `name` runs on; throws
  // Error(kNotFound) naming the adapters served.
  std::pair<int32_t, uint64_t> resolve(const std::string& name) const;
  // Thread-safe. Whether any adapter is served.
  bool empty() const;
  // Thread-safe. {"adapters": [{name, rank, alpha, dropout, target_modules, slot, seed, source,
  // trained_steps, global_step, requests, bytes, optimizer_bytes}]} in name order.
  Json list() const;

  // The rest run on one thread at a time (the service's control thread).
  // {name, rank?, alpha?, dropout?, target_modules?, seed?} makes a fresh adapter (PEFT's
  // initialisation: B = 0, so it starts as the base); {name, path} loads a PEFT directory
  // (adapter_config.json + adapter_model.safetensors) instead. Answers the adapter's list entry.
  Json create(const Json& body);
  // {name, dir, merged?}: writes the adapter in PEFT layout to dir (with "merged": true, the base
  // with the adapter merged in, HF layout). Answers {"name", "path"}.
  Json save(const Json& body);
  // {name}: once the requests running on it have ended (new ones wait), the adapter's slot and
  // trainer are freed. Answers {"name", "removed": true}.
  Json remove(const Json& body);
  // Trains every adapter named in `adapter_of_sample` (one name per sample of `batch`) on its own
  // samples with its own trainer, then serves the new adapters (one engine pause for all, the
  // policy version +1). Adapters without samples are untouched. Answers the summed and
  // sample-weighted metrics, with each adapter's own under "adapters".
  Json train_step(const train_data::Batch& batch,
                  const std::vector<std::string>& adapter_of_sample);
  // save_checkpoint on an engine with adapters: every adapter in PEFT layout under
  // base_dir/adapters_step_<policy version>/<name>/. Answers {"path": "" (no trainer checkpoint
  // to resume the engine from), "adapters_path", "adapters", "policy_version"}.
  Json save_checkpoint(const std::filesystem::path& base_dir);

 private:
  struct Adapter;
  struct Impl;
  // Builds the adapter's model (sharing the base), attaches its LoRA (loading `path` when set) and
  // serves it in its slot.
  void build(const std::shared_ptr<Adapter>& a, const std::optional<std::filesystem::path>& path);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::engine
