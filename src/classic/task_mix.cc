#include "classic/task_mix.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "tasks/rng.h"

namespace ajet::classic {

TaskMix::TaskMix(std::vector<tasks::Task> training, bool shuffle, uint64_t shuffle_seed,
                 int64_t batch_size)
    : batch_size_(batch_size) {
  names_.push_back("tasks");
  streams_.emplace_back(std::move(training), shuffle, shuffle_seed);
  for (const tasks::Task& t : streams_.back().tasks()) source_of_.emplace(t.task_id, 0);
}

TaskMix::TaskMix(const config::CocktailConfig& cocktail,
                 const std::vector<tasks::CocktailSource>& sources, uint64_t shuffle_seed,
                 int64_t batch_size)
    : cocktail_(true), mix_(cocktail), batch_size_(batch_size) {
  if (sources.size() != cocktail.tasks.size()) {
    invalid_argument("TaskMix: one loaded source per cocktail task");
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    const config::TaskSourceConfig& reader = cocktail.tasks[i].source;
    const uint64_t seed =
        tasks::mix_seed(tasks::mix_seed(shuffle_seed, uint64_t(reader.shuffle_seed)),
                        tasks::stable_hash(sources[i].name));
    names_.push_back(sources[i].name);
    streams_.emplace_back(sources[i].sets.training, reader.shuffle, seed);
    for (const tasks::Task& t : sources[i].sets.training) source_of_.emplace(t.task_id, i);
  }
}

size_t TaskMix::source_of(const std::string& task_id) const {
  auto it = source_of_.find(task_id);
  if (it == source_of_.end()) invalid_argument("TaskMix: task '" + task_id + "' is in no source");
  return it->second;
}

std::vector<double> TaskMix::shares(int64_t step) const {
  return cocktail_ ? tasks::cocktail_shares(mix_, step) : std::vector<double>{1.0};
}

std::vector<int64_t> TaskMix::counts(int64_t step) const {
  return cocktail_ ? tasks::split_by_shares(shares(step), batch_size_)
                   : std::vector<int64_t>{batch_size_};
}

int64_t TaskMix::max_batches(int64_t step) const {
  const std::vector<int64_t> n = counts(step);
  int64_t most = -1;
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] <= 0) continue;
    const int64_t fit = int64_t(streams_[i].size()) / n[i];
    most = most < 0 ? fit : std::min(most, fit);
  }
  return std::max<int64_t>(1, most);
}

void TaskMix::check_fits(int64_t last_step) const {
  for (int64_t step = 1; step <= last_step; ++step) {
    const std::vector<int64_t> n = counts(step);
    for (size_t i = 0; i < n.size(); ++i) {
      if (n[i] <= int64_t(streams_[i].size())) continue;
      const std::string what = cocktail_ ? "task '" + names_[i] + "'" : "the task reader";
      invalid_argument(fmt::format(
          "ajet.data.train_batch_size: step {} takes {} tasks from {}, which has only {} "
          "training tasks",
          step, n[i], what, streams_[i].size()));
    }
    if (!cocktail_ || mix_.schedule.type == "fixed" || mix_.schedule.type == "constant") {
      return;  // every step alike
    }
  }
}

std::vector<tasks::Task> TaskMix::draw(int64_t step, std::set<std::string>& ids) {
  std::vector<tasks::Task> batch;
  last_draw_.clear();
  const std::vector<int64_t> n = counts(step);
  for (size_t i = 0; i < n.size(); ++i) {
    tasks::TaskStream& stream = streams_[i];
    // Two passes over the stream always find the source's distinct tasks; fewer left means the step
    // asked for more than the source has (check_fits and max_batches prevent it).
    const size_t tries = 2 * stream.size() + size_t(n[i]);
    int64_t taken = 0;
    for (size_t t = 0; taken < n[i]; ++t) {
      if (t >= tries) {
        fail(ErrorCode::kFailedPrecondition,
             fmt::format("step {}: {} has no {} more distinct training tasks", step, names_[i],
                         n[i] - taken));
      }
      const tasks::TaskStream::Position at = stream.position();
      const tasks::Task& task = stream.next();
      const bool fresh = ids.insert(task.task_id).second;
      last_draw_.push_back(
          Drawn{i, at.epoch * int64_t(stream.size()) + int64_t(at.index), task.task_id, fresh});
      if (fresh) {
        batch.push_back(task);
        taken += 1;
      }
    }
  }
  return batch;
}

Json TaskMix::cursors() const {
  Json out = Json::object();
  for (size_t i = 0; i < streams_.size(); ++i) {
    const tasks::TaskStream::Position p = streams_[i].position();
    out[names_[i]] = Json{{"epoch", p.epoch}, {"index", p.index}};
  }
  return out;
}

void TaskMix::seek(const Json& cursors) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    const Json* c =
        cursors.is_object() && cursors.contains(names_[i]) ? &cursors[names_[i]] : nullptr;
    if (c == nullptr || !c->is_object() || !c->value("epoch", Json()).is_number_integer() ||
        !c->value("index", Json()).is_number_integer()) {
      invalid_argument("--resume: metrics.jsonl has no task cursor {epoch, index} for '" +
                       names_[i] + "'");
    }
    const int64_t index = (*c)["index"].get<int64_t>();
    if (index < 0) {
      invalid_argument("--resume: task cursor of '" + names_[i] + "' has a negative index");
    }
    streams_[i].seek({(*c)["epoch"].get<int64_t>(), size_t(index)});
  }
}

void TaskMix::seek_after(const std::unordered_map<std::string, int64_t>& last_seq) {
  for (size_t i = 0; i < streams_.size(); ++i) {
    const auto it = last_seq.find(names_[i]);
    const int64_t next = it == last_seq.end() ? 0 : it->second + 1;
    const int64_t size = int64_t(streams_[i].size());
    if (next < 0 || size == 0) {
      invalid_argument("--resume: the task ledger names position " + std::to_string(next - 1) +
                       " of '" + names_[i] + "'");
    }
    // Where the stream stands after reading position next - 1: {epoch, size} at an epoch's end,
    // as next() leaves it (the step records' cursors then read the same as an uninterrupted run's).
    if (next == 0) {
      streams_[i].seek({0, 0});
    } else {
      streams_[i].seek({(next - 1) / size, size_t((next - 1) % size) + 1});
    }
  }
}

namespace {
std::string counts_text(const std::vector<int64_t>& counts) {
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) out += '+';
    out += std::to_string(counts[i]);
  }
  return out;
}
}  // namespace

std::string cocktail_description(const TaskMix& mix, const config::CocktailConfig& cocktail,
                                 const std::vector<tasks::CocktailSource>& sources,
                                 int64_t total_steps) {
  std::string line = "cocktail of";
  for (size_t i = 0; i < sources.size(); ++i) {
    line += fmt::format("{}{} ({} training / {} validation tasks)", i == 0 ? " " : ", ",
                        sources[i].name, sources[i].sets.training.size(),
                        sources[i].sets.validation.size());
  }
  const config::CocktailScheduleConfig& s = cocktail.schedule;
  const int64_t last = std::max<int64_t>(1, total_steps);
  if (s.type == "fixed" || s.type == "constant") {
    line += fmt::format("; {} share {} ({}), tasks per step {}", sources.front().name,
                        mix.shares(1).front(), s.type, counts_text(mix.counts(1)));
  } else {
    line +=
        fmt::format("; {} share {} {} -> {} by step {}, tasks per step {} at step 1, {} at step {}",
                    sources.front().name, s.type, s.start.value_or(0), s.end.value_or(0),
                    s.end_step.value_or(1) + 1, counts_text(mix.counts(1)),
                    counts_text(mix.counts(last)), last);
  }
  return line;
}

}  // namespace ajet::classic
