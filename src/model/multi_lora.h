// Several LoRA adapters on one base model at once (docs/training.md, "Several adapters on one
// base"): every projection holds a MultiLoraAdapter with one (A, B, scale) per adapter slot, ranks
// and targets free per slot, and the model's LoraRouting says which slot each row (token) of the
// next forward uses. The base GEMM runs once for all rows; each adapter's low-rank update runs on
// its own rows only (gathered, then added back in place), the CPU form of Punica's and S-LoRA's
// segmented kernels. A batch whose rows all use one slot skips the gather. Inference only: the
// adapters train as train::LoraAdapter on a model sharing the base (engine/adapters.h) and are
// copied into their slots.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/qwen2.h"

namespace ajet::model {

// Which adapter each row of the next forward uses, rows flattened over every dimension but the
// last (a (B, T, C) input has B*T rows, batch-major). Set it before the forward; every projection
// of the model reads the same one.
class LoraRouting {
 public:
  // slots[i]: row i's adapter slot, or -1 for the base alone.
  void set(const std::vector<int32_t>& slots);
  // Every row on one slot (-1: the base alone), whatever the batch's size.
  void set_all(int32_t slot);

  struct Group {
    int32_t slot;
    torch::Tensor rows;  // int64 row indices
  };
  bool uniform() const { return uniform_; }
  int32_t uniform_slot() const { return uniform_slot_; }
  const std::vector<Group>& groups() const { return groups_; }
  int64_t rows() const { return rows_; }
  // (rows,) int32: each row's slot (set() only).
  const torch::Tensor& row_slots() const { return row_slots_; }
  // The slots with rows, ascending (set() only).
  const std::vector<int32_t>& slots() const { return slots_; }

 private:
  bool uniform_ = true;
  int32_t uniform_slot_ = -1;
  int64_t rows_ = -1;  // -1 with set_all: any
  std::vector<Group> groups_;
  torch::Tensor row_slots_;
  std::vector<int32_t> slots_;
};

class MultiLoraAdapter : public LinearAdapter {
 public:
  MultiLoraAdapter(int64_t in_features, int64_t out_features,
                   std::shared_ptr<const LoraRouting> routing);
  // Appends an adapter: A (r, in), B (out, r), the update scale * B A. Returns its slot.
  int32_t add(torch::Tensor lora_A, torch::Tensor lora_B, double scale);
  // Puts an adapter in `slot` (growing the table), replacing what was there; undefined A and B
  // leave the slot empty on this projection (an adapter that does not target it).
  void set(int32_t slot, const torch::Tensor& lora_A, const torch::Tensor& lora_B, double scale);
  void clear(int32_t slot);  // empties the slot (its memory is freed)
  int32_t size() const { return int32_t(slots_.size()); }
  // Bytes of the slot's copies (0 when empty).
  int64_t slot_bytes(int32_t slot) const;
  // (..., in) -> (..., out): row i gets scale_s B_s A_s x_i for its slot s, zero for -1 and for an
  // empty slot. A mixed batch whose adapters have at most masked_max_rank ranks in all runs three
  // GEMMs and a mask whatever the number of adapters: every row through every present adapter's A
  // at once (x [A_1 .. A_k]), the columns of other adapters zeroed, then [B_1; ..; B_k] (S-LoRA's
  // batching, without a custom kernel). Otherwise each adapter's rows are gathered and scattered
  // back (one GEMM pair per adapter).
  torch::Tensor delta(const torch::Tensor& x) override;
  static inline int64_t masked_max_rank = 128;  // tests set 0 to run the gathering path

 private:
  // The present slots' A and B side by side, for the masked path (cached for one set of slots).
  struct Stacked {
    std::vector<int32_t> slots;
    torch::Tensor a_t;      // (in, R): the slots' A transposed, side by side
    torch::Tensor b_t;      // (R, out): their scaled B transposed, stacked
    torch::Tensor columns;  // (R,) int32: the slot of each column
  };
  const Stacked& stacked(const std::vector<int32_t>& slots);
  Stacked stacked_;
  struct Slot {
    torch::Tensor a_t;  // (in, r): A transposed, contiguous; undefined: empty
    torch::Tensor b_t;  // (r, out): B transposed and scaled
  };
  Slot make_slot(const torch::Tensor& lora_A, const torch::Tensor& lora_B, double scale) const;
  int64_t in_, out_;
  std::shared_ptr<const LoraRouting> routing_;
  std::vector<Slot> slots_;
};

// Attaches a MultiLoraAdapter on each of `projections` of every layer, all reading one new routing,
// which the model keeps (Qwen2ModelImpl::lora_routing()) and which is returned. Throws when the
// model already has adapters.
std::shared_ptr<LoraRouting> attach_multi_lora(Qwen2Model& model,
                                               const std::vector<Proj>& projections);
// Layer l's adapter on projection p as a MultiLoraAdapter, or null.
MultiLoraAdapter* multi_lora_at(Qwen2Model& model, int64_t layer, Proj p);

// A model whose every HF parameter shares the storage of `source`'s (nothing copied; writes to
// one are writes to the other), with its own modules, so adapters can be attached to it alone.
// Weight packing is off on it (its packed copies would duplicate the base). Building it allocates
// one set of weights for a moment (the modules' own, then released).
Qwen2Model share_base_weights(Qwen2Model& source);

}  // namespace ajet::model
