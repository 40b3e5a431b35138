#include "model/model_source.h"

#include "common/error.h"
#include "common/fs.h"
#include "common/json.h"

namespace ajet::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kAdapterConfig = "adapter_config.json";

// "r=4, alpha 8 on q_proj,v_proj" from an adapter_config.json-like object; "" when unreadable.
// Appended piecewise: GCC 12 warns (-Wrestrict) on "literal" + string&&.
std::string lora_summary(const Json& j) {
  std::string out;
  if (auto r = j.find("r"); r != j.end() && r->is_number()) out.append("r=").append(r->dump());
  if (auto a = j.find("lora_alpha"); a != j.end() && a->is_number())
    out.append(", alpha ").append(a->dump());
  if (auto t = j.find("target_modules"); t != j.end() && t->is_array()) {
    std::string names;
    for (const auto& n : *t) {
      if (!n.is_string()) continue;
      if (!names.empty()) names.append(",");
      names.append(n.get<std::string>());
    }
    if (!names.empty()) out.append(" on ").append(names);
  }
  return out;
}

std::optional<Json> read_json_if_present(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  return parse_json(read_file(path), path.string());
}

fs::path tokenizer_dir_of(const fs::path& preferred, const fs::path& fallback) {
  std::error_code ec;
  return fs::exists(preferred / "tokenizer.json", ec) ? preferred : fallback;
}

}  // namespace

ModelSource resolve_model_source(const fs::path& dir_in) {
  std::error_code ec;
  if (!fs::is_directory(dir_in, ec))
    fail(ErrorCode::kNotFound, "model directory " + dir_in.string() + " does not exist");
  fs::path dir =
      dir_in.has_filename() ? dir_in : dir_in.parent_path();  // "ckpt/model/" -> "ckpt/model"
  if (fs::is_regular_file(dir / "trainer_state.json", ec) && fs::is_directory(dir / "model", ec))
    dir = dir / "model";

  if (fs::exists(dir / "config.json", ec)) {
    ModelSource s{dir, std::nullopt, dir, ""};
    if (auto merged = read_json_if_present(dir / kMergedLoraFile)) {
      const auto base = merged->find("base_model_name_or_path");
      s.description = "merged model " + dir.string() + " (base " +
                      (base != merged->end() && base->is_string() ? base->get<std::string>()
                                                                  : std::string("?")) +
                      " + LoRA " + lora_summary(*merged) + ", merged into the weights)";
      return s;
    }
    // model/ of a LoRA checkpoint written before checkpoints held the merged model: the untrained
    // base.
    const fs::path checkpoint = dir.parent_path();
    if (dir.filename() == "model" && fs::exists(checkpoint / "adapter" / kAdapterConfig, ec)) {
      auto state = read_json_if_present(checkpoint / "trainer_state.json");
      if (state && get_optional_bool(*state, "lora", (checkpoint / "trainer_state.json").string())
                       .value_or(false)) {
        s.adapter = checkpoint / "adapter";
        s.description =
            "base model " + dir.string() + " + adapter " + s.adapter->string() +
            " (a LoRA checkpoint from before merged export; the adapter is merged while loading)";
        return s;
      }
    }
    s.description = "model " + dir.string();
    return s;
  }

  if (auto adapter = read_json_if_present(dir / kAdapterConfig)) {
    const std::string where = (dir / kAdapterConfig).string();
    const fs::path base = get_string(*adapter, "base_model_name_or_path", where);
    ModelSource
        b;  // the base may itself be given as a checkpoint directory (an engine started on one)
    try {
      b = resolve_model_source(base);
    } catch (const Error& e) {
      fail(e.code(), where + ": base_model_name_or_path '" + base.string() +
                         "' does not name the base weights: " + e.what());
    }
    if (b.adapter)
      invalid_argument(where + ": the base '" + base.string() + "' is itself " + b.description);
    ModelSource s{b.weights, dir, tokenizer_dir_of(dir, b.tokenizer_dir), ""};
    s.description = "base model " + b.weights.string() + " + adapter " + dir.string() + " (LoRA " +
                    lora_summary(*adapter) + ", merged while loading)";
    return s;
  }
  fail(
      ErrorCode::kNotFound,
      "model directory " + dir.string() +
          ": no config.json (expected a Hugging Face model directory, e.g. from `ajet model "
          "init`, a trainer checkpoint global_step_N/ or a PEFT adapter with adapter_config.json)");
}

}  // namespace ajet::model
