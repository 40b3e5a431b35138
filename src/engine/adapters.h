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
// Memory: with a budget (ajet.engine.adapter_memory_mb), the least recently used adapters that no
// request holds are moved out to disk — weights, optimizer moments, counters — once the resident
// ones would exceed it, and come back when a request, a train step or a save needs them; a request
// for an adapter that is out waits for it instead of failing.
// No libtorch in this header.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "engine/runtime.h"
#include "engine/service.h"
#include "engine/train_methods.h"

namespace ajet::train_data {
struct Batch;
}

namespace ajet::engine {

class AdapterSet {
 public:
  // At most this many adapters in their slots at once (slots of the multi-adapter projections),
  // and at most kMaxAdapters known, in their slots or moved out.
  static constexpr int kMaxResident = 256;
  static constexpr int kMaxAdapters = 4096;

  AdapterSet(infer::InferenceEngine& engine, ModelInfo model, TrainingOptions options);
  ~AdapterSet();
  AdapterSet(const AdapterSet&) = delete;
  AdapterSet& operator=(const AdapterSet&) = delete;

  // Thread-safe, never blocks on a load. Calls ready(lease) with the slot and identity a generate
  // request for `name` runs on, pinned there until the lease's pin is dropped: at once when the
  // adapter is in its slot, else from the loader thread once it is back (failed(error) if that
  // fails). Throws Error(kNotFound) naming the adapters served for an unknown name.
  void acquire(const std::string& name, std::function<void(AdapterLease)> ready,
               std::function<void(const Error&)> failed);
  // Thread-safe. Whether any adapter is served.
  bool empty() const;
  // The memory budget in bytes (0: none); a smaller one moves adapters out at once.
  void set_memory_budget(int64_t bytes);
  // Thread-safe. {"adapters": [{name, rank, alpha, dropout, target_modules, slot, seed, source,
  // resident, trained_steps, global_step, requests, bytes, optimizer_bytes, resident_bytes,
  // evictions, loads}] in name order, "adapter_memory": {budget_bytes, resident_bytes, evictions,
  // loads}}.
  Json list() const;

  // The rest run on one thread at a time (the service's control thread).
  // {name, rank?, alpha?, dropout?, target_modules?, seed?} makes a fresh adapter (PEFT's
  // initialisation: B = 0, so it starts as the base); {name, path} loads a PEFT directory
  // (adapter_config.json + adapter_model.safetensors) instead, and its trainer state too when the
  // directory holds one (an adapter checkpoint: optimizer.safetensors + trainer_state.json), so
  // training goes on where it stopped. Answers the adapter's list entry.
  Json create(const Json& body);
  // {name, dir, merged?}: writes the adapter in PEFT layout to dir (with "merged": true, the base
  // with the adapter merged in, HF layout). Answers {"name", "path"}.
  Json save(const Json& body);
  // {name}: once the requests running on it have ended (new ones wait), the adapter's slot and
  // trainer are freed. Answers {"name", "removed": true}.
  Json remove(const Json& body);
  // {name}: moves the adapter out to disk now, as the memory budget would (it comes back when a
  // request, a train step or a save needs it). Refused (failed_precondition) while requests hold
  // it. Answers its list entry.
  Json evict(const Json& body);
  // Trains every adapter named in `adapter_of_sample` (one name per sample of `batch`) on its own
  // samples with its own trainer, then serves the new adapters (one engine pause for all, the
  // policy version +1). Adapters without samples are untouched. Answers the summed and
  // sample-weighted metrics, with each adapter's own under "adapters".
  Json train_step(const train_data::Batch& batch,
                  const std::vector<std::string>& adapter_of_sample);
  // save_checkpoint on an engine with adapters: every adapter in PEFT layout, with its trainer
  // state once it trained, under base_dir/adapters_step_<policy version>/<name>/. Answers
  // {"path": "" (no trainer checkpoint to resume the engine from), "adapters_path", "adapters",
  // "policy_version"}.
  Json save_checkpoint(const std::filesystem::path& base_dir);

 private:
  struct Adapter;
  struct Impl;
  // Builds the adapter's model (sharing the base), attaches its LoRA (loading `path` when set,
  // with its trainer state when `path` holds one) and serves it in its slot.
  void build(const std::shared_ptr<Adapter>& a, const std::optional<std::filesystem::path>& path);
  // The adapter's own model: one that shares the served base's weights, with its LoRA attached.
  void build_model(const std::shared_ptr<Adapter>& a);
  // Brings a moved-out adapter back into a slot, first moving out others (least recently used,
  // none that `keep` names or a request holds) while the budget would be exceeded.
  void make_resident(const std::shared_ptr<Adapter>& a, const std::vector<std::string>& keep);
  // Moves out the least recently used adapters no request holds and `keep` does not name, until
  // the resident ones plus `need` bytes fit the budget (or nothing more can go).
  void fit(int64_t need, const std::vector<std::string>& keep);
  // A free slot for `a` (moving out the least recently used adapter when all are taken).
  void reserve_slot(const std::shared_ptr<Adapter>& a, const std::vector<std::string>& keep);
  void move_out(const std::shared_ptr<Adapter>& a);
  void loader_loop();
  std::unique_ptr<Impl> impl_;
};

}  // namespace ajet::engine
