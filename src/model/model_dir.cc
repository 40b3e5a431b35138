#include "model/model_dir.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "hf/checkpoint.h"
#include "hf/safetensors.h"
#include "model/model_source.h"

namespace ajet::model {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPeftPrefix =
    "base_model.model.";  // PEFT's names: prefix + HF module + .lora_A.weight
constexpr size_t kMaxListedProblems =
    40;  // a wholly different model would otherwise list thousands

std::optional<torch::ScalarType> torch_dtype_of(hf::DType d) {
  switch (d) {
    case hf::DType::kF32: return torch::kFloat;
    case hf::DType::kF16: return torch::kHalf;
    case hf::DType::kBF16: return torch::kBFloat16;
    default: return std::nullopt;  // integer / bool tensors are never weights
  }
}

hf::DType hf_dtype_of(torch::ScalarType d) {
  switch (d) {
    case torch::kFloat: return hf::DType::kF32;
    case torch::kHalf: return hf::DType::kF16;
    case torch::kBFloat16: return hf::DType::kBF16;
    default: invalid_argument(std::string("cannot save a parameter of dtype ") + c10::toString(d));
  }
}

std::string shape_string(c10::IntArrayRef shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A CPU tensor over (or copied from) the view's bytes; only valid while the checkpoint is open.
torch::Tensor tensor_from_view(const hf::TensorView& view, torch::ScalarType dtype) {
  auto options = torch::TensorOptions().dtype(dtype);
  const size_t elem = c10::elementSize(dtype);
  void* ptr = const_cast<std::byte*>(view.data.data());
  if (reinterpret_cast<uintptr_t>(ptr) % elem == 0)
    return torch::from_blob(ptr, view.shape, options);
  auto copy =
      torch::empty(view.shape, options);  // unaligned in the file: copy to aligned memory first
  std::memcpy(copy.data_ptr(), ptr, view.data.size());
  return copy;
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  if (!fs::exists(from / "tokenizer.json")) {
    fail(ErrorCode::kNotFound,
         "tokenizer directory " + from.string() + ": tokenizer.json not found");
  }
  for (const char* name : kTokenizerFiles) {
    if (!fs::exists(from / name)) continue;
    std::error_code ec;
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing, ec);
    if (ec)
      fail(ErrorCode::kIo,
           (from / name).string() + ": cannot copy to " + to.string() + " (" + ec.message() + ")");
  }
}

Json generation_config(const hf::ModelConfig& c) {
  Json j = Json::object();
  j["_from_model_config"] = true;
  j["bos_token_id"] = c.bos_token_id ? Json(*c.bos_token_id) : Json(nullptr);
  if (c.eos_token_ids.size() > 1) {
    j["eos_token_id"] = c.eos_token_ids;
  } else {
    j["eos_token_id"] = c.eos_token_id ? Json(*c.eos_token_id) : Json(nullptr);
  }
  return j;
}

// A fresh float32 CPU tensor with the view's values.
torch::Tensor float_tensor(const hf::TensorView& v) {
  auto dtype = torch_dtype_of(v.dtype);
  if (!dtype)
    invalid_argument("tensor '" + v.name + "' has dtype " + std::string(hf::dtype_name(v.dtype)) +
                     ", expected a float");
  return tensor_from_view(v, *dtype).to(torch::kFloat).clone();
}

}  // namespace

Qwen2Model load_model_dir(const fs::path& dir, const LoadOptions& options) {
  const ModelSource source = resolve_model_source(dir);
  hf::ModelConfig config = hf::load_model_config(source.weights / "config.json");
  Qwen2Model model(config);
  model->to(options.device, options.dtype);
  load_weights(model, source.weights);
  if (source.adapter) merge_peft_adapter(model, *source.adapter);
  log().info("loaded {}", source.description);
  return model;
}

void load_weights(Qwen2Model& model, const fs::path& path) {
  hf::SafetensorsCheckpoint ckpt = hf::SafetensorsCheckpoint::open(path);
  auto params = model->hf_named_parameters();
  std::set<std::string> expected;
  std::vector<std::string> problems;
  std::vector<std::pair<torch::Tensor, hf::TensorView>> copies;  // (parameter, source)
  for (auto& [name, param] : params) {
    expected.insert(name);
    auto view = ckpt.find(name);
    if (!view) {
      problems.push_back("missing tensor '" + name + "' (expected shape " +
                         shape_string(param.sizes()) + ")");
      continue;
    }
    if (!torch_dtype_of(view->dtype)) {
      problems.push_back("tensor '" + name + "' has dtype " +
                         std::string(hf::dtype_name(view->dtype)) + ", expected F32, F16 or BF16");
      continue;
    }
    if (c10::IntArrayRef(view->shape) != param.sizes()) {
      problems.push_back("tensor '" + name + "' has shape " + shape_string(view->shape) +
                         " but the model expects " + shape_string(param.sizes()));
      continue;
    }
    copies.emplace_back(param, *view);
  }
  const bool tied = model->config().tie_word_embeddings;
  for (const auto& name : ckpt.names()) {
    if (expected.count(name)) continue;
    if (ends_with(name, "rotary_emb.inv_freq")) continue;  // a buffer older exporters saved
    if (tied && name == "lm_head.weight") continue;        // HF ignores it too when tied
    problems.push_back("unexpected tensor '" + name + "'");
  }
  if (!problems.empty()) {
    std::string message = path.string() + ": weights do not match config.json (" +
                          std::to_string(problems.size()) +
                          (problems.size() == 1 ? " problem" : " problems") + "): ";
    for (size_t i = 0; i < problems.size() && i < kMaxListedProblems; ++i)
      message += (i ? "; " : "") + problems[i];
    if (problems.size() > kMaxListedProblems) {
      message += "; ... and " + std::to_string(problems.size() - kMaxListedProblems) + " more";
    }
    invalid_argument(message);
  }
  torch::NoGradGuard no_grad;
  for (auto& [param, view] : copies)
    param.copy_(tensor_from_view(view, *torch_dtype_of(view.dtype)));
}

void merge_peft_adapter(Qwen2Model& model, const fs::path& adapter_dir) {
  const fs::path config_path = adapter_dir / "adapter_config.json";
  const std::string where = config_path.string();
  const Json config = parse_json(read_file(config_path), where);
  const int64_t r = get_int(config, "r", where);
  const double alpha = get_number(config, "lora_alpha", where);
  if (r <= 0) invalid_argument(where + ": 'r' must be positive, got " + std::to_string(r));
  if (get_optional_bool(config, "use_dora", where).value_or(false))
    invalid_argument(where + ": DoRA adapters are not supported");
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    auto it = config.find(pattern);
    if (it != config.end() && !it->is_null() && !it->empty()) {
      invalid_argument(where + ": '" + pattern + "' (per-module ranks) is not supported");
    }
  }
  const bool rslora = get_optional_bool(config, "use_rslora", where).value_or(false);
  const double scale =
      alpha / (rslora ? std::sqrt(static_cast<double>(r)) : static_cast<double>(r));

  const fs::path path = adapter_dir / "adapter_model.safetensors";
  auto file = hf::SafetensorsFile::open(path);
  std::map<std::string, torch::Tensor> weights;  // "model.layers.0.self_attn.q_proj" -> its weight
  for (auto& [name, param] : model->hf_named_parameters()) {
    if (ends_with(name, ".weight")) weights.emplace(name.substr(0, name.size() - 7), param);
  }
  struct Pair {
    const hf::TensorInfo* a = nullptr;
    const hf::TensorInfo* b = nullptr;
  };
  std::map<std::string, Pair> modules;
  std::vector<std::string> problems;
  for (const auto& info : file.tensors()) {
    const std::string& n = info.name;
    const bool is_a = ends_with(n, ".lora_A.weight"), is_b = ends_with(n, ".lora_B.weight");
    if (n.rfind(kPeftPrefix, 0) != 0 || !(is_a || is_b)) {
      problems.push_back("unexpected tensor '" + n + "'");
      continue;
    }
    const std::string module = n.substr(kPeftPrefix.size(), n.size() - kPeftPrefix.size() - 14);
    (is_a ? modules[module].a : modules[module].b) = &info;
  }
  std::vector<std::pair<torch::Tensor, torch::Tensor>> deltas;  // (weight, scale * B A in float32)
  for (const auto& [module, pair] : modules) {
    auto w = weights.find(module);
    if (w == weights.end()) {
      problems.push_back("'" + module + "' is not a linear layer of this model");
      continue;
    }
    if (!pair.a || !pair.b) {
      problems.push_back("'" + module + "' has lora_" + (pair.a ? "A" : "B") + " but not lora_" +
                         (pair.a ? "B" : "A"));
      continue;
    }
    auto a = float_tensor(file.view(*pair.a));  // (r, in)
    auto b = float_tensor(file.view(*pair.b));  // (out, r)
    const auto& weight = w->second;             // (out, in)
    if (a.dim() != 2 || b.dim() != 2 || a.size(0) != r || b.size(1) != r ||
        b.size(0) != weight.size(0) || a.size(1) != weight.size(1)) {
      problems.push_back("'" + module + "' has the wrong shape for r=" + std::to_string(r) +
                         " and its weight");
      continue;
    }
    deltas.emplace_back(weight, torch::matmul(b, a) * scale);  // (out, in)
  }
  if (modules.empty() && problems.empty()) problems.push_back("no lora_A / lora_B tensors");
  if (!problems.empty()) {
    std::string msg = path.string() + ": adapter does not fit the model (" +
                      std::to_string(problems.size()) + " problems): ";
    for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += (i ? "; " : "") + problems[i];
    invalid_argument(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& [weight, delta] : deltas) {
    weight.copy_((weight.to(torch::kFloat) + delta.to(weight.device())).to(weight.scalar_type()));
  }
}

void save_model_dir(Qwen2Model& model, const fs::path& dir, const SaveOptions& options) {
  save_model_tensors(model->config(), model->hf_named_parameters(), dir, options);
}

void save_model_tensors(const hf::ModelConfig& model_config,
                        const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                        const fs::path& dir_in, const SaveOptions& options) {
  const fs::path dir = dir_in.has_filename() ? dir_in : dir_in.parent_path();  // "out/" → "out"
  const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  // A hidden sibling on the same filesystem, so the final rename is atomic.
  const fs::path tmp = temp_sibling(dir, "tmp");
  std::error_code ec;
  fs::create_directories(parent, ec);
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) {
    fail(ErrorCode::kIo, tmp.string() + ": cannot create (" + ec.message() + ")");
  }
  try {
    hf::ModelConfig config = model_config;
    std::vector<torch::Tensor> cpu;  // keeps the bytes alive while writing
    std::vector<hf::TensorView> views;
    std::optional<torch::ScalarType> dtype;
    for (const auto& [name, param] : tensors) {
      auto t = param.detach().to(torch::kCPU).contiguous();
      if (!dtype) dtype = t.scalar_type();
      cpu.push_back(t);
      views.push_back(hf::TensorView{
          name, hf_dtype_of(t.scalar_type()), t.sizes().vec(),
          std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
    }
    config.torch_dtype = dtype_to_hf_name(dtype.value_or(torch::kFloat));
    write_file_atomic(tmp / "config.json", hf::model_config_to_json(config).dump(2) + "\n");
    write_file_atomic(tmp / "generation_config.json", generation_config(config).dump(2) + "\n");
    hf::write_safetensors_checkpoint(tmp, views, options.max_shard_bytes, {{"format", "pt"}});
    if (options.tokenizer_dir) copy_tokenizer_files(*options.tokenizer_dir, tmp);
    for (const auto& [name, contents] : options.extra_files)
      write_file_atomic(tmp / name, contents);
    // Swap in: the old directory (if any) moves aside first, so `dir` is always either whole or
    // absent.
    publish_dir(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace ajet::model
