#include "model/multi_lora.h"

#include <string>
#include <unordered_map>

#include "common/error.h"

namespace ajet::model {

void LoraRouting::set(const std::vector<int32_t>& slots) {
  rows_ = int64_t(slots.size());
  groups_.clear();
  slots_.clear();
  row_slots_ = torch::Tensor();
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
    slots_.push_back(int32_t(s));
  }
  row_slots_ = torch::tensor(slots, torch::kInt32);
}

void LoraRouting::set_all(int32_t slot) {
  uniform_ = true;
  uniform_slot_ = slot;
  rows_ = -1;
  groups_.clear();
  slots_.clear();
  row_slots_ = torch::Tensor();
}

MultiLoraAdapter::MultiLoraAdapter(int64_t in_features, int64_t out_features,
                                   std::shared_ptr<const LoraRouting> routing)
    : in_(in_features), out_(out_features), routing_(std::move(routing)) {}

MultiLoraAdapter::Slot MultiLoraAdapter::make_slot(const torch::Tensor& lora_A,
                                                   const torch::Tensor& lora_B,
                                                   double scale) const {
  if (!lora_A.defined() && !lora_B.defined()) return Slot{};
  if (!lora_A.defined() || !lora_B.defined() || lora_A.dim() != 2 || lora_B.dim() != 2 ||
      lora_A.size(1) != in_ || lora_B.size(0) != out_ || lora_A.size(0) != lora_B.size(1)) {
    invalid_argument("MultiLoraAdapter: A must be (r, " + std::to_string(in_) + ") and B (" +
                     std::to_string(out_) + ", r)");
  }
  torch::NoGradGuard no_grad;
  return Slot{lora_A.detach().t().contiguous(), (lora_B.detach().t() * scale).contiguous()};
}

int32_t MultiLoraAdapter::add(torch::Tensor lora_A, torch::Tensor lora_B, double scale) {
  slots_.push_back(make_slot(lora_A, lora_B, scale));
  return int32_t(slots_.size()) - 1;
}

void MultiLoraAdapter::set(int32_t slot, const torch::Tensor& lora_A, const torch::Tensor& lora_B,
                           double scale) {
  if (slot < 0) invalid_argument("MultiLoraAdapter::set: negative slot");
  Slot s = make_slot(lora_A, lora_B, scale);
  if (size_t(slot) >= slots_.size()) slots_.resize(size_t(slot) + 1);
  slots_[size_t(slot)] = std::move(s);
  stacked_ = Stacked{};
}

void MultiLoraAdapter::clear(int32_t slot) {
  if (slot >= 0 && size_t(slot) < slots_.size()) slots_[size_t(slot)] = Slot{};
  stacked_ = Stacked{};
}

const MultiLoraAdapter::Stacked& MultiLoraAdapter::stacked(const std::vector<int32_t>& slots) {
  if (stacked_.a_t.defined() && stacked_.slots == slots) return stacked_;
  Stacked s;
  s.slots = slots;
  std::vector<torch::Tensor> as, bs;
  std::vector<int32_t> columns;
  for (int32_t slot : slots) {
    const Slot& one = slots_[size_t(slot)];
    if (!one.a_t.defined()) continue;
    as.push_back(one.a_t);
    bs.push_back(one.b_t);
    columns.insert(columns.end(), size_t(one.a_t.size(1)), slot);
  }
  if (!as.empty()) {
    torch::NoGradGuard no_grad;
    s.a_t = torch::cat(as, 1).contiguous();
    s.b_t = torch::cat(bs, 0).contiguous();
    s.columns = torch::tensor(columns, torch::kInt32).to(s.a_t.device());
  }
  stacked_ = std::move(s);
  return stacked_;
}

int64_t MultiLoraAdapter::slot_bytes(int32_t slot) const {
  if (slot < 0 || size_t(slot) >= slots_.size() || !slots_[size_t(slot)].a_t.defined()) return 0;
  const Slot& s = slots_[size_t(slot)];
  return int64_t(s.a_t.nbytes() + s.b_t.nbytes());
}

torch::Tensor MultiLoraAdapter::delta(const torch::Tensor& x) {
  const LoraRouting& r = *routing_;
  // Null for an empty slot; throws for one that was never made.
  auto slot = [&](int32_t s) -> const Slot* {
    if (s < 0 || s >= int32_t(slots_.size()))
      invalid_argument("MultiLoraAdapter: no adapter in slot " + std::to_string(s));
    const Slot& found = slots_[size_t(s)];
    return found.a_t.defined() ? &found : nullptr;
  };
  if (r.uniform()) {
    const Slot* s = r.uniform_slot() < 0 ? nullptr : slot(r.uniform_slot());
    if (!s) return torch::zeros({}, x.options());  // broadcasts onto the base
    return torch::matmul(torch::matmul(x, s->a_t), s->b_t);
  }
  const torch::Tensor flat = x.reshape({-1, in_});
  if (flat.size(0) != r.rows()) {
    invalid_argument("MultiLoraAdapter: the routing has " + std::to_string(r.rows()) +
                     " rows, the input " + std::to_string(flat.size(0)));
  }
  for (int32_t s : r.slots()) slot(s);  // every slot exists
  int64_t ranks = 0;
  for (int32_t s : r.slots()) {
    if (const Slot* one = slot(s)) ranks += one->a_t.size(1);
  }
  if (ranks <= masked_max_rank) {
    const Stacked& st = stacked(r.slots());
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = out_;
    if (!st.a_t.defined()) return torch::zeros({}, x.options());
    torch::Tensor low = torch::matmul(flat, st.a_t);  // (rows, ranks): every present adapter
    low.masked_fill_(r.row_slots().to(x.device()).unsqueeze(1).ne(st.columns.unsqueeze(0)), 0);
    return torch::matmul(low, st.b_t).reshape(shape);
  }
  torch::Tensor out = torch::zeros({flat.size(0), out_}, x.options());
  for (const LoraRouting::Group& g : r.groups()) {
    const Slot* s = slot(g.slot);
    if (!s) continue;
    const torch::Tensor rows = flat.index_select(0, g.rows.to(x.device()));
    out.index_add_(0, g.rows.to(x.device()), torch::matmul(torch::matmul(rows, s->a_t), s->b_t));
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out_;
  return out.reshape(shape);
}

std::shared_ptr<LoraRouting> attach_multi_lora(Qwen2Model& model,
                                               const std::vector<Proj>& projections) {
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    for (size_t p = 0; p < kProjNames.size(); ++p) {
      if (model->layer(l)->adapter(Proj(p)))
        invalid_argument("attach_multi_lora: the model already has adapters");
    }
  }
  auto routing = std::make_shared<LoraRouting>();
  for (int64_t l = 0; l < model->num_layers(); ++l) {
    DecoderLayer& layer = model->layer(l);
    for (Proj p : projections) {
      auto& w = layer->linear(p)->weight;
      layer->attach_adapter(p, std::make_shared<MultiLoraAdapter>(w.size(1), w.size(0), routing));
    }
  }
  model->set_lora_routing(routing);
  return routing;
}

MultiLoraAdapter* multi_lora_at(Qwen2Model& model, int64_t layer, Proj p) {
  return dynamic_cast<MultiLoraAdapter*>(model->layer(layer)->adapter(p).get());
}

Qwen2Model share_base_weights(Qwen2Model& source) {
  Qwen2Model out(source->config());
  out->set_weight_packing(false);
  std::unordered_map<std::string, torch::Tensor> from;
  for (auto& [name, t] : source->hf_named_parameters()) from.emplace(name, t);
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : out->hf_named_parameters()) {
    auto it = from.find(name);
    if (it == from.end())
      fail(ErrorCode::kInternal, "share_base_weights: the source has no " + name);
    t.set_data(it->second);
  }
  return out;
}

}  // namespace ajet::model
