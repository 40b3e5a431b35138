// Where the launcher's tasks come from: JSONL files (one task per line), the built-in generators,
// or nothing (swarm mode's random_dummy), then filters, the train/validation split and a seeded
// shuffle that repeats per epoch. Errors name the file, the line and the field; nothing here
// depends on the model or the network.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "tasks/task.h"

namespace ajet::tasks {

// Parses JSONL text: one task object per non-blank line. `source` names the text in errors
// ("tasks.jsonl:12: field 'metadata' must be an object, got string"). Duplicate task ids are errors
// naming both lines.
std::vector<Task> parse_task_jsonl(std::string_view text, std::string_view source);
std::vector<Task> read_task_jsonl(const std::filesystem::path& path);
// One compact JSON object per line, each ending in "\n".
std::string tasks_to_jsonl(const std::vector<Task>& tasks);

// A metadata predicate: a mapping from metadata key to a condition. A scalar means equality, an
// array means "one of", an object {"min": a, "max": b} (either optional) means a numeric range.
// A task without the key does not match. Throws Error(kInvalidArgument) for a malformed predicate.
bool metadata_matches(const Task& task, const OrderedJson& predicate);

// Keeps tasks whose id is in include_task_ids (when non-empty), not in exclude_task_ids, and whose
// metadata matches filters.metadata. Order is kept.
std::vector<Task> filter_tasks(std::vector<Task> tasks, const config::TaskFilterConfig& filters);

struct TaskSets {
  std::vector<Task> training;
  std::vector<Task> validation;
};

// Builds both sets from ajet.task_reader (or one task of a cocktail, tasks/cocktail.h):
//   jsonl_dataset_file  reads training.file_path (relative paths resolved against base_dir) and
//                       validation.file_path; without a validation file and with
//                       validation_fraction > 0, tasks whose stable_hash(shuffle_seed, task_id)
//                       falls in that share are moved to validation.
//   builtin             generates builtin.num_training_tasks / num_validation_tasks of
//                       builtin.generator with builtin.seed and builtin.params (disjoint splits).
//   random_dummy        no tasks (swarm mode: the clients bring their own).
// Then filters, then max_training_tasks / max_validation_tasks keep the first N. The training set
// is not shuffled here: TaskStream does that per epoch.
TaskSets load_tasks(const config::TaskSourceConfig& reader,
                    const std::filesystem::path& base_dir = {});

// The order in which epoch `epoch` visits n tasks: a permutation seeded by (seed, epoch), or the
// identity when shuffle is off.
std::vector<size_t> epoch_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle = true);

// Hands out training tasks batch after batch across epochs, each epoch a fresh seeded permutation.
// Its position is two integers, so a checkpoint can save and restore it.
class TaskStream {
 public:
  TaskStream(std::vector<Task> tasks, bool shuffle, uint64_t seed);

  // Throws Error(kFailedPrecondition) when there are no tasks.
  const Task& next();
  // The next n tasks (crossing into the next epoch when needed).
  std::vector<Task> next_batch(size_t n);

  struct Position {
    int64_t epoch = 0;
    size_t index = 0;  // next task within the epoch
  };
  Position position() const { return {epoch_, index_}; }
  void seek(Position position);
  int64_t epoch() const { return epoch_; }
  size_t size() const { return tasks_.size(); }
  const std::vector<Task>& tasks() const { return tasks_; }

 private:
  std::vector<Task> tasks_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  size_t index_ = 0;
  std::vector<size_t> order_;
};

}  // namespace ajet::tasks
