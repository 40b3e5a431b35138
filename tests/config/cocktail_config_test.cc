// ajet.task_reader.cocktail: items parsed with the reader keys of ajet.task_reader, defaults, the
// dump round trip, and every error naming its key (item index included).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/error.h"
#include "config/load.h"
#include "config/schema.h"

namespace ajet::config::cocktail_config_test {
namespace {

std::string with_cocktail(const std::string& cocktail) {
  return "ajet:\n  model:\n    path: /models/tiny\n  task_reader:\n    cocktail:\n" + cocktail;
}

const char* kTwoTasks =
    "      tasks:\n"
    "        - name: calc\n"
    "          builtin: {generator: calc, num_training_tasks: 50, params: {max_operands: 2}}\n"
    "        - weight: 3\n"
    "          builtin:\n"
    "            generator: frozenlake\n"
    "            num_validation_tasks: 7\n"
    "          shuffle_seed: 9\n"
    "          filters: {metadata: {difficulty: {max: 2}}}\n";

// The message of the Error(kInvalidArgument) that parsing `yaml` throws.
std::string parse_error(const std::string& yaml) {
  try {
    parse_config(yaml, "c.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "expected an error for:\n" << yaml;
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CocktailConfig, ItemsTakeTheReaderKeysWithTheirDefaults) {
  LoadedConfig loaded = parse_config(with_cocktail(kTwoTasks), "c.yaml");
  EXPECT_TRUE(loaded.warnings.empty()) << ::testing::PrintToString(loaded.warnings);
  const auto& tasks = loaded.config.task_reader.cocktail.tasks;
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].name, "calc");
  EXPECT_EQ(tasks[0].weight, 1.0);
  EXPECT_EQ(tasks[0].source.type, "builtin");  // an item's default type
  EXPECT_EQ(tasks[0].source.builtin.num_training_tasks, 50);
  EXPECT_EQ(tasks[0].source.builtin.num_validation_tasks, 100);  // ajet.task_reader's default
  EXPECT_EQ(tasks[0].source.builtin.params["max_operands"], 2);
  EXPECT_EQ(tasks[1].weight, 3.0);
  EXPECT_EQ(cocktail_task_name(tasks[1]), "frozenlake");  // no name: the generator's
  EXPECT_EQ(tasks[1].source.shuffle_seed, 9);
  EXPECT_EQ(tasks[1].source.filters.metadata["difficulty"]["max"], 2);
  EXPECT_EQ(loaded.config.task_reader.cocktail.schedule.type, "fixed");
  EXPECT_EQ(loaded.config.task_reader.type, "random_dummy");  // the top-level reader is left alone
}

TEST(CocktailConfig, ScheduleAndTheDumpRoundTrip) {
  const std::string yaml =
      with_cocktail(std::string(kTwoTasks) +
                    "      schedule: {type: cos, start: 0.75, end: 0.25, end_step: 10}\n");
  const Config config = parse_config(yaml, "c.yaml").config;
  const CocktailScheduleConfig& s = config.task_reader.cocktail.schedule;
  EXPECT_EQ(s.type, "cos");
  EXPECT_EQ(s.start, 0.75);
  EXPECT_EQ(s.end, 0.25);
  EXPECT_EQ(s.end_step, 10);
  // What the launcher syncs (to_yaml) reads back to the same config.
  const LoadedConfig again = parse_config(to_yaml(config), "dump");
  EXPECT_EQ(to_json(again.config), to_json(config));
  EXPECT_EQ(to_json(config)["ajet"]["task_reader"]["cocktail"]["tasks"][1]["builtin"]["generator"],
            "frozenlake");
  // The swarm server ignores the whole task reader, cocktail included.
  const LoadedConfig server = parse_config(yaml, "body", ConfigUse::kSwarmServer);
  EXPECT_TRUE(server.config.task_reader.cocktail.tasks.empty());
  // A schedule key can be overridden from the command line.
  Config overridden = config;
  set_config_value(overridden, "ajet.task_reader.cocktail.schedule.type", "linear");
  EXPECT_EQ(overridden.task_reader.cocktail.schedule.type, "linear");
}

TEST(CocktailConfig, UnknownItemKeysAreWarningsNamingTheItem) {
  const LoadedConfig loaded = parse_config(
      with_cocktail("      tasks:\n        - builtin: {generator: calc}\n          wieght: 2\n"
                    "        - builtin: {generator: countdown}\n"),
      "c.yaml");
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_TRUE(has(loaded.warnings[0], "ajet.task_reader.cocktail.tasks[0].wieght"))
      << loaded.warnings[0];
  EXPECT_TRUE(has(loaded.warnings[0], "did you mean 'ajet.task_reader.cocktail.tasks[0].weight'"))
      << loaded.warnings[0];
}

TEST(CocktailConfig, TypeErrorsNameTheItemKeyAndLine) {
  std::string e =
      parse_error(with_cocktail("      tasks:\n        - builtin: {num_training_tasks: many}\n"));
  EXPECT_TRUE(has(
      e,
      "c.yaml:7: ajet.task_reader.cocktail.tasks[0].builtin.num_training_tasks must be an integer"))
      << e;
  e = parse_error(with_cocktail("      tasks: calc\n"));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks must be a list of task sources")) << e;
  e = parse_error(with_cocktail("      tasks:\n        - calc\n        - countdown\n"));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks[0] must be a mapping")) << e;
  e = parse_error(
      with_cocktail("      tasks:\n        - {type: huggingface, builtin: {generator: calc}}\n"
                    "        - {builtin: {generator: countdown}}\n"));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks[0].type must be one of")) << e;
  e = parse_error(with_cocktail("      schedule: {type: exp}\n"));
  EXPECT_TRUE(has(
      e, "ajet.task_reader.cocktail.schedule.type must be one of [fixed, constant, linear, cos]"))
      << e;
}

TEST(CocktailConfig, TheListHasALimit) {
  std::string items = "      tasks:\n";
  for (int i = 0; i <= int(kMaxCocktailTasks); ++i) {
    items += "        - {name: t" + std::to_string(i) + "}\n";
  }
  const std::string e = parse_error(with_cocktail(items));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks holds 17 tasks; a cocktail mixes at most 16"))
      << e;
}

TEST(CocktailConfig, RelationsListEveryViolationByKey) {
  std::string e =
      parse_error(with_cocktail("      tasks:\n        - {builtin: {generator: calc}}\n"));
  EXPECT_TRUE(
      has(e, "ajet.task_reader.cocktail.tasks holds one task; a cocktail mixes at least two"))
      << e;

  e =
      parse_error(with_cocktail("      tasks:\n"
                                "        - {builtin: {generator: calc}, weight: -1}\n"
                                "        - {builtin: {generator: calc}}\n"
                                "        - {type: jsonl_dataset_file}\n"
                                "        - {type: random_dummy, name: 'a b'}\n"));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks[0].weight must be >= 0, got -1")) << e;
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks[1].name 'calc' is also the name of tasks[0]"))
      << e;
  EXPECT_TRUE(
      has(e, "ajet.task_reader.cocktail.tasks[2].jsonl_dataset_file.training.file_path is empty"))
      << e;
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks[2].name is required")) << e;
  EXPECT_TRUE(
      has(e, "ajet.task_reader.cocktail.tasks[3].type must be builtin or jsonl_dataset_file"))
      << e;
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks[3].name 'a b' must be 1-48 letters")) << e;

  e = parse_error(
      with_cocktail(std::string(kTwoTasks) + "      schedule: {type: linear, start: 1.5}\n"));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.schedule.start must be <= 1, got 1.5")) << e;
  EXPECT_TRUE(has(
      e,
      "ajet.task_reader.cocktail.schedule.end and end_step are required with schedule.type linear"))
      << e;
  e = parse_error(with_cocktail(std::string(kTwoTasks) + "      schedule: {type: constant}\n"));
  EXPECT_TRUE(
      has(e, "ajet.task_reader.cocktail.schedule.start is required with schedule.type constant"))
      << e;
  e = parse_error(with_cocktail(std::string(kTwoTasks) + "      schedule: {start: 0.5}\n"));
  EXPECT_TRUE(has(e, "schedule.start, end and end_step need schedule.type constant, linear or cos"))
      << e;
  e = parse_error(with_cocktail("      schedule: {type: cos, start: 1, end: 0, end_step: 3}\n"));
  EXPECT_TRUE(has(
      e, "ajet.task_reader.cocktail.schedule is set but ajet.task_reader.cocktail.tasks is empty"))
      << e;
  e =
      parse_error(with_cocktail("      tasks:\n        - {builtin: {generator: calc}, weight: 0}\n"
                                "        - {builtin: {generator: countdown}, weight: 0}\n"));
  EXPECT_TRUE(has(e, "ajet.task_reader.cocktail.tasks: the weights must not all be 0")) << e;
  e =
      parse_error(with_cocktail("      tasks:\n        - {builtin: {generator: calc}}\n"
                                "        - {builtin: {generator: countdown}, weight: 0}\n"
                                "      schedule: {type: constant, start: 0.5}\n"));
  EXPECT_TRUE(has(e, "the weights of tasks[1] and after must not all be 0")) << e;
}

// The documented cocktail command's config loads cleanly and mixes calc and frozenlake half and
// half.
TEST(CocktailConfig, TheExampleConfigLoadsWithoutWarnings) {
  const LoadedConfig loaded = load_config_file(std::filesystem::path(AJET_SOURCE_DIR) /
                                               "examples/configs/calc_cocktail.yaml");
  EXPECT_TRUE(loaded.warnings.empty()) << ::testing::PrintToString(loaded.warnings);
  const CocktailConfig& cocktail = loaded.config.task_reader.cocktail;
  ASSERT_EQ(cocktail.tasks.size(), 2u);
  EXPECT_EQ(cocktail_task_name(cocktail.tasks[0]), "calc");
  EXPECT_EQ(cocktail_task_name(cocktail.tasks[1]), "frozenlake");
  EXPECT_EQ(cocktail.schedule.type, "constant");
  EXPECT_EQ(cocktail.schedule.start, 0.5);
}

}  // namespace
}  // namespace ajet::config::cocktail_config_test
