// Several LoRA adapters on one base model at once (issue 43's serving path): every targeted
// projection holds a MultiLoraAdapter with one (A, B, scale) per adapter slot, ranks free per slot,
// and a LoraRouting shared by the whole model says which adapter each row (token) of the next
// forward uses. The base GEMM runs once for all rows; each adapter's low-rank update runs on its
// own rows only (gathered, then added back in place), the CPU form of Punica's and S-LoRA's
// segmented kernels. A batch whose rows all use one adapter skips the gather. Inference only: no
// dropout, no autograd bookkeeping beyond what the tensors carry.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/qwen2.h"
#include "train_data/options.h"

namespace ajet::train {

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

 private:
  bool uniform_ = true;
  int32_t uniform_slot_ = -1;
  int64_t rows_ = -1;  // -1 with set_all: any
  std::vector<Group> groups_;
};

class MultiLoraAdapter : public model::LinearAdapter {
 public:
  MultiLoraAdapter(int64_t in_features, int64_t out_features,
                   std::shared_ptr<const LoraRouting> routing);
  // Adds an adapter: A (r, in), B (out, r), the update scale * B A. Returns its slot.
  int32_t add(torch::Tensor lora_A, torch::Tensor lora_B, double scale);
  int32_t size() const { return int32_t(slots_.size()); }
  // (..., in) -> (..., out): row i gets scale_s B_s A_s x_i for its slot s, zero for -1.
  torch::Tensor delta(const torch::Tensor& x) override;

 private:
  struct Slot {
    torch::Tensor a_t;  // (in, r): A transposed, contiguous
    torch::Tensor b_t;  // (r, out): B transposed and scaled
  };
  int64_t in_, out_;
  std::shared_ptr<const LoraRouting> routing_;
  std::vector<Slot> slots_;
};

// Attaches a MultiLoraAdapter on every projection `targets` names ("all-linear": all seven) of
// every layer, all reading `routing`. Throws when the model already has adapters.
void attach_multi_lora(model::Qwen2Model& model, const std::vector<std::string>& targets,
                       std::shared_ptr<const LoraRouting> routing);
// Adds one adapter to every MultiLoraAdapter of the model: A and B drawn from `seed` (both
// non-zero, so the adapter changes outputs; tests and benchmarks), rank and scale from `options`.
// Returns its slot.
int32_t add_random_adapter(model::Qwen2Model& model, const train_data::LoraOptions& options,
                           uint64_t seed);

}  // namespace ajet::train
