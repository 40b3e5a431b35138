#include "train/lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <map>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "hf/safetensors.h"
#include "model/model_source.h"
#include "train/tensor_io.h"

namespace ajet::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kAdapterFile = "adapter_model.safetensors";
constexpr const char* kAdapterConfig = "adapter_config.json";

// "model.layers.3.self_attn.q_proj" for layer 3's q projection: the HF module path.
std::string module_path(int64_t layer, model::Proj p) {
  const bool attention =
      p == model::Proj::kQ || p == model::Proj::kK || p == model::Proj::kV || p == model::Proj::kO;
  return "model.layers." + std::to_string(layer) + (attention ? ".self_attn." : ".mlp.") +
         std::string(model::kProjNames[static_cast<size_t>(p)]);
}

std::shared_ptr<LoraAdapter> lora_of(model::Qwen2Model& m, int64_t layer, model::Proj p) {
  return std::dynamic_pointer_cast<LoraAdapter>(m->layer(layer)->adapter(p));
}

template <class Fn>
void for_each_adapter(model::Qwen2Model& m, Fn&& fn) {
  for (int64_t l = 0; l < m->num_layers(); ++l) {
    for (size_t i = 0; i < model::kProjNames.size(); ++i) {
      const auto p = static_cast<model::Proj>(i);
      if (auto a = lora_of(m, l, p)) fn(l, p, *a);
    }
  }
}

}  // namespace

std::vector<model::Proj> resolve_lora_targets(const std::vector<std::string>& names) {
  std::set<size_t> chosen;
  for (const auto& name : names) {
    if (name == "all-linear") {
      for (size_t i = 0; i < model::kProjNames.size(); ++i) chosen.insert(i);
      continue;
    }
    auto p = model::proj_from_name(name);
    if (!p) {
      std::string known = "all-linear";
      for (auto n : model::kProjNames) known += ", " + std::string(n);
      invalid_argument("lora target module '" + name +
                       "' is not a linear layer of this model (known: " + known + ")");
    }
    chosen.insert(static_cast<size_t>(*p));
  }
  if (chosen.empty()) invalid_argument("lora target_modules is empty");
  std::vector<model::Proj> out;
  for (size_t i : chosen) out.push_back(static_cast<model::Proj>(i));
  return out;
}

LoraAdapter::LoraAdapter(int64_t in_features, int64_t out_features,
                         const train_data::LoraOptions& options)
    : scale_(options.scale()), dropout_(options.dropout) {
  if (options.rank <= 0)
    invalid_argument("lora rank must be positive, got " + std::to_string(options.rank));
  lora_A = register_parameter("lora_A", torch::zeros({options.rank, in_features}));
  lora_B = register_parameter("lora_B", torch::zeros({out_features, options.rank}));
}

torch::Tensor LoraAdapter::delta(const torch::Tensor& x) {
  if (!enabled)
    return torch::zeros({}, x.options());  // a 0-d zero: broadcasts onto the base output
  auto in = x;
  if (dropout_ > 0 && is_training()) {
    if (!dropout_generator.defined() || !x.device().is_cpu() || dropout_ >= 1) {
      in = torch::dropout(x, dropout_, /*train=*/true);
    } else {
      // torch::dropout's mask and scaling, drawn from this run's generator.
      in = x * at::bernoulli(x, 1.0 - dropout_, dropout_generator).div_(1.0 - dropout_);
    }
  }
  auto low = torch::nn::functional::linear(in, lora_A);        // (..., r)
  return torch::nn::functional::linear(low, lora_B) * scale_;  // (..., out)
}

torch::Tensor LoraAdapter::merged_delta() const {
  return torch::matmul(lora_B.to(torch::kFloat), lora_A.to(torch::kFloat)) * scale_;  // (out, in)
}

void attach_lora(model::Qwen2Model& m, const train_data::LoraOptions& options, uint64_t seed) {
  if (has_lora(m)) invalid_argument("attach_lora: the model already has LoRA adapters");
  const auto targets = resolve_lora_targets(options.target_modules);
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.set_requires_grad(false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // A stream apart from A's draws ("LoRA dropout" in the seed).
  auto dropout_gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x4c6f5241446f7574ull);
  for (int64_t l = 0; l < m->num_layers(); ++l) {
    for (model::Proj p : targets) {
      auto& linear = m->layer(l)->linear(p);
      const int64_t in = linear->weight.size(1), out = linear->weight.size(0);
      auto adapter = std::make_shared<LoraAdapter>(in, out, options);
      // PEFT: kaiming_uniform_(A, a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)); B = 0.
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      auto a = torch::empty(adapter->lora_A.sizes(), torch::kFloat);
      a.uniform_(-bound, bound, gen);
      adapter->to(linear->weight.device(), linear->weight.scalar_type());
      adapter->lora_A.copy_(a);
      adapter->lora_A.set_requires_grad(true);
      adapter->lora_B.set_requires_grad(true);
      adapter->train(m->is_training());
      adapter->dropout_generator = dropout_gen;
      m->layer(l)->attach_adapter(p, adapter);
    }
  }
}

at::Generator lora_dropout_generator(model::Qwen2Model& m) {
  at::Generator gen;
  for_each_adapter(m, [&](int64_t, model::Proj, LoraAdapter& a) {
    if (!gen.defined()) gen = a.dropout_generator;
  });
  return gen;
}

bool has_lora(model::Qwen2Model& m) {
  bool any = false;
  for_each_adapter(m, [&](int64_t, model::Proj, LoraAdapter&) { any = true; });
  return any;
}

std::vector<std::pair<std::string, torch::Tensor>> lora_named_parameters(model::Qwen2Model& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for_each_adapter(m, [&](int64_t l, model::Proj p, LoraAdapter& a) {
    const std::string base = "base_model.model." + module_path(l, p);
    out.emplace_back(base + ".lora_A.weight", a.lora_A);
    out.emplace_back(base + ".lora_B.weight", a.lora_B);
  });
  return out;
}

bool set_lora_enabled(model::Qwen2Model& m, bool enabled) {
  std::optional<bool> previous;
  for_each_adapter(m, [&](int64_t, model::Proj, LoraAdapter& a) {
    if (!previous) previous = a.enabled;
    a.enabled = enabled;
  });
  return previous.value_or(true);
}

void save_peft_adapter(model::Qwen2Model& m, const fs::path& dir,
                       const train_data::LoraOptions& options,
                       const std::string& base_model_name_or_path) {
  auto params = lora_named_parameters(m);
  if (params.empty()) invalid_argument("save_peft_adapter: the model has no LoRA adapters");
  std::vector<torch::Tensor> keep;
  std::vector<hf::TensorView> views;
  for (auto& [name, t] : params) {
    keep.push_back(t.detach().to(torch::kCPU).contiguous());
    views.push_back(detail::view_of(name, keep.back()));
  }
  // target_modules as PEFT stores them after resolution: the concrete module names.
  std::vector<std::string> targets;
  for (model::Proj p : resolve_lora_targets(options.target_modules))
    targets.emplace_back(model::kProjNames[static_cast<size_t>(p)]);
  Json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"base_model_name_or_path", base_model_name_or_path},
                 {"r", options.rank},
                 {"lora_alpha", options.alpha},
                 {"lora_dropout", options.dropout},
                 {"target_modules", targets},
                 {"bias", "none"},
                 {"fan_in_fan_out", false},
                 {"inference_mode", true},
                 {"init_lora_weights", true},
                 {"use_rslora", false},
                 {"use_dora", false},
                 {"modules_to_save", nullptr},
                 {"layers_to_transform", nullptr},
                 {"rank_pattern", Json::object()},
                 {"alpha_pattern", Json::object()}};
  const fs::path tmp = temp_sibling(dir, "tmp");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) fail(ErrorCode::kIo, tmp.string() + ": cannot create (" + ec.message() + ")");
  try {
    hf::write_safetensors(tmp / kAdapterFile, views, {{"format", "pt"}});
    write_file_atomic(tmp / kAdapterConfig, config.dump(2) + "\n");
    publish_dir(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

train_data::LoraOptions read_peft_config(const fs::path& dir) {
  const fs::path path = dir / kAdapterConfig;
  Json j = parse_json(read_file(path), path.string());
  const std::string where = path.string();
  train_data::LoraOptions o;
  o.rank = get_int(j, "r", where);
  o.alpha = get_number(j, "lora_alpha", where);
  o.dropout = get_optional_number(j, "lora_dropout", where).value_or(0.0);
  o.target_modules.clear();
  auto it = j.find("target_modules");
  if (it == j.end() || !(it->is_array() || it->is_string()))
    invalid_argument(where + ": 'target_modules' must be a list");
  if (it->is_string()) {
    o.target_modules.push_back(it->get<std::string>());
  } else {
    for (const auto& t : *it) {
      if (!t.is_string()) invalid_argument(where + ": 'target_modules' must hold strings");
      o.target_modules.push_back(t.get<std::string>());
    }
  }
  return o;
}

void load_peft_adapter(model::Qwen2Model& m, const fs::path& dir) {
  const fs::path path = dir / kAdapterFile;
  auto file = hf::SafetensorsFile::open(path);
  auto params = lora_named_parameters(m);
  if (params.empty())
    invalid_argument("load_peft_adapter: attach adapters before loading " + path.string());
  std::vector<std::string> problems;
  std::set<std::string> expected;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (auto& [name, param] : params) {
    expected.insert(name);
    const hf::TensorInfo* info = file.find(name);
    if (!info) {
      problems.push_back("missing tensor '" + name + "'");
      continue;
    }
    auto t = detail::tensor_from_view(file.view(*info));
    if (t.sizes() != param.sizes()) {
      problems.push_back("tensor '" + name + "' has the wrong shape");
      continue;
    }
    copies.emplace_back(param, t);
  }
  for (const auto& info : file.tensors()) {
    if (!expected.count(info.name)) problems.push_back("unexpected tensor '" + info.name + "'");
  }
  if (!problems.empty()) {
    std::string msg = path.string() + ": adapter does not match the attached LoRA layers: ";
    for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += (i ? "; " : "") + problems[i];
    invalid_argument(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& [param, t] : copies) param.copy_(t);
}

std::vector<std::pair<std::string, torch::Tensor>> merged_named_parameters(model::Qwen2Model& m) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> deltas;  // HF weight name -> (out, in) float32 scale * B A
  for_each_adapter(m, [&](int64_t l, model::Proj p, LoraAdapter& a) {
    deltas.emplace(module_path(l, p) + ".weight", a.merged_delta().detach());
  });
  auto out = m->hf_named_parameters();
  for (auto& [name, t] : out) {
    auto d = deltas.find(name);
    // Merged copies go to the CPU at once: an export of a device model holds one transient copy
    // there.
    t = d == deltas.end()
            ? t.detach()
            : (t.detach().to(torch::kFloat) + d->second).to(torch::kCPU, t.scalar_type());
  }
  return out;
}

void save_merged_model(model::Qwen2Model& m, const fs::path& dir,
                       const train_data::LoraOptions& lora,
                       const std::string& base_model_name_or_path, model::SaveOptions options) {
  if (!has_lora(m)) invalid_argument("save_merged_model: the model has no LoRA adapters");
  std::vector<std::string> targets;
  for (model::Proj p : resolve_lora_targets(lora.target_modules))
    targets.emplace_back(model::kProjNames[static_cast<size_t>(p)]);
  const Json provenance = {{"merged", "lora"},
                           {"base_model_name_or_path", base_model_name_or_path},
                           {"r", lora.rank},
                           {"lora_alpha", lora.alpha},
                           {"target_modules", targets}};
  options.extra_files.emplace_back(model::kMergedLoraFile, provenance.dump(2) + "\n");
  model::save_model_tensors(m->config(), merged_named_parameters(m), dir, options);
}

}  // namespace ajet::train
