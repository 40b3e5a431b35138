// The calc duo without servers: turns are routed by position, each model's reward is its own, and
// the multi-model section of a config is checked key by key.
#include <gmock/gmock.h>

#include <deque>
#include <filesystem>

#include "common/encoding.h"
#include "common/fs.h"
#include "multi_model/duo.h"
#include "multi_model/launcher.h"
#include "tasks/builtin.h"
#include "tasks/calc.h"

namespace ajet::multi_model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Replies from a script, recording what it was asked.
class Scripted : public tasks::ChatModel {
 public:
  explicit Scripted(std::deque<std::string> replies) : replies_(std::move(replies)) {}
  tasks::ModelReply complete(const std::vector<text::ChatMessage>& messages,
                             const std::vector<tasks::OrderedJson>&) override {
    seen.push_back(messages.size());
    std::string text = replies_.empty() ? "" : replies_.front();
    if (!replies_.empty()) replies_.pop_front();
    return tasks::reply_from_text(text, "stop", int64_t(seen.size()));
  }
  std::vector<size_t> seen;

 private:
  std::deque<std::string> replies_;
};

tasks::Task calc_task_sample() {
  tasks::GenerateOptions o;
  o.count = 1;
  o.seed = 3;
  return tasks::calc_task().generate(o).front();
}

std::string call_of(const std::string& expression) {
  return "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" + expression +
         "\"}}</tool_call>";
}

TEST(CalcDuo, TheCallerServesTheFirstTurnAndTheAnswererTheRest) {
  tasks::Task task = calc_task_sample();
  const std::string expression = task.metadata["expression"].get<std::string>();
  const std::string answer = std::to_string(task.metadata["answer"].get<int64_t>());
  Scripted caller({call_of(expression)}), answerer({"<answer>" + answer + "</answer>"});
  DuoOutcome o = run_calc_duo(task, caller, answerer);
  EXPECT_EQ(caller.seen.size(), 1u);
  EXPECT_EQ(answerer.seen.size(), 1u);
  EXPECT_GT(answerer.seen[0], caller.seen[0]);  // it sees the call and the tool's result
  EXPECT_TRUE(o.caller_right);
  EXPECT_TRUE(o.pair_success);
  EXPECT_EQ(o.caller.reward, 1.0);
  EXPECT_EQ(o.answerer.reward, 1.0);
  EXPECT_EQ(o.caller.metadata["role"], "caller");
  EXPECT_EQ(o.answerer.metadata["task_id"], task.task_id);
}

TEST(CalcDuo, EachModelIsRewardedForItsOwnTurn) {
  tasks::Task task = calc_task_sample();
  const std::string expression = task.metadata["expression"].get<std::string>();
  const int64_t truth = task.metadata["answer"].get<int64_t>();
  {  // right call, miscopied answer: the caller did its part
    Scripted caller({call_of(expression)}),
        answerer({"<answer>" + std::to_string(truth + 1) + "</answer>"});
    DuoOutcome o = run_calc_duo(task, caller, answerer);
    EXPECT_EQ(o.caller.reward, 1.0);
    EXPECT_EQ(o.answerer.reward, 0.0);
    EXPECT_FALSE(o.pair_success);
  }
  {  // a wrong expression: neither is rewarded, whatever the answerer copies
    Scripted caller({call_of(expression + "+1")}),
        answerer({"<answer>" + std::to_string(truth + 1) + "</answer>"});
    DuoOutcome o = run_calc_duo(task, caller, answerer);
    EXPECT_EQ(o.caller.reward, 0.0);
    EXPECT_EQ(o.answerer.reward, 0.0);
  }
  {  // the caller answers without the tool: the answerer never plays
    Scripted caller({"<answer>" + std::to_string(truth) + "</answer>"}), answerer({});
    DuoOutcome o = run_calc_duo(task, caller, answerer);
    EXPECT_TRUE(answerer.seen.empty());
    EXPECT_EQ(o.caller.reward, 0.0);
  }
}

fs::path write_conf(const std::string& multi_model) {
  fs::path p = fs::temp_directory_path() / ("ajet_duo_spec_" + new_uuid_hex() + ".yaml");
  write_file_atomic(p, "ajet:\n  model:\n    path: /m\n" + multi_model);
  return p;
}

std::string spec_error(const std::string& multi_model) {
  fs::path p = write_conf(multi_model);
  try {
    read_multi_model_spec(p);
  } catch (const Error& e) {
    fs::remove(p);
    return e.what();
  }
  fs::remove(p);
  return "";
}

TEST(MultiModelSpec, IsReadAndCheckedKeyByKey) {
  fs::path p = write_conf(
      "  multi_model:\n    models:\n      - {name: caller, path: a}\n      - {name: answerer, "
      "path: /b}\n");
  std::optional<MultiModelSpec> spec = read_multi_model_spec(p);
  fs::remove(p);
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->workflow, "calc_duo");
  ASSERT_EQ(spec->models.size(), 2u);
  EXPECT_EQ(spec->models[1].path, "/b");
  fs::path plain = write_conf("");
  EXPECT_FALSE(read_multi_model_spec(plain));
  fs::remove(plain);

  EXPECT_THAT(spec_error("  multi_model: 3\n"), HasSubstr("ajet.multi_model must be a mapping"));
  EXPECT_THAT(spec_error("  multi_model:\n    workflow: chess\n    models: []\n"),
              HasSubstr("ajet.multi_model.workflow must be one of [calc_duo], got 'chess'"));
  EXPECT_THAT(spec_error("  multi_model:\n    models:\n      - {name: a, path: x}\n"),
              HasSubstr("calc_duo needs exactly two models"));
  EXPECT_THAT(
      spec_error(
          "  multi_model:\n    models:\n      - {name: a, path: x}\n      - {name: a, path: y}\n"),
      HasSubstr("models[1].name 'a' is used twice"));
  EXPECT_THAT(spec_error("  multi_model:\n    models:\n      - {name: A/b, path: x}\n      - "
                         "{name: c, path: y}\n"),
              HasSubstr("models[0].name 'A/b' may only hold"));
  EXPECT_THAT(
      spec_error("  multi_model:\n    models:\n      - {name: a}\n      - {name: c, path: y}\n"),
      HasSubstr("models[0].path must be a non-empty string"));
  EXPECT_THAT(spec_error("  multi_model:\n    models: [\n"), HasSubstr(".yaml"));
}

TEST(MultiModelSpec, AdapterMembersAreCheckedKeyByKey) {
  fs::path p = write_conf(
      "  multi_model:\n    models:\n      - {name: caller, adapter: {rank: 16, alpha: 32}}\n"
      "      - {name: answerer, adapter: {}}\n");
  std::optional<MultiModelSpec> spec = read_multi_model_spec(p);
  fs::remove(p);
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->models.size(), 2u);
  EXPECT_EQ(spec->models[0].adapter, (Json{{"rank", 16}, {"alpha", 32}}));
  EXPECT_TRUE(spec->models[1].adapter.is_object());
  EXPECT_TRUE(spec->models[0].path.empty());
  const std::string two = "      - {name: b, adapter: {}}\n";
  EXPECT_THAT(spec_error("  multi_model:\n    models:\n      - {name: a, path: x}\n" + two),
              HasSubstr("mixing them is not supported"));
  EXPECT_THAT(
      spec_error("  multi_model:\n    models:\n      - {name: a, path: x, adapter: {}}\n" + two),
      HasSubstr("models[0]: a member is a server (path: its model) or an adapter"));
  EXPECT_THAT(
      spec_error("  multi_model:\n    models:\n      - {name: a, adapter: {rank: 0}}\n" + two),
      HasSubstr("models[0].adapter.rank must be an integer >= 1"));
  EXPECT_THAT(
      spec_error("  multi_model:\n    models:\n      - {name: a, adapter: {rnak: 8}}\n" + two),
      HasSubstr("models[0].adapter.rnak is not an adapter field"));
  EXPECT_THAT(spec_error("  multi_model:\n    models:\n      - {name: a, adapter: 8}\n" + two),
              HasSubstr("models[0].adapter must be a mapping"));
  EXPECT_THAT(spec_error("  multi_model:\n    models:\n      - {name: a, adapter: {path: x, "
                         "rank: 4}}\n" +
                         two),
              HasSubstr("a saved adapter (path) brings its own rank"));
  EXPECT_THAT(
      spec_error("  multi_model:\n    models:\n      - {name: a, adapter: {}, lr: 1}\n" + two),
      HasSubstr("models[0].lr is not a key of a member"));
}

}  // namespace
}  // namespace ajet::multi_model
