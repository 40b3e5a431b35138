#include "train/multi_lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"
#include "train/lora.h"

namespace ajet::train {

std::shared_ptr<LoraRouting> attach_multi_lora(model::Qwen2Model& model,
                                               const std::vector<std::string>& targets) {
  return model::attach_multi_lora(model, resolve_lora_targets(targets));
}

int32_t add_random_adapter(model::Qwen2Model& model, const train_data::LoraOptions& options,
                           uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  int32_t slot = -1;
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    model::DecoderLayer& layer = model->layer(l);
    for (size_t p = 0; p < model::kProjNames.size(); ++p) {
      auto* multi = model::multi_lora_at(model, l, model::Proj(p));
      if (!multi) continue;
      const auto& w = layer->linear(model::Proj(p))->weight;
      const auto opts = torch::TensorOptions().dtype(w.dtype());
      torch::Tensor a = at::randn({options.rank, w.size(1)}, gen, opts) * 0.05;
      torch::Tensor b = at::randn({w.size(0), options.rank}, gen, opts) * 0.05;
      slot = multi->add(a.to(w.device()), b.to(w.device()), options.scale());
    }
  }
  if (slot < 0) invalid_argument("add_random_adapter: the model has no multi-adapter projections");
  return slot;
}

}  // namespace ajet::train
