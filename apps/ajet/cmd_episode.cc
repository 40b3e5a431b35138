// `ajet episode show --store FILE UUID`: one episode from the SQLite store as JSON: its calls, its
// merged training samples and the merge diagnostics (the same document GET /episodes/{uuid} serves;
// shape in docs/tracking.md). Read-only use of the store; it cannot open a store a running front
// holds (the store allows one process), so inspect a live episode through the front's route.
//
// Text pieces need the model's tokenizer: --tokenizer DIR, else the model.path of the train config
// stored with the episodes (state key train_config_yaml) when that directory has a tokenizer.json;
// without one the JSON has no text pieces and says "tokenizer": false.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "common/error.h"
#include "common/json.h"
#include "config/load.h"
#include "store/store.h"
#include "text/tokenizer.h"
#include "tracking/episode_json.h"
#include "tracking/episode_tracker.h"
#include "tracking/merge.h"

namespace ajet::cli {
namespace {

struct EpisodeShowArgs {
  std::string store;
  std::string uuid;
  std::string tokenizer;
  std::string compare_level;  // "" = from the stored config (default token)
  int indent = 2;
};

void run_episode_show(const EpisodeShowArgs& args) {
  if (!std::filesystem::exists(args.store)) fail(ErrorCode::kNotFound, "no store at " + args.store);
  store::Store st(args.store);
  std::optional<store::EpisodeRow> episode = st.get_episode(args.uuid);
  if (!episode) fail(ErrorCode::kNotFound, "episode " + args.uuid + " is not in store " + args.store);
  std::vector<store::CallRow> rows = st.get_calls(args.uuid);

  std::optional<config::Config> cfg;
  if (auto yaml = st.get_state(store::kStateTrainConfigYaml); yaml && !yaml->empty()) {
    try {
      cfg = config::parse_config(*yaml, "train config stored in " + args.store, config::ConfigUse::kSwarmServer).config;
    } catch (const Error& e) {
      std::fprintf(stderr, "ajet episode show: ignoring the stored train config: %s\n", e.what());
    }
  }

  std::filesystem::path tokenizer_dir = args.tokenizer;
  if (tokenizer_dir.empty() && cfg && !cfg->model.path.empty() &&
      std::filesystem::exists(std::filesystem::path(cfg->model.path) / "tokenizer.json")) {
    tokenizer_dir = cfg->model.path;
  }
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<tracking::ChatFormat> format;
  if (!tokenizer_dir.empty()) {
    tok = std::make_unique<text::Tokenizer>(text::Tokenizer::load(tokenizer_dir));
    try {
      format = std::make_unique<tracking::ChatFormat>(tracking::ChatFormat::from_tokenizer(*tok));
    } catch (const Error& e) {
      std::fprintf(stderr, "ajet episode show: no chat format (%s); text-level merging is unavailable\n", e.what());
    }
  } else {
    std::fprintf(stderr, "ajet episode show: no tokenizer (pass --tokenizer DIR): the JSON has no text pieces\n");
  }

  tracking::MergeOptions options = cfg ? tracking::MergeOptions::from_config(*cfg, format.get()) : tracking::MergeOptions{};
  options.format = format.get();
  if (!args.compare_level.empty()) options.compare_level = tracking::compare_level_from_name(args.compare_level);

  std::vector<tracking::CallRecord> calls = tracking::calls_from_rows(rows, format.get());
  tracking::EpisodeInfo info{episode->uuid, episode->task_id, episode->reward.value_or(0.0)};
  tracking::MergedEpisode merged = tracking::merge_episode(info, calls, options);
  Json out = tracking::episode_json(tracking::EpisodeView::from_row(*episode), calls, merged, tok.get());
  const std::string text = out.dump(args.indent, ' ', false, Json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

const CommandRegistration kEpisode("episode", [](CLI::App& app) {
  auto* group = app.add_subcommand("episode", "Inspect recorded episodes");
  group->require_subcommand(1);
  auto args = std::make_shared<EpisodeShowArgs>();
  auto* show = group->add_subcommand(
      "show",
      "Print one episode from the store as JSON: calls (prompt and completion ids, logprobs, policy versions,\n"
      "message spans, how each assistant turn was rendered), merged samples (token ids, text pieces, loss mask,\n"
      "logprobs, policy versions, reward, weight) and merge diagnostics (compression, why each branch split).\n"
      "The shape is documented in docs/tracking.md.");
  show->add_option("--store", args->store, "SQLite store file of the swarm server")->required();
  show->add_option("uuid", args->uuid, "Episode uuid")->required();
  show->add_option("--tokenizer", args->tokenizer,
                   "Tokenizer directory for text pieces (default: model.path of the stored train config)");
  show->add_option("--compare-level", args->compare_level,
                   "Merge at 'token' or 'text' level (default: the stored config's timeline_compare_level, else token)")
      ->check(CLI::IsMember({"token", "text"}));
  show->add_option("--indent", args->indent, "JSON indentation (-1: one line)")->capture_default_str();
  show->callback([args] { run_episode_show(*args); });
});

}  // namespace
}  // namespace ajet::cli
