// The task reader: JSONL files (errors name file:line and the field), the built-in generator type,
// splits, filters, limits, and the seeded per-epoch shuffle.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "support/scratch_dir.h"
#include "tasks/builtin.h"
#include "tasks/reader.h"

namespace ajet::tasks {
namespace {

namespace fs = std::filesystem;

using TempDir = ajet::test_support::ScratchDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TaskJsonl, ReadsTasksAndSkipsBlankLines) {
  const std::string text =
      "{\"task_id\": \"a\", \"main_query\": \"2+2=?\", \"metadata\": {\"answer\": 4}}\n"
      "\n"
      "{\"task_id\": 7, \"init_messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": "
      "\"user\", \"content\": \"u\"}], "
      "\"env_type\": \"calc\"}\r\n";
  std::vector<Task> tasks = parse_task_jsonl(text, "t.jsonl");
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].task_id, "a");
  EXPECT_EQ(tasks[0].metadata["answer"], 4);
  EXPECT_EQ(tasks[1].task_id, "7");
  EXPECT_EQ(tasks[1].env_type, "calc");
  EXPECT_EQ(initial_messages(tasks[1]).size(), 2u);
  EXPECT_EQ(initial_messages(tasks[0], "sys").size(), 2u);
  // Written back and read again: the same tasks.
  std::vector<Task> again = parse_task_jsonl(tasks_to_jsonl(tasks), "again");
  for (size_t i = 0; i < tasks.size(); ++i)
    EXPECT_EQ(task_to_json(again[i]), task_to_json(tasks[i]));
}

TEST(TaskJsonl, ErrorsNameFileLineAndField) {
  TempDir dir;
  const fs::path file = dir.path() / "bad.jsonl";
  struct Case {
    std::string line;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"{\"main_query\": \"x\"}", "bad.jsonl:2: missing required field 'task_id'"},
      {"{\"task_id\": \"\", \"main_query\": \"x\"}",
       "bad.jsonl:2: field 'task_id' must not be empty"},
      {"{\"task_id\": [1], \"main_query\": \"x\"}",
       "bad.jsonl:2: field 'task_id' must be a string or an integer, got array"},
      {"{\"task_id\": \"b\", \"main_query\": 5}",
       "bad.jsonl:2: field 'main_query' must be a string, got integer"},
      {"{\"task_id\": \"b\", \"main_query\": \"x\", \"metadata\": \"m\"}",
       "bad.jsonl:2: field 'metadata' must be an object, got string"},
      {"{\"task_id\": \"b\", \"init_messages\": \"hi\"}",
       "bad.jsonl:2: field 'init_messages' must be an array of messages, got string"},
      {"{\"task_id\": \"b\", \"init_messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}",
       "bad.jsonl:2: field init_messages[0].role 'robot' is not one of"},
      {"{\"task_id\": \"b\"}", "bad.jsonl:2: a task needs 'main_query' or 'init_messages'"},
      {"{\"task_id\": \"a\", \"main_query\": \"x\"}",
       "bad.jsonl:2: field 'task_id': duplicate id 'a' (first at line 1)"},
      {"{\"task_id\": \"b\", \"main_query\": \"x\"", "bad.jsonl:2: invalid JSON"},
      {"[1, 2]", "bad.jsonl:2: a task must be a JSON object, got array"},
      {"{\"task_id\": \"b\", \"main_query\": \"x\", \"metadata\": {\"tools\": [{\"type\": "
       "\"function\"}]}}",
       "bad.jsonl:2: field metadata.tools[0].function is required"},
  };
  for (const Case& c : cases) {
    write_file_atomic(file, "{\"task_id\": \"a\", \"main_query\": \"ok\"}\n" + c.line + "\n");
    const std::string e = error_of([&] { read_task_jsonl(file); });
    EXPECT_NE(e.find(c.error), std::string::npos) << "got: " << e << "\nwant: " << c.error;
    EXPECT_EQ(e.find((dir.path() / "bad.jsonl").string()), 0u) << e;  // starts with the path
  }
  EXPECT_NE(error_of([&] { read_task_jsonl(dir.path() / "missing.jsonl"); }).find("missing.jsonl"),
            std::string::npos);
}

TEST(MetadataFilter, EqualityListsAndRanges) {
  Task t;
  t.task_id = "x";
  t.metadata = {{"difficulty", 2}, {"style", "story"}, {"size", 4.0}};
  EXPECT_TRUE(metadata_matches(t, OrderedJson::object()));
  EXPECT_TRUE(metadata_matches(t, {{"difficulty", 2}}));
  EXPECT_TRUE(metadata_matches(t, {{"size", 4}}));  // 4 == 4.0
  EXPECT_FALSE(metadata_matches(t, {{"difficulty", 3}}));
  EXPECT_TRUE(metadata_matches(t, {{"style", {"verbal", "story"}}}));
  EXPECT_FALSE(metadata_matches(t, {{"style", {"verbal"}}}));
  EXPECT_TRUE(metadata_matches(t, {{"difficulty", {{"min", 1}, {"max", 2}}}}));
  EXPECT_FALSE(metadata_matches(t, {{"difficulty", {{"max", 1}}}}));
  EXPECT_FALSE(metadata_matches(t, {{"missing", 1}}));
  EXPECT_THROW(metadata_matches(t, {{"difficulty", {{"below", 1}}}}), Error);
  EXPECT_THROW(metadata_matches(t, OrderedJson::array()), Error);
}

config::TaskReaderConfig builtin_reader(const std::string& generator, int64_t train, int64_t val) {
  config::TaskReaderConfig r;
  r.type = "builtin";
  r.builtin.generator = generator;
  r.builtin.num_training_tasks = train;
  r.builtin.num_validation_tasks = val;
  r.builtin.seed = 3;
  return r;
}

TEST(LoadTasks, BuiltinGeneratorWithFiltersAndLimits) {
  config::TaskReaderConfig r = builtin_reader("calc", 300, 50);
  TaskSets sets = load_tasks(r);
  EXPECT_EQ(sets.training.size(), 300u);
  EXPECT_EQ(sets.validation.size(), 50u);
  std::set<std::string> train_ids;
  for (const Task& t : sets.training) train_ids.insert(t.task_id);
  for (const Task& t : sets.validation) EXPECT_FALSE(train_ids.contains(t.task_id));

  r.filters.metadata = Json{{"difficulty", {{"max", 1}}}};
  r.filters.exclude_task_ids = {sets.training[0].task_id};
  r.max_validation_tasks = 5;
  TaskSets easy = load_tasks(r);
  EXPECT_GT(easy.training.size(), 0u);
  EXPECT_LT(easy.training.size(), 300u);
  for (const Task& t : easy.training) {
    EXPECT_EQ(t.metadata["difficulty"], 1);
    EXPECT_EQ(t.metadata["num_operands"], 2);
    EXPECT_NE(t.task_id, sets.training[0].task_id);
  }
  EXPECT_LE(easy.validation.size(), 5u);

  r.builtin.params = Json{{"sizee", 4}};
  EXPECT_NE(error_of([&] { load_tasks(r); }).find("unknown calc param 'sizee'"), std::string::npos);
  r.builtin.generator = "chess";
  EXPECT_NE(error_of([&] { load_tasks(r); }).find("unknown built-in task 'chess'"),
            std::string::npos);
}

TEST(LoadTasks, JsonlFilesWithRelativePathsAndHashSplit) {
  TempDir dir;
  const std::vector<Task> generated =
      builtin_task("countdown")
          .generate(GenerateOptions{.split = Split::kTrain, .count = 400, .seed = 1});
  write_file_atomic(dir.path() / "train.jsonl", tasks_to_jsonl(generated));
  config::TaskReaderConfig r;
  r.type = "jsonl_dataset_file";
  r.jsonl_dataset_file.training_file_path = "train.jsonl";
  r.validation_fraction = 0.25;
  TaskSets sets = load_tasks(r, dir.path());
  EXPECT_EQ(sets.training.size() + sets.validation.size(), 400u);
  EXPECT_NEAR(static_cast<double>(sets.validation.size()), 100.0,
              45.0);  // Binomial(400, .25): sd 8.7
  TaskSets again = load_tasks(r, dir.path());
  ASSERT_EQ(again.validation.size(), sets.validation.size());
  for (size_t i = 0; i < sets.validation.size(); ++i)
    EXPECT_EQ(again.validation[i].task_id, sets.validation[i].task_id);

  write_file_atomic(dir.path() / "val.jsonl", tasks_to_jsonl({generated[0]}));
  r.jsonl_dataset_file.validation_file_path = (dir.path() / "val.jsonl").string();
  sets = load_tasks(r, dir.path());
  EXPECT_EQ(sets.training.size(), 400u);
  EXPECT_EQ(sets.validation.size(), 1u);

  r.jsonl_dataset_file.training_file_path = "";
  EXPECT_NE(error_of([&] { load_tasks(r, dir.path()); }).find("training.file_path is empty"),
            std::string::npos);
  r.type = "random_dummy";
  EXPECT_TRUE(load_tasks(r).training.empty());
}

std::vector<std::string> ids(const std::vector<Task>& tasks) {
  std::vector<std::string> out;
  for (const Task& t : tasks) out.push_back(t.task_id);
  return out;
}

TEST(TaskStream, SeededPermutationPerEpochAndResumable) {
  const std::vector<Task> tasks =
      builtin_task("calc").generate(GenerateOptions{.count = 10, .seed = 2});
  TaskStream stream(tasks, true, 42);
  const std::vector<Task> epoch0 = stream.next_batch(10);
  EXPECT_EQ(stream.epoch(), 0);
  const std::vector<Task> epoch1 = stream.next_batch(10);
  EXPECT_EQ(stream.epoch(), 1);
  const std::vector<std::string> ids0 = ids(epoch0);
  const std::vector<std::string> ids1 = ids(epoch1);
  const std::set<std::string> a(ids0.begin(), ids0.end());
  EXPECT_EQ(a.size(), 10u);  // every task once per epoch
  EXPECT_EQ(std::set<std::string>(ids1.begin(), ids1.end()), a);
  EXPECT_NE(ids(epoch0), ids(epoch1));  // a fresh order each epoch
  EXPECT_NE(ids(epoch0), ids(tasks));

  TaskStream same(tasks, true, 42);
  EXPECT_EQ(ids(same.next_batch(20)), [&] {
    std::vector<std::string> both = ids(epoch0);
    for (const auto& s : ids(epoch1)) both.push_back(s);
    return both;
  }());
  // Batches cross epoch boundaries; a saved position resumes exactly.
  TaskStream a3(tasks, true, 42);
  a3.next_batch(7);
  const TaskStream::Position pos = a3.position();
  const std::vector<Task> rest = a3.next_batch(8);
  TaskStream resumed(tasks, true, 42);
  resumed.seek(pos);
  EXPECT_EQ(ids(resumed.next_batch(8)), ids(rest));
  EXPECT_THROW(resumed.seek({0, 11}), Error);

  TaskStream plain(tasks, false, 42);
  EXPECT_EQ(ids(plain.next_batch(10)), ids(tasks));
  TaskStream empty({}, true, 1);
  EXPECT_THROW(empty.next(), Error);
}

}  // namespace
}  // namespace ajet::tasks
