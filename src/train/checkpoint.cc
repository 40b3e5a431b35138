#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "common/encoding.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "config/config.h"
#include "hf/safetensors.h"
#include "model/model_dir.h"
#include "train/lora.h"
#include "train/tensor_io.h"

namespace ajet::train {

namespace fs = std::filesystem;

namespace {

constexpr int kFormat = 1;
constexpr std::string_view kPrefix = "global_step_";

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(kPrefix, 0) != 0 || name.size() == kPrefix.size()) return std::nullopt;
  int64_t v = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (int64_t{1} << 55)) return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// Checkpoint directories under base, oldest first.
std::vector<std::pair<int64_t, fs::path>> checkpoints(const fs::path& base) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(base, ec)) return out;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    if (!entry.is_directory()) continue;
    if (auto v = step_of(entry.path())) out.emplace_back(*v, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A 64-bit hash (FNV-1a over 8-byte words) of the HF weights' names, shapes, dtypes and bytes as
// held: the same base loaded the same way hashes the same. Adapters are not HF weights, so with
// LoRA this is the frozen base. Reads every weight once (a copy to the CPU for device tensors).
std::string weights_fingerprint(model::Qwen2Model& m) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * kPrime;
    }
    for (; i < n; ++i) h = (h ^ p[i]) * kPrime;
  };
  torch::NoGradGuard no_grad;
  for (auto& [name, param] : m->hf_named_parameters()) {
    mix(name.data(), name.size());
    for (int64_t d : param.sizes()) mix(&d, sizeof d);
    const auto dtype = static_cast<int>(param.scalar_type());
    mix(&dtype, sizeof dtype);
    auto t = param.detach().to(torch::kCPU).contiguous();
    mix(t.data_ptr(), t.nbytes());
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace

CheckpointOptions CheckpointOptions::from_config(const config::Config& c) {
  CheckpointOptions o;
  o.base_dir = c.trainer_common.checkpoint_base_dir;
  o.keep_last = c.trainer_common.max_checkpoints_to_keep;
  o.base_model_name_or_path = c.model.path;
  return o;
}

bool checkpoint_due(int64_t save_freq, int64_t policy_version) {
  return save_freq > 0 && policy_version > 0 && policy_version % save_freq == 0;
}

fs::path save_checkpoint(Trainer& trainer, const CheckpointOptions& options, const Json& user) {
  if (options.base_dir.empty()) invalid_argument("save_checkpoint: base_dir is empty");
  const std::string name = std::string(kPrefix) + std::to_string(trainer.policy_version());
  const fs::path final_dir = options.base_dir / name;
  const fs::path tmp = temp_sibling(final_dir, "tmp");
  std::error_code ec;
  fs::create_directories(options.base_dir, ec);
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec)
    fail(ErrorCode::kIo, tmp.string() + ": cannot create (" + ec.message() + ")");
  try {
    auto& model = trainer.model();
    model::SaveOptions save;
    save.tokenizer_dir = options.tokenizer_dir;
    const bool lora = trainer.options().lora.enabled();
    if (lora) {
      // model/ is what a user runs: the merged model, not the untrained base.
      save_merged_model(model, tmp / "model", trainer.options().lora,
                        options.base_model_name_or_path, save);
      save_peft_adapter(model, tmp / "adapter", trainer.options().lora,
                        options.base_model_name_or_path);
    } else {
      model::save_model_dir(model, tmp / "model", save);
    }
    if (auto ref = trainer.reference_model()) model::save_model_dir(*ref, tmp / "reference");
    Json extra = {{"lora", lora}, {"user", user}};
    if (lora) {
      extra["lora_base"] = {{"base_model_name_or_path", options.base_model_name_or_path},
                            {"fingerprint", weights_fingerprint(model)}};
    }
    write_trainer_state(trainer, tmp, extra);
    publish_dir(tmp, final_dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  write_file_atomic(options.base_dir / "latest", name + "\n");
  if (options.keep_last > 0) {
    auto all = checkpoints(options.base_dir);
    const auto excess = static_cast<int64_t>(all.size()) - options.keep_last;
    for (int64_t i = 0; i < excess; ++i) {
      if (all[static_cast<size_t>(i)].second == final_dir) continue;
      fs::remove_all(all[static_cast<size_t>(i)].second, ec);
    }
  }
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& base) {
  std::error_code ec;
  if (fs::exists(base / "latest", ec)) {
    std::string name = read_file(base / "latest");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (step_of(name) && fs::is_directory(base / name, ec)) return base / name;
  }
  auto all = checkpoints(base);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

void write_trainer_state(Trainer& trainer, const fs::path& dir, const Json& extra) {
  Trainer::State st = trainer.state();
  std::vector<torch::Tensor> keep;
  std::vector<hf::TensorView> views;
  Json steps = Json::object();
  for (const auto& e : st.optimizer) {
    keep.push_back(e.exp_avg.to(torch::kCPU).contiguous());
    views.push_back(detail::view_of(e.name + ".exp_avg", keep.back()));
    keep.push_back(e.exp_avg_sq.to(torch::kCPU).contiguous());
    views.push_back(detail::view_of(e.name + ".exp_avg_sq", keep.back()));
    steps[e.name] = e.step;
  }
  hf::write_safetensors(dir / "optimizer.safetensors", views, {{"format", "pt"}});
  auto rng = st.torch_rng.to(torch::kCPU).contiguous();
  Json state = {{"format", kFormat},
                {"global_step", st.global_step},
                {"policy_version", st.policy_version},
                {"shuffle_rng", st.shuffle_rng},
                {"torch_rng", base64_encode(std::string_view(
                                  static_cast<const char*>(rng.data_ptr()), rng.nbytes()))},
                {"optimizer_steps", steps}};
  for (const auto& [key, value] : extra.items()) state[key] = value;
  write_file_atomic(dir / "trainer_state.json", state.dump(1) + "\n");
}

Trainer::State read_trainer_state(const fs::path& dir, Json* json) {
  const fs::path state_path = dir / "trainer_state.json";
  const Json j = parse_json(read_file(state_path), state_path.string());
  const std::string where = state_path.string();
  if (get_int(j, "format", where) != kFormat)
    invalid_argument(where + ": unsupported checkpoint format");
  Trainer::State st;
  st.global_step = get_int(j, "global_step", where);
  st.policy_version = get_int(j, "policy_version", where);
  st.shuffle_rng = get_string(j, "shuffle_rng", where);
  auto rng_bytes = base64_decode(get_string(j, "torch_rng", where));
  if (!rng_bytes) invalid_argument(where + ": 'torch_rng' is not base64");
  st.torch_rng = torch::empty({static_cast<int64_t>(rng_bytes->size())}, torch::kByte);
  std::memcpy(st.torch_rng.data_ptr(), rng_bytes->data(), rng_bytes->size());
  const auto steps_it = j.find("optimizer_steps");
  if (steps_it == j.end() || !steps_it->is_object())
    invalid_argument(where + ": 'optimizer_steps' must be an object");

  const fs::path opt_path = dir / "optimizer.safetensors";
  auto file = hf::SafetensorsFile::open(opt_path);
  for (const auto& [name, step] : steps_it->items()) {
    if (!step.is_number_integer())
      invalid_argument(where + ": optimizer step of '" + name + "' must be an integer");
    const hf::TensorInfo* avg = file.find(name + ".exp_avg");
    const hf::TensorInfo* sq = file.find(name + ".exp_avg_sq");
    if (!avg || !sq)
      invalid_argument(opt_path.string() + ": moments of '" + name + "' are missing");
    st.optimizer.push_back({name, step.get<int64_t>(), detail::tensor_from_view(file.view(*avg)),
                            detail::tensor_from_view(file.view(*sq))});
  }
  if (file.tensors().size() != 2 * st.optimizer.size()) {
    invalid_argument(opt_path.string() +
                     ": holds tensors not listed in trainer_state.json's optimizer_steps");
  }
  if (json != nullptr) *json = j;
  return st;
}

LoadedCheckpoint load_checkpoint(Trainer& trainer, const fs::path& dir) {
  if (!fs::is_directory(dir))
    fail(ErrorCode::kNotFound, "checkpoint " + dir.string() + " does not exist");
  Json j;
  Trainer::State st = read_trainer_state(dir, &j);
  const std::string where = (dir / "trainer_state.json").string();
  const bool lora = get_optional_bool(j, "lora", where).value_or(false);
  if (lora != trainer.options().lora.enabled()) {
    invalid_argument(where + ": checkpoint was written " + (lora ? "with" : "without") +
                     " LoRA, the trainer is " +
                     (trainer.options().lora.enabled() ? "with" : "without"));
  }
  // With LoRA, model/ holds the merged model; the base to train on is the trainer's own, checked by
  // fingerprint. A LoRA checkpoint without "lora_base" predates that: its model/ is the base.
  auto& model = trainer.model();
  const auto lora_base = j.find("lora_base");
  const bool base_in_memory = lora && lora_base != j.end();
  std::string base_name;
  if (base_in_memory) {
    if (!lora_base->is_object()) invalid_argument(where + ": 'lora_base' must be an object");
    base_name = get_string(*lora_base, "base_model_name_or_path", where);
    const std::string recorded = get_string(*lora_base, "fingerprint", where);
    const std::string now = weights_fingerprint(model);
    if (now != recorded) {
      invalid_argument(where + ": the trainer's base weights (fingerprint " + now +
                       ") are not the base this checkpoint's "
                       "adapter was trained on (fingerprint " +
                       recorded + ", base_model_name_or_path '" + base_name +
                       "'); start the engine on that base in the same dtype, not on the "
                       "checkpoint's merged model/");
    }
  }
  for (const char* sub : {"model", "adapter", "reference"}) {
    const bool needed = (std::string(sub) == "model" && !base_in_memory) ||
                        (std::string(sub) == "adapter" && lora) ||
                        (std::string(sub) == "reference" && trainer.reference_model().has_value());
    if (needed && !fs::is_directory(dir / sub))
      fail(ErrorCode::kNotFound, "checkpoint " + dir.string() + ": " + sub + "/ is missing");
  }

  std::string weights;
  if (base_in_memory) {
    weights = "base model (the trainer's, from '" + base_name +
              "', fingerprint matches) + adapter " + (dir / "adapter").string();
  } else {
    model::load_weights(model, dir / "model");
    weights =
        lora ? "base model " + (dir / "model").string() + " + adapter " + (dir / "adapter").string()
             : "model " + (dir / "model").string();
  }
  if (lora) load_peft_adapter(model, dir / "adapter");
  if (auto ref = trainer.reference_model()) model::load_weights(*ref, dir / "reference");
  trainer.load_state(st);
  log().info("checkpoint {}: loaded {}", dir.string(), weights);
  auto user = j.find("user");
  return {dir, st.global_step, st.policy_version, user == j.end() ? Json::object() : *user,
          weights};
}

}  // namespace ajet::train
