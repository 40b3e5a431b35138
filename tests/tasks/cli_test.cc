// `ajet tasks` end to end: the built binary generates tasks and demos, and judges answers from
// stdin the way an external agent would use it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "common/fs.h"
#include "support/run_command.h"
#include "tasks/builtin.h"
#include "tasks/reader.h"

namespace ajet::tasks {
namespace {

namespace fs = std::filesystem;

using CliRun = test_support::CommandResult;

class TasksCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ajet_ = fs::path(AJET_BINARY_DIR) / "bin" / "ajet";
    ASSERT_TRUE(fs::exists(ajet_)) << ajet_ << " is missing: build the `ajet` target first";
    dir_ = fs::temp_directory_path() /
           ("ajet_tasks_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun ajet(const std::string& args, const std::string& input = "") {
    write_file_atomic(dir_ / "stdin.txt", input);
    const std::string cmd = "'" + ajet_.string() + "' " + args + " < '" +
                            (dir_ / "stdin.txt").string() + "' 2> '" +
                            (dir_ / "stderr.txt").string() + "'";
    return test_support::run_command(cmd);
  }
  std::string stderr_text() { return read_file(dir_ / "stderr.txt"); }

  static std::vector<OrderedJson> json_lines(const std::string& text) {
    std::vector<OrderedJson> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) out.push_back(OrderedJson::parse(line));
    return out;
  }

  fs::path ajet_;
  fs::path dir_;
};

TEST_F(TasksCli, GenerateWritesTheSameTasksAsTheLibrary) {
  CliRun r = ajet("tasks generate --task countdown --n 5 --seed 3 --split val");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  const std::vector<Task> from_cli = parse_task_jsonl(r.out, "stdout");
  const std::vector<Task> from_lib =
      builtin_task("countdown")
          .generate(GenerateOptions{.split = Split::kValidation, .count = 5, .seed = 3});
  ASSERT_EQ(from_cli.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(task_to_json(from_cli[i]), task_to_json(from_lib[i]));

  CliRun f = ajet("tasks generate --task frozenlake --n 3 --params '{\"size\": 5}' --out '" +
                  (dir_ / "lake.jsonl").string() + "'");
  ASSERT_EQ(f.exit_code, 0) << stderr_text();
  EXPECT_EQ(read_task_jsonl(dir_ / "lake.jsonl")[0].metadata["size"], 5);

  CliRun bad = ajet("tasks generate --task calc --params '{\"bogus\": 1}'");
  EXPECT_EQ(bad.exit_code, 2);  // a bad flag value is a usage error
  EXPECT_NE(stderr_text().find("unknown calc param 'bogus'"), std::string::npos) << stderr_text();
}

TEST_F(TasksCli, DemosAreJsonlConversationsWithRewards) {
  CliRun r = ajet("tasks demos --task calc --n 40 --correct-ratio 0.5 --error-mix 1,1,12 --seed 4");
  ASSERT_EQ(r.exit_code, 0) << stderr_text();
  const std::vector<OrderedJson> demos = json_lines(r.out);
  ASSERT_EQ(demos.size(), 40u);
  for (const OrderedJson& d : demos) {
    EXPECT_EQ(d["env_type"], "calc");
    EXPECT_EQ(d["messages"][0]["role"], "system");
    EXPECT_EQ(d["reward"], d["kind"] == "correct" ? 1.0 : 0.0) << d.dump();
    // Every message is a valid OpenAI chat message.
    for (size_t i = 0; i < d["messages"].size(); ++i)
      text::parse_chat_message(d["messages"][i], "m");
  }
  CliRun bad = ajet("tasks demos --task calc --n 2 --error-mix 1,x");
  EXPECT_EQ(bad.exit_code, 2);  // a bad flag value is a usage error
  EXPECT_NE(stderr_text().find("--error-mix"), std::string::npos);
}

TEST_F(TasksCli, JudgeReadsRequestsFromStdin) {
  const std::vector<Task> calc =
      builtin_task("calc").generate(GenerateOptions{.count = 1, .seed = 8});
  const std::vector<Task> lake =
      builtin_task("frozenlake").generate(GenerateOptions{.count = 1, .seed = 8});
  const std::string calc_json = task_to_json(calc[0]).dump();
  const std::string right = calc[0].metadata["answer"].dump();
  std::string input;
  input += "{\"task\": " + calc_json + ", \"answer\": \"<answer>" + right + "</answer>\"}\n";
  input += "{\"task\": " + calc_json +
           ", \"messages\": [{\"role\": \"assistant\", \"content\": \"<answer>0.5</answer>\"}]}\n";
  input += "not json\n";
  input += "{\"task\": " + task_to_json(lake[0]).dump() + ", \"actions\": [\"Up\"]}\n";
  CliRun r = ajet("tasks judge", input);
  EXPECT_EQ(r.exit_code, 1);  // one bad line
  const std::vector<OrderedJson> out = json_lines(r.out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["reward"], 1.0);
  EXPECT_EQ(out[0]["task_id"], calc[0].task_id);
  EXPECT_EQ(out[1]["reward"], 0.0);
  EXPECT_EQ(out[1]["reason"], "bad_answer_format");
  EXPECT_NE(out[2]["error"].get<std::string>().find("stdin:3: invalid JSON"), std::string::npos);
  EXPECT_EQ(out[3]["reason"], "not_finished");
  EXPECT_EQ(out[3]["details"]["steps"], 1);
  EXPECT_FALSE(out[3]["details"]["observation"].get<std::string>().empty());

  CliRun one =
      ajet("tasks judge --task-json '" + calc_json + "' --answer '<answer>" + right + "</answer>'");
  ASSERT_EQ(one.exit_code, 0) << stderr_text();
  EXPECT_EQ(json_lines(one.out)[0]["is_success"], true);
}

}  // namespace
}  // namespace ajet::tasks
