// Where each step's tasks come from: one task stream (ajet.task_reader), or one stream per task of
// a cocktail (ajet.task_reader.cocktail) from which a step takes the counts its schedule gives. The
// streams' positions are the run's task cursor: recorded per step in metrics.jsonl and restored by
// --resume. Deterministic: the same config and seed draw the same tasks in the same order.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/json.h"
#include "config/config.h"
#include "tasks/cocktail.h"
#include "tasks/reader.h"

namespace ajet::classic {

class TaskMix {
 public:
  // One source: every batch is batch_size tasks of `training`, seeded by shuffle_seed (as before
  // cocktails).
  TaskMix(std::vector<tasks::Task> training, bool shuffle, uint64_t shuffle_seed,
          int64_t batch_size);
  // A cocktail: source i's stream is seeded by (shuffle_seed, its own shuffle_seed, its name), and
  // a step's batch takes split_by_shares(cocktail_shares(step), batch_size) tasks from the sources.
  TaskMix(const config::CocktailConfig& cocktail, const std::vector<tasks::CocktailSource>& sources,
          uint64_t shuffle_seed, int64_t batch_size);

  bool is_cocktail() const { return cocktail_; }
  size_t sources() const { return streams_.size(); }
  const std::string& name(size_t source) const { return names_.at(source); }
  // The source a training task came from (task ids are distinct across sources).
  size_t source_of(const std::string& task_id) const;

  std::vector<double> shares(int64_t step) const;
  std::vector<int64_t> counts(int64_t step) const;  // sums to batch_size
  // The most batches step `step` can draw before a source runs out of distinct tasks (>= 1).
  int64_t max_batches(int64_t step) const;
  // Throws Error(kInvalidArgument) naming the source when some step of 1..last_step would ask a
  // source for more tasks than it has.
  void check_fits(int64_t last_step) const;

  // One batch of step `step`: each source's count of tasks not yet in `ids` (the step's tasks so
  // far; a task drawn twice in a step would hold two groups' episodes and count once), in source
  // order.
  std::vector<tasks::Task> draw(int64_t step, std::set<std::string>& ids);

  // Every stream position the last draw() read, in order (the task ledger records them): its
  // source, its place in the stream (epoch * size + index), the task, and whether the batch took
  // it (false: the step already held it).
  struct Drawn {
    size_t source = 0;
    int64_t seq = 0;
    std::string task_id;
    bool taken = true;
  };
  const std::vector<Drawn>& last_draw() const { return last_draw_; }
  // --resume from the task ledger: each source continues after the position `last_seq` names for
  // it (absent: from the stream's start).
  void seek_after(const std::unordered_map<std::string, int64_t>& last_seq);

  int64_t epoch() const { return streams_.front().epoch(); }  // the first source's
  // {"<name>": {"epoch": E, "index": I}} per source, and back (--resume); seek names a bad entry.
  Json cursors() const;
  void seek(const Json& cursors);

 private:
  bool cocktail_ = false;
  config::CocktailConfig mix_;
  int64_t batch_size_;
  std::vector<std::string> names_;
  std::vector<tasks::TaskStream> streams_;
  std::unordered_map<std::string, size_t> source_of_;
  std::vector<Drawn> last_draw_;
};

// One line for the start of a run: "cocktail of calc (2000 training / 100 validation tasks) and
// frozenlake (…); calc's share cos 0.75 -> 0.25 by step 11, per step: 12+4 … 4+12 of 16 tasks".
std::string cocktail_description(const TaskMix& mix, const config::CocktailConfig& cocktail,
                                 const std::vector<tasks::CocktailSource>& sources,
                                 int64_t total_steps);

}  // namespace ajet::classic
