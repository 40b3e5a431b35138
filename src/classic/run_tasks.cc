#include "classic/run_tasks.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <unordered_map>

#include "common/error.h"
#include "tasks/reader.h"

namespace ajet::classic {

RunTasks RunTasks::load(const config::Config& c, const std::filesystem::path& config_dir,
                        const std::string& conf) {
  const config::TaskReaderConfig& reader = c.task_reader;
  RunTasks t;
  if (reader.cocktail.tasks.empty()) {
    t.sources.push_back(tasks::CocktailSource{"tasks", tasks::load_tasks(reader, config_dir)});
  } else {
    t.sources = tasks::load_cocktail(reader.cocktail, config_dir);
  }
  for (const tasks::CocktailSource& source : t.sources) {
    t.training += source.sets.training.size();
    t.validation += source.sets.validation.size();
  }
  if (t.training == 0 && !c.trainer_common.val_only) {
    invalid_argument(conf + ": ajet.task_reader yields no training tasks (after filters)");
  }
  if (!c.trainer_common.val_only && int64_t(t.training) < c.data.train_batch_size) {
    invalid_argument(fmt::format(
        "{}: ajet.data.train_batch_size ({}) is larger than the number of training tasks ({})",
        conf, c.data.train_batch_size, t.training));
  }
  const uint64_t seed = uint64_t(reader.shuffle_seed);
  t.mix =
      reader.cocktail.tasks.empty()
          ? std::make_unique<TaskMix>(t.sources.front().sets.training, reader.shuffle, seed,
                                      c.data.train_batch_size)
          : std::make_unique<TaskMix>(reader.cocktail, t.sources, seed, c.data.train_batch_size);
  return t;
}

int64_t RunTasks::total_steps(const config::Config& c) const {
  if (c.trainer_common.val_only) return 0;
  const int64_t batch = std::max<int64_t>(1, c.data.train_batch_size);
  const int64_t per_epoch = (int64_t(training) + batch - 1) / batch;
  return c.trainer_common.total_training_steps.value_or(c.trainer_common.total_epochs * per_epoch);
}

Json RunTasks::ledger_draws() const {
  Json draws = Json::array();
  for (const TaskMix::Drawn& d : mix->last_draw()) {
    Json row{{"task_id", d.task_id}, {"source", mix->name(d.source)}, {"seq", d.seq}};
    if (!d.taken) row["repeat_in_step"] = true;
    draws.push_back(std::move(row));
  }
  return draws;
}

std::string RunTasks::restore_cursor(const std::vector<Json>& records, int64_t done,
                                     const Json& ledger_rows) {
  std::unordered_map<std::string, int64_t> last_seq;
  bool any = false;
  for (const Json& row : ledger_rows) {
    if (row.value("seq", int64_t(-1)) < 0) continue;
    any = true;
    if (row.value("drawn_step", int64_t(0)) > done) continue;
    const std::string source = row.value("source", "");
    const int64_t seq = row["seq"].get<int64_t>();
    if (auto it = last_seq.find(source); it == last_seq.end() || it->second < seq)
      last_seq[source] = seq;
  }
  if (any) {
    mix->seek_after(last_seq);
    return "the task ledger";
  }
  std::map<int64_t, const Json*> train_records;
  for (const Json& r : records) {
    if (r.value("kind", "") == "train") train_records[r.value("step", int64_t(0))] = &r;
  }
  if (const auto it = train_records.find(done);
      mix->is_cocktail() && it != train_records.end() && it->second->contains("cocktail")) {
    Json cursors = Json::object();
    for (const auto& [name, task] : (*it->second)["cocktail"].items())
      cursors[name] = task.value("cursor", Json());
    mix->seek(cursors);
    return "metrics.jsonl's cursors";
  }
  for (int64_t s = 1; s <= done; ++s) {
    const auto it = train_records.find(s);
    const int64_t batches =
        it == train_records.end()
            ? 1
            : it->second->value("sampling", Json::object()).value("gen_batches", int64_t(1));
    std::set<std::string> ids;
    for (int64_t b = 0; b < batches; ++b) mix->draw(s, ids);
  }
  return "the steps' draws replayed";
}

}  // namespace ajet::classic
