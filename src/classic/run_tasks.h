// A classic run's tasks: ajet.task_reader's (one source named "tasks") or each task of a cocktail,
// and the mix that draws every step's batch from their training streams.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "classic/task_mix.h"
#include "common/json.h"
#include "config/config.h"
#include "tasks/cocktail.h"

namespace ajet::classic {

struct RunTasks {
  std::vector<tasks::CocktailSource> sources;
  size_t training = 0, validation = 0;  // tasks over all sources
  std::unique_ptr<TaskMix> mix;

  // Throws Error(kInvalidArgument) naming `conf` when there are no training tasks or fewer than a
  // batch.
  static RunTasks load(const config::Config& c, const std::filesystem::path& config_dir,
                       const std::string& conf);
  // The steps of the run: total_training_steps, or total_epochs over the training tasks (0:
  // val_only).
  int64_t total_steps(const config::Config& c) const;
  // --resume: the task streams continue where step `done` left them. The task ledger's rows (GET
  // /ledger?rows=1) say it exactly: each stream continues after the furthest position drawn at or
  // before step `done`. A run whose front holds no ledger rows (an older front): a cocktail's
  // record of that step holds each source's cursor; otherwise the steps' task batches are drawn
  // again (each step drew the batches it recorded: more than one with dynamic sampling, one when
  // its record is missing). Returns what it restored from, for the resume line.
  std::string restore_cursor(const std::vector<Json>& records, int64_t done,
                             const Json& ledger_rows);
  // The task ledger's draw rows of `mix`'s last draw at `step` (POST /ledger/draw's "draws").
  Json ledger_draws() const;
  bool cocktail() const { return mix->is_cocktail(); }
};

}  // namespace ajet::classic
