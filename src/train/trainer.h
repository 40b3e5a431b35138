// The learning core of the engine: a Trainer owns the optimizer state of one model and turns a
// batch of samples into optimizer steps (advantages -> old/reference logprobs -> mini-batches x PPO
// epochs of micro-batched, packed forward/backward passes -> AdamW). It can snapshot and restore
// its complete state (checkpoint.h). It never talks RPC, never swaps weights into an inference
// engine and never waits on other ranks by itself: a Collective given by the caller is its only
// link to other ranks.
//
// Loss normalisation. For a mini-batch with trained terms (s, p) (sample s, loss mask 1 at p):
//     L = scale * sum_(s,p) c_s * term(s, p),  c_s = w_s * agg_s
// w_s = the sample's weight when episode_weighting is on (1 / samples of its episode), else 1;
// agg_s = 1 / N (token-mean, N = trained terms in the mini-batch), 1 / (S n_s)
// (seq-mean-token-mean, n_s = trained terms of s, S = samples with n_s > 0), 1 / S
// (seq-mean-token-sum), 1 / norm_constant (seq-mean-token-sum-norm, Dr.GRPO). N and S are over the
// whole mini-batch on every rank (summed by the Collective), so micro-batching and data parallelism
// change nothing but float summation order.
//
// Old logprobs (recompute mode) are the current weights' logprobs before this step's first update.
// The first mini-batch of epoch 0 is trained on exactly those weights, so its own forward supplies
// them (detached; ratio = 1, the PPO gradient) and only the other mini-batches get a separate
// no-gradient pass first: with mini_batch_num = ppo_epochs = 1 a step costs one forward + backward,
// not two forwards + backward. With LoRA dropout every sample gets the separate eval-mode pass.
//
// Merging invariance (merging: docs/tracking.md; the tests: docs/training.md). Advantages are
// computed per episode, and with token-mean and episode_weighting off every generated token of an
// episode is one term with coefficient 1 / N, so the loss and its gradients are the same whether an
// episode's calls arrive merged into one sample or as one sample per call (each call's completion
// trained once, its prompt as context). With episode_weighting on, a merged linear episode (one
// sample, weight 1) also equals its one-sample-per-call form exactly when that form's samples carry
// weight 1 (the weight counts branches, not calls).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/qwen2.h"
#include "train/lora.h"
#include "train/loss.h"
#include "train_data/advantage.h"
#include "train_data/batch.h"
#include "train_data/options.h"

namespace ajet::train {

// Summed over ranks by the caller's transport (c10d all_reduce, an in-process barrier in tests).
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Every rank calls this with tensors of the same shapes in the same order; afterwards each holds
  // the element-wise sum over ranks.
  virtual void all_reduce_sum(std::vector<torch::Tensor>& tensors) = 0;
  // Every rank calls this with tensors of the same shapes, dtypes and order; afterwards each holds
  // rank `root`'s values. The default throws Error(kFailedPrecondition) (a transport without it).
  virtual void broadcast(std::vector<torch::Tensor>& tensors, int root);
};

class Trainer {
 public:
  // Takes the model (shared: the inference engine may hold the same one). With options.lora enabled
  // it attaches fresh adapters (unless the model already has some) and trains only them. With
  // use_kl and no LoRA it keeps a frozen copy of the current weights as the reference.
  Trainer(model::Qwen2Model model, train_data::TrainerOptions options);
  ~Trainer();

  // One batch: advantages, old (and reference) logprobs on the current weights, then
  // mini_batch_num x ppo_epochs optimizer steps. Increments policy_version by one.
  train_data::TrainMetrics train_step(const train_data::Batch& batch);

  // Called after each mini-batch's gradients are accumulated and before clipping; the Collective
  // (when set) is applied first. Gives the trainable parameters' gradients, in
  // trainable_parameters() order.
  using GradientHook = std::function<void(std::vector<torch::Tensor>& grads)>;
  void set_gradient_hook(GradientHook hook);
  void set_collective(std::shared_ptr<Collective> collective);
  // On: a train_step that throws (a collective failed: a data-parallel peer died) leaves the
  // weights, the optimizer, the counters and the RNG states as they were before it, from a copy
  // of the trainable parameters and the optimizer state taken at every step (3x the trainable
  // parameters' memory while the step runs). Elastic engine groups turn it on.
  void set_rollback_on_failure(bool on);

  model::Qwen2Model& model();
  const train_data::TrainerOptions& options() const;
  int64_t global_step() const;     // optimizer steps so far
  int64_t policy_version() const;  // train_step calls so far
  // Trainable parameters by name: HF names, or PEFT names with LoRA. Stable order.
  std::vector<std::pair<std::string, torch::Tensor>> trainable_parameters();

  // Complete state: step counters, optimizer moments and step counts, RNG states. Parameters are
  // the model's (saved by checkpoint.h in HF / PEFT layout).
  struct OptimizerEntry {
    std::string name;
    int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq;
  };
  struct State {
    int64_t global_step = 0;
    int64_t policy_version = 0;
    std::string shuffle_rng;  // std::mt19937_64 in its stream form
    torch::Tensor torch_rng;  // the dropout masks' generator state (LoRA's own; else the default
                              // CPU generator's)
    std::vector<OptimizerEntry> optimizer;
  };
  State state();
  void load_state(const State& state);

  // The frozen KL reference (null without use_kl or with LoRA, whose reference is the base model).
  std::optional<model::Qwen2Model> reference_model();

  // Logprobs of every trained position of each sample under the current weights (no gradient; each
  // sample's vector has its length, 0 where the loss mask is 0). Exposed for the engine and tests.
  std::vector<std::vector<float>> compute_logprobs(const train_data::Batch& batch);

 private:
  train_data::TrainMetrics train_step_unguarded(const train_data::Batch& batch);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Copies every parameter of `from` into `to` by module name (HF weights and LoRA adapters alike),
// e.g. to move trained weights into the model an inference engine serves. Both must have the same
// architecture and adapters; the first missing or mis-shaped parameter is named in an Error.
void copy_parameters(model::Qwen2Model& from, model::Qwen2Model& to);

// A 64-bit hash of every parameter's name, shape and bytes, in the module's order: data-parallel
// ranks that hold the same weights give the same value (bit for bit, not within a tolerance), so
// the front compares them after every step. Reads each parameter once (a copy to the CPU for one
// on a GPU): ~0.3 s per GB of weights.
uint64_t parameter_checksum(model::Qwen2Model& model);
// parameter_checksum of a model whose named_parameters are these (names and values, in order).
uint64_t named_tensors_checksum(const std::vector<std::pair<std::string, torch::Tensor>>& named);
// The same over a list of tensors (shapes and bytes, in order, no names).
uint64_t tensors_checksum(const std::vector<torch::Tensor>& tensors);

}  // namespace ajet::train
