// TaskMix without processes: a cocktail step takes the schedule's counts from each source, tasks
// are distinct within a step, the cursors round-trip (what --resume restores), and a step that asks
// a source for more tasks than it has is refused by name. Also the per-task lines and curves.
#include "classic/task_mix.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "classic/metrics.h"
#include "common/error.h"

namespace ajet::classic {
namespace {

config::CocktailConfig linear_cocktail() {
  config::CocktailConfig c;
  c.tasks.resize(2);
  c.tasks[0].source.builtin.generator = "calc";
  c.tasks[0].source.builtin.num_training_tasks = 12;
  c.tasks[1].source.builtin.generator = "countdown";
  c.tasks[1].source.builtin.num_training_tasks = 10;
  c.schedule = {"linear", 1.0, 0.0, 4};  // calc's share 1, 0.75, 0.5, 0.25, 0 …
  return c;
}

TEST(TaskMix, ACocktailStepTakesTheScheduleCountsFromEachSource) {
  const config::CocktailConfig c = linear_cocktail();
  TaskMix mix(c, tasks::load_cocktail(c), 7, 4);
  ASSERT_TRUE(mix.is_cocktail());
  const std::vector<std::vector<int64_t>> expected = {{4, 0}, {3, 1}, {2, 2}, {1, 3}, {0, 4}};
  for (int64_t step = 1; step <= 5; ++step) {
    EXPECT_EQ(mix.counts(step), expected[size_t(step - 1)]) << "step " << step;
    std::set<std::string> ids;
    const std::vector<tasks::Task> batch = mix.draw(step, ids);
    ASSERT_EQ(batch.size(), 4u);
    for (size_t i = 0; i < batch.size(); ++i) {
      // Source order: the first task's tasks, then the second's.
      EXPECT_EQ(mix.source_of(batch[i].task_id),
                i < size_t(expected[size_t(step - 1)][0]) ? 0u : 1u);
    }
  }
  // calc drew 4+3+2+1 = 10 of its 12, countdown 0+1+2+3+4 = 10 of its 10.
  const Json cursors = mix.cursors();
  EXPECT_EQ(cursors["calc"], (Json{{"epoch", 0}, {"index", 10}}));
  EXPECT_EQ(cursors["countdown"], (Json{{"epoch", 0}, {"index", 10}}));
  EXPECT_EQ(mix.max_batches(3), 5);  // 2 a batch from each: calc has 12 / 2, countdown 10 / 2
}

// --resume from the task ledger: every position a draw read is recorded (last_draw); a mix put
// after the furthest of them (seek_after) continues with the same draws and cursors as the one
// that drew them, at every step boundary: inside an epoch and at its very end (countdown reads
// exactly its 10 tasks by step 5).
TEST(TaskMix, TheLedgersLastPositionsRestoreTheSameDraws) {
  const config::CocktailConfig c = linear_cocktail();
  TaskMix a(c, tasks::load_cocktail(c), 7, 4);
  std::unordered_map<std::string, int64_t> last;
  for (int64_t done = 1; done <= 9; ++done) {
    std::set<std::string> ids;
    a.draw(done, ids);
    for (const TaskMix::Drawn& d : a.last_draw()) last[a.name(d.source)] = d.seq;
    TaskMix b(c, tasks::load_cocktail(c), 7, 4);
    b.seek_after(last);
    EXPECT_EQ(b.cursors(), a.cursors()) << "after step " << done;
    TaskMix copy(c, tasks::load_cocktail(c), 7, 4);
    copy.seek(a.cursors());
    std::set<std::string> ib, ic;
    const std::vector<tasks::Task> next_b = b.draw(done + 1, ib), next_c = copy.draw(done + 1, ic);
    ASSERT_EQ(next_b.size(), next_c.size());
    for (size_t i = 0; i < next_b.size(); ++i)
      EXPECT_EQ(next_b[i].task_id, next_c[i].task_id) << "step " << done + 1 << " task " << i;
  }
}

TEST(TaskMix, CursorsRestoreTheSameDraws) {
  const config::CocktailConfig c = linear_cocktail();
  TaskMix a(c, tasks::load_cocktail(c), 7, 4);
  std::set<std::string> ids;
  a.draw(1, ids);
  ids.clear();
  a.draw(2, ids);
  TaskMix b(c, tasks::load_cocktail(c), 7, 4);
  b.seek(a.cursors());
  for (int64_t step = 3; step <= 8; ++step) {
    std::set<std::string> ia, ib;
    const std::vector<tasks::Task> da = a.draw(step, ia), db = b.draw(step, ib);
    ASSERT_EQ(da.size(), db.size());
    for (size_t i = 0; i < da.size(); ++i) {
      EXPECT_EQ(da[i].task_id, db[i].task_id) << "step " << step;
    }
  }
  try {
    b.seek(Json{{"calc", {{"epoch", 0}, {"index", 1}}}});
    ADD_FAILURE() << "a cursor without countdown was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no task cursor {epoch, index} for 'countdown'"),
              std::string::npos)
        << e.what();
  }
}

TEST(TaskMix, TasksAreDistinctWithinAStepAcrossBatches) {
  config::CocktailConfig c = linear_cocktail();
  c.schedule = {"constant", 0.5, std::nullopt, std::nullopt};
  TaskMix mix(c, tasks::load_cocktail(c), 3, 6);
  std::set<std::string> ids;
  ASSERT_EQ(mix.max_batches(1), 3);  // 3 a batch from each: countdown has 10 / 3
  for (int64_t b = 0; b < mix.max_batches(1); ++b) mix.draw(1, ids);
  EXPECT_EQ(ids.size(), 18u);
}

TEST(TaskMix, AStepThatAsksASourceForMoreThanItHasIsRefused) {
  config::CocktailConfig c = linear_cocktail();
  c.schedule = {"linear", 0.0, 1.0, 2};  // countdown gets every task of step 1, calc of step 3 on
  TaskMix mix(c, tasks::load_cocktail(c), 7, 14);
  try {
    mix.check_fits(5);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "step 1 takes 14 tasks from task 'countdown', which has only 10"),
              std::string::npos)
        << e.what();
  }
}

TEST(TaskMix, OneSourceDrawsTheWholeBatchFromItsStream) {
  config::TaskSourceConfig reader = config::builtin_task_source();
  reader.builtin.num_training_tasks = 10;
  TaskMix mix(tasks::load_tasks(reader).training, true, 42, 4);
  EXPECT_FALSE(mix.is_cocktail());
  EXPECT_EQ(mix.counts(1), (std::vector<int64_t>{4}));
  // The same order as a TaskStream with the same seed (what runs did before cocktails).
  tasks::TaskStream stream(tasks::load_tasks(reader).training, true, 42);
  std::set<std::string> ids;
  for (const tasks::Task& t : mix.draw(1, ids)) EXPECT_EQ(t.task_id, stream.next().task_id);
}

}  // namespace
}  // namespace ajet::classic

namespace ajet::classic {
namespace {

// The per-task lines and curves read the "cocktail" objects of the records; a task without episodes
// in a step (null reward) is shown without a reward and left out of its curve.
TEST(CocktailLines, StepValidationSummaryAndCurve) {
  const Json step1 = Json::parse(R"({"kind": "train", "step": 1, "cocktail": {
      "calc": {"share": 1.0, "tasks": 4, "reward_mean": 0.5, "success_rate": 0.5},
      "lake": {"share": 0.0, "tasks": 0, "reward_mean": null, "success_rate": null}}})");
  EXPECT_EQ(cocktail_step_line(step1),
            "  tasks: calc 4 (100%) reward 0.500 success 50.0% | lake 0 (0%)");
  const Json val0 = Json::parse(R"({"kind": "validation", "step": 0, "validation": {}, "cocktail": {
      "calc": {"greedy_success": 0.5, "k": 4, "pass_at_k": 0.75, "sampled_success": 0.25, "tasks": 100},
      "lake": {"greedy_success": 0.1, "k": 4, "pass_at_k": 0.2, "sampled_success": 0.05, "tasks": 50}}})");
  Json val2 = val0;
  val2["step"] = 2;
  val2["cocktail"]["lake"]["sampled_success"] = 0.15;
  EXPECT_EQ(cocktail_validation_line(val0),
            "  val per task: calc greedy 50.0% pass@4 75.0% sampled 25.0% (100) | lake greedy "
            "10.0% pass@4 20.0% "
            "sampled 5.0% (50)");
  const std::vector<std::string> summary = cocktail_learning_summary({val0, step1, val2});
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[1],
            "held-out success of lake, step 0 -> 2: sampled 5.0% -> 15.0% (+10.0), greedy 10.0% -> "
            "10.0% (+0.0), pass@4 20.0% -> 20.0% (+0.0)");
}

}  // namespace
}  // namespace ajet::classic
