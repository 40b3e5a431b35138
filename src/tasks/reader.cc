#include "tasks/reader.h"

#include <map>
#include <numeric>
#include <unordered_set>

#include "common/error.h"
#include "common/json.h"
#include "common/fs.h"
#include "tasks/builtin.h"
#include "tasks/rng.h"

namespace ajet::tasks {

std::vector<Task> parse_task_jsonl(std::string_view text, std::string_view source) {
  std::vector<Task> out;
  std::map<std::string, size_t> first_line;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    bool blank = true;
    for (char c : line) blank = blank && (c == ' ' || c == '\t');
    if (blank) {
      if (end == text.size()) break;
      continue;
    }
    const std::string where = std::string(source) + ":" + std::to_string(line_no);
    const OrderedJson json = parse_ordered_json(line, where);
    Task task = task_from_json(json, where);
    auto [it, inserted] = first_line.emplace(task.task_id, line_no);
    if (!inserted) {
      invalid_argument(where + ": field 'task_id': duplicate id '" + task.task_id +
                       "' (first at line " + std::to_string(it->second) + ")");
    }
    out.push_back(std::move(task));
    if (end == text.size()) break;
  }
  return out;
}

std::vector<Task> read_task_jsonl(const std::filesystem::path& path) {
  return parse_task_jsonl(read_file(path), path.string());
}

std::string tasks_to_jsonl(const std::vector<Task>& tasks) {
  std::string out;
  for (const Task& t : tasks) {
    out += task_to_json(t).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    out += '\n';
  }
  return out;
}

namespace {

bool condition_holds(const OrderedJson& value, const OrderedJson& cond, const std::string& key) {
  if (cond.is_object()) {
    for (const auto& [k, v] : cond.items()) {
      if (k != "min" && k != "max") {
        invalid_argument("metadata filter '" + key + "': a range takes only min and max, got '" +
                         k + "'");
      }
      if (!v.is_number())
        invalid_argument("metadata filter '" + key + "." + k + "' must be a number");
    }
    if (!value.is_number()) return false;
    const double x = value.get<double>();
    if (cond.contains("min") && x < cond["min"].get<double>()) return false;
    if (cond.contains("max") && x > cond["max"].get<double>()) return false;
    return true;
  }
  if (cond.is_array()) {
    for (const OrderedJson& c : cond) {
      if (c.is_object() || c.is_array())
        invalid_argument("metadata filter '" + key + "': a list holds plain values");
      if (condition_holds(value, c, key)) return true;
    }
    return false;
  }
  // Scalars: numbers compare by value (1 == 1.0), everything else exactly.
  if (value.is_number() && cond.is_number()) return value.get<double>() == cond.get<double>();
  return value == cond;
}

}  // namespace

bool metadata_matches(const Task& task, const OrderedJson& predicate) {
  if (predicate.is_null()) return true;
  if (!predicate.is_object())
    invalid_argument("metadata filter must be a mapping of metadata key to condition");
  for (const auto& [key, cond] : predicate.items()) {
    auto it = task.metadata.find(key);
    if (it == task.metadata.end()) return false;
    if (!condition_holds(*it, cond, key)) return false;
  }
  return true;
}

std::vector<Task> filter_tasks(std::vector<Task> tasks, const config::TaskFilterConfig& filters) {
  const std::unordered_set<std::string> include(filters.include_task_ids.begin(),
                                                filters.include_task_ids.end());
  const std::unordered_set<std::string> exclude(filters.exclude_task_ids.begin(),
                                                filters.exclude_task_ids.end());
  const OrderedJson predicate(filters.metadata);
  std::vector<Task> out;
  for (Task& t : tasks) {
    if (!include.empty() && !include.contains(t.task_id)) continue;
    if (exclude.contains(t.task_id)) continue;
    if (!metadata_matches(t, predicate)) continue;
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

std::filesystem::path resolve(const std::string& path, const std::filesystem::path& base_dir) {
  std::filesystem::path p(path);
  if (p.is_relative() && !base_dir.empty()) return base_dir / p;
  return p;
}

void keep_first(std::vector<Task>& tasks, int64_t max) {
  if (max >= 0 && tasks.size() > static_cast<size_t>(max)) tasks.resize(static_cast<size_t>(max));
}

}  // namespace

TaskSets load_tasks(const config::TaskSourceConfig& reader, const std::filesystem::path& base_dir) {
  TaskSets sets;
  if (reader.type == "jsonl_dataset_file") {
    const std::string& train_path = reader.jsonl_dataset_file.training_file_path;
    if (train_path.empty()) {
      invalid_argument(
          "ajet.task_reader.jsonl_dataset_file.training.file_path is empty (type "
          "jsonl_dataset_file)");
    }
    std::vector<Task> all = read_task_jsonl(resolve(train_path, base_dir));
    const std::string& val_path = reader.jsonl_dataset_file.validation_file_path;
    if (!val_path.empty()) {
      sets.training = std::move(all);
      sets.validation = read_task_jsonl(resolve(val_path, base_dir));
    } else {
      for (Task& t : all) {
        const uint64_t h =
            mix_seed(static_cast<uint64_t>(reader.shuffle_seed), stable_hash(t.task_id));
        const bool held_out = static_cast<double>(h >> 11) * 0x1.0p-53 < reader.validation_fraction;
        (held_out ? sets.validation : sets.training).push_back(std::move(t));
      }
    }
  } else if (reader.type == "builtin") {
    const BuiltinTask& kind = builtin_task(reader.builtin.generator);
    GenerateOptions options;
    options.seed = static_cast<uint64_t>(reader.builtin.seed);
    options.params = OrderedJson(reader.builtin.params);
    options.split = Split::kTrain;
    options.count = reader.builtin.num_training_tasks;
    sets.training = kind.generate(options);
    options.split = Split::kValidation;
    options.count = reader.builtin.num_validation_tasks;
    sets.validation = kind.generate(options);
  } else if (reader.type == "random_dummy") {
    return sets;
  } else {
    invalid_argument(
        "ajet.task_reader.type must be jsonl_dataset_file, builtin or random_dummy, got '" +
        reader.type + "'");
  }
  sets.training = filter_tasks(std::move(sets.training), reader.filters);
  sets.validation = filter_tasks(std::move(sets.validation), reader.filters);
  keep_first(sets.training, reader.max_training_tasks);
  keep_first(sets.validation, reader.max_validation_tasks);
  return sets;
}

std::vector<size_t> epoch_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle) {
    Rng rng(mix_seed(seed, static_cast<uint64_t>(epoch)));
    rng.shuffle(order);
  }
  return order;
}

TaskStream::TaskStream(std::vector<Task> tasks, bool shuffle, uint64_t seed)
    : tasks_(std::move(tasks)), shuffle_(shuffle), seed_(seed) {
  order_ = epoch_order(tasks_.size(), seed_, epoch_, shuffle_);
}

const Task& TaskStream::next() {
  if (tasks_.empty())
    fail(ErrorCode::kFailedPrecondition, "task stream is empty: no training tasks");
  if (index_ >= tasks_.size()) {
    ++epoch_;
    index_ = 0;
    order_ = epoch_order(tasks_.size(), seed_, epoch_, shuffle_);
  }
  return tasks_[order_[index_++]];
}

std::vector<Task> TaskStream::next_batch(size_t n) {
  std::vector<Task> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(next());
  return out;
}

void TaskStream::seek(Position position) {
  if (position.epoch < 0 || position.index > tasks_.size()) {
    invalid_argument("task stream position out of range (epoch " + std::to_string(position.epoch) +
                     ", index " + std::to_string(position.index) + " of " +
                     std::to_string(tasks_.size()) + ")");
  }
  epoch_ = position.epoch;
  index_ = position.index;
  order_ = epoch_order(tasks_.size(), seed_, epoch_, shuffle_);
}

}  // namespace ajet::tasks
