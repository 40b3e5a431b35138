// `ajet-engine model init`: writes a randomly initialised model of a named preset, in HF layout,
// with the tokenizer's files, so every other command can open it like any HF checkpoint.
#include <cmath>
#include <filesystem>
#include <iostream>

#include "command.h"
#include "common/error.h"
#include "common/log.h"
#include "model/compute.h"
#include "model/model_dir.h"
#include "model/presets.h"
#include "model/qwen2.h"
#include "text/tokenizer.h"

namespace ajet::engine_cli {
namespace {

namespace fs = std::filesystem;

struct InitArgs {
  std::string preset;
  std::string tokenizer;
  std::string out;
  uint64_t seed = 0;
  double init_std = 0.02;
  bool scaled_residual_init = false;
  double embed_std = 0;
  bool untie_embeddings = false;
  std::string dtype;  // empty: the preset's (bfloat16 for qwen2.5-0.5b, as published; else float32)
  bool force = false;
  int threads = 0;
};

std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void run_init(const InitArgs& args) {
  // Check every argument before any work, so a typo never leaves a half-made directory behind.
  hf::ModelConfig config = model::preset_config(args.preset, 1);  // validates the name
  const std::string dtype_name = args.dtype.empty() ? config.torch_dtype : args.dtype;
  const torch::ScalarType dtype = model::parse_dtype(dtype_name);
  const fs::path tokenizer_dir = args.tokenizer, out = args.out;
  if (!fs::is_directory(tokenizer_dir)) {
    fail(ErrorCode::kNotFound, "--tokenizer " + tokenizer_dir.string() + ": not a directory");
  }
  if (!fs::exists(tokenizer_dir / "tokenizer.json")) {
    fail(ErrorCode::kNotFound,
         "--tokenizer " + tokenizer_dir.string() + ": tokenizer.json not found");
  }
  if (fs::exists(out)) {
    if (!fs::is_directory(out))
      invalid_argument("--out " + out.string() + " exists and is not a directory");
    if (!fs::is_empty(out) && !args.force) {
      invalid_argument("--out " + out.string() +
                       " exists and is not empty (pass --force to replace it)");
    }
    // --force deletes the old directory: only ever one that already holds a model.
    if (!fs::is_empty(out) && !fs::exists(out / "config.json")) {
      invalid_argument("--out " + out.string() +
                       " is not empty and holds no config.json; refusing to replace it");
    }
  }
  model::configure_threads(args.threads);
  log().debug("compute: {}", model::describe_compute_backend());

  const text::Tokenizer tokenizer = text::Tokenizer::load(tokenizer_dir);
  config = model::preset_config(args.preset, static_cast<int64_t>(tokenizer.vocab_size()));
  if (auto eos = tokenizer.eos_id()) {
    config.eos_token_id = *eos;
    config.eos_token_ids = {*eos};
  }
  if (const auto& bos = tokenizer.config().bos_token) {
    if (auto id = tokenizer.token_to_id(*bos)) config.bos_token_id = *id;
  }
  config.torch_dtype = model::dtype_to_hf_name(dtype);
  if (args.untie_embeddings) config.tie_word_embeddings = false;

  model::Qwen2Model model(config);
  const double output_scale =
      args.scaled_residual_init
          ? 1.0 / std::sqrt(2.0 * static_cast<double>(config.num_hidden_layers))
          : 1.0;
  model::init_weights(model, args.seed, args.init_std, output_scale, args.embed_std);
  model->to(dtype);
  model::save_model_dir(model, out, model::SaveOptions{tokenizer_dir});
  std::cout << "model init: preset " << args.preset << ", "
            << with_thousands(model->parameter_count()) << " parameters (vocab "
            << config.vocab_size << ", " << model::dtype_to_hf_name(dtype) << ", seed " << args.seed
            << ", init std " << args.init_std
            << (args.scaled_residual_init ? ", residual outputs scaled" : "")
            << (args.embed_std > 0 ? ", embeddings std " + std::to_string(args.embed_std) : "")
            << (args.untie_embeddings ? ", untied lm_head" : "") << ") -> " << out.string()
            << std::endl;
}

const CommandRegistration kModel("model", [](CLI::App& app) {
  auto* model_cmd = app.add_subcommand("model", "Create and inspect model directories");
  model_cmd->require_subcommand(1);
  auto args = std::make_shared<InitArgs>();
  auto* init = model_cmd->add_subcommand(
      "init", "Write a randomly initialised model (HF layout) for a preset");
  std::string presets_help = "Architecture preset:";
  for (const auto& p : model::presets()) presets_help += "\n  " + p.name + ": " + p.description;
  init->add_option("--preset", args->preset, presets_help)->required();
  init->add_option("--tokenizer", args->tokenizer,
                   "Directory with tokenizer.json (and tokenizer_config.json)")
      ->required();
  init->add_option("--out", args->out,
                   "Output model directory (must not exist or be empty, unless --force)")
      ->required();
  init->add_option("--seed", args->seed, "Random seed for the weights")->capture_default_str();
  init->add_option("--init-std", args->init_std, "Standard deviation of the initial weights")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  init->add_flag(
      "--scaled-residual-init", args->scaled_residual_init,
      "Initialise o_proj and down_proj with std / sqrt(2 * layers) (GPT-2's residual scaling)");
  init->add_option("--embed-std", args->embed_std,
                   "Standard deviation of the input embeddings (0: --init-std)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  init->add_flag("--untie-embeddings", args->untie_embeddings,
                 "A separate lm_head instead of the preset's tied one");
  init->add_option("--dtype", args->dtype,
                   "float32 or bfloat16 (default: the preset's, bfloat16 for qwen2.5-0.5b as "
                   "published, else float32)");
  init->add_flag("--force", args->force, "Replace a non-empty output directory");
  init->add_option("--threads", args->threads, "Intra-op threads (0: all cores)")
      ->capture_default_str();
  init->callback([args] { run_init(*args); });
});

}  // namespace
}  // namespace ajet::engine_cli
