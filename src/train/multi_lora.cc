#include "train/multi_lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.h"
#include "train/lora.h"

namespace ajet::train {

void LoraRouting::set(const std::vector<int32_t>& slots) {
  rows_ = int64_t(slots.size());
  groups_.clear();
  uniform_ = true;
  uniform_slot_ = slots.empty() ? -1 : slots[0];
  for (int32_t s : slots) uniform_ = uniform_ && s == uniform_slot_;
  if (uniform_) return;
  std::vector<std::vector<int64_t>> by_slot;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int32_t s = slots[i];
    if (s < 0) continue;
    if (size_t(s) >= by_slot.size()) by_slot.resize(size_t(s) + 1);
    by_slot[size_t(s)].push_back(int64_t(i));
  }
  for (size_t s = 0; s < by_slot.size(); ++s) {
    if (by_slot[s].empty()) continue;
    groups_.push_back(Group{int32_t(s), torch::tensor(by_slot[s], torch::kInt64)});
  }
}

void LoraRouting::set_all(int32_t slot) {
  uniform_ = true;
  uniform_slot_ = slot;
  rows_ = -1;
  groups_.clear();
}

MultiLoraAdapter::MultiLoraAdapter(int64_t in_features, int64_t out_features,
                                   std::shared_ptr<const LoraRouting> routing)
    : in_(in_features), out_(out_features), routing_(std::move(routing)) {}

int32_t MultiLoraAdapter::add(torch::Tensor lora_A, torch::Tensor lora_B, double scale) {
  if (lora_A.dim() != 2 || lora_B.dim() != 2 || lora_A.size(1) != in_ || lora_B.size(0) != out_ ||
      lora_A.size(0) != lora_B.size(1)) {
    invalid_argument("MultiLoraAdapter::add: A must be (r, " + std::to_string(in_) + ") and B (" +
                     std::to_string(out_) + ", r)");
  }
  torch::NoGradGuard no_grad;
  slots_.push_back(Slot{lora_A.t().contiguous(), (lora_B.t() * scale).contiguous()});
  return int32_t(slots_.size()) - 1;
}

torch::Tensor MultiLoraAdapter::delta(const torch::Tensor& x) {
  const LoraRouting& r = *routing_;
  auto slot = [&](int32_t s) -> const Slot& {
    if (s < 0 || s >= int32_t(slots_.size()))
      invalid_argument("MultiLoraAdapter: no adapter in slot " + std::to_string(s));
    return slots_[size_t(s)];
  };
  if (r.uniform()) {
    if (r.uniform_slot() < 0) return torch::zeros({}, x.options());  // broadcasts onto the base
    const Slot& s = slot(r.uniform_slot());
    return torch::matmul(torch::matmul(x, s.a_t), s.b_t);
  }
  const torch::Tensor flat = x.reshape({-1, in_});
  if (flat.size(0) != r.rows()) {
    invalid_argument("MultiLoraAdapter: the routing has " + std::to_string(r.rows()) +
                     " rows, the input " + std::to_string(flat.size(0)));
  }
  torch::Tensor out = torch::zeros({flat.size(0), out_}, x.options());
  for (const LoraRouting::Group& g : r.groups()) {
    const Slot& s = slot(g.slot);
    const torch::Tensor rows = flat.index_select(0, g.rows);
    out.index_add_(0, g.rows, torch::matmul(torch::matmul(rows, s.a_t), s.b_t));
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out_;
  return out.reshape(shape);
}

void attach_multi_lora(model::Qwen2Model& model, const std::vector<std::string>& targets,
                       std::shared_ptr<const LoraRouting> routing) {
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    for (size_t p = 0; p < model::kProjNames.size(); ++p) {
      if (model->layer(l)->adapter(model::Proj(p)))
        invalid_argument("attach_multi_lora: the model already has adapters");
    }
  }
  const std::vector<model::Proj> procs = resolve_lora_targets(targets);
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    model::DecoderLayer& layer = model->layer(l);
    for (model::Proj p : procs) {
      auto& w = layer->linear(p)->weight;
      layer->attach_adapter(p, std::make_shared<MultiLoraAdapter>(w.size(1), w.size(0), routing));
    }
  }
}

int32_t add_random_adapter(model::Qwen2Model& model, const train_data::LoraOptions& options,
                           uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  int32_t slot = -1;
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    model::DecoderLayer& layer = model->layer(l);
    for (size_t p = 0; p < model::kProjNames.size(); ++p) {
      auto* multi = dynamic_cast<MultiLoraAdapter*>(layer->adapter(model::Proj(p)).get());
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
