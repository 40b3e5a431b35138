// The example agents (examples/python_agent, node_agent, langgraph_agent) end to end: each claims
// episodes of built-in calc tasks (`ajet tasks generate`) from a real `ajet-swarm`, talks to the
// real `ajet-engine` (a random micro model: the rewards are whatever it earns) through the
// episode's OpenAI base URL and key, judges with `ajet tasks judge` and ends every episode with the
// reward; the test checks that the server stored each episode, finished, with that reward, and that
// the example's own judge agreed. The JS examples need npm packages (scripts/npm-deps.sh) and skip
// loudly without them. The examples' copies of the calc calculator and judge are also checked
// against `ajet tasks` directly.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "examples/examples_util.h"

namespace ajet::examples_test {
namespace {

// The flags that make an example run 2 generated calc tasks x 2 episodes, judged by `ajet tasks
// judge`.
std::string calc_flags(const std::string& url) {
  return " --swarm-url " + shell_quote(url) + " --ajet " + shell_quote(bin("ajet").string()) +
         " --generate 2 --seed 3 --episodes 4 --repeat 2 --parallel 2 --max-turns 2";
}

// Two calc tasks, two episodes each, judged by ajet, the example's local judge agreeing; all
// stored.
void expect_calc_episodes(Api& api, const Captured& r) {
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<Json> episodes = episode_lines(r.out);
  ASSERT_EQ(episodes.size(), 4u) << r.out;
  std::map<std::string, int> per_task;
  for (const Json& e : episodes) {
    EXPECT_EQ(e["judge"], "ajet") << e.dump();
    EXPECT_EQ(e["reason"], e["local_reason"])
        << "the local judge disagrees with ajet tasks judge: " << e.dump();
    EXPECT_EQ(e["task_id"].get<std::string>().rfind("calc-", 0), 0u) << e.dump();
    per_task[e["task_id"]] += 1;
  }
  EXPECT_EQ(per_task.size(), 2u) << r.out;
  for (const auto& [task, n] : per_task) EXPECT_EQ(n, 2) << task << " (--repeat 2)";
  expect_stored_as_reported(api, episodes);
}

TEST(PythonAgentExampleTest, EndsGeneratedCalcEpisodesJudgedByAjetOnTheRealEngine) {
  ExampleSwarm swarm;
  if (!swarm.ok()) return;
  Captured r = run_capture("PYTHONDONTWRITEBYTECODE=1 python3 " +
                           shell_quote(source("examples/python_agent/agent.py").string()) +
                           calc_flags(swarm.url()));
  expect_calc_episodes(swarm.api(), r);
}

TEST(NodeAgentExampleTest, EndsGeneratedCalcEpisodesJudgedByAjetOnTheRealEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  ExampleSwarm swarm;
  if (!swarm.ok()) return;
  const fs::path app = stage_js_example(swarm.dir().path(), *node_modules, "node_agent");
  Captured r = run_capture("cd " + shell_quote(app.string()) + " && node agent.mjs" +
                           calc_flags(swarm.url()));
  expect_calc_episodes(swarm.api(), r);
}

TEST(LangGraphAgentExampleTest, EndsGeneratedCalcEpisodesJudgedByAjetOnTheRealEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  ExampleSwarm swarm;
  if (!swarm.ok()) return;
  stage_js_example(swarm.dir().path(), *node_modules,
                   "node_agent");  // its swarm.mjs and calculator.mjs
  const fs::path app = stage_js_example(swarm.dir().path(), *node_modules, "langgraph_agent");
  Captured r = run_capture("cd " + shell_quote(app.string()) + " && node agent.mjs" +
                           calc_flags(swarm.url()));
  expect_calc_episodes(swarm.api(), r);
}

// The graph's paths with outputs we choose: the echo engine replies with the last user message, so
// a question that is an answer is answered, and a question that is a tool call makes a tool call.
TEST(LangGraphAgentExampleTest, ToolLoopLimitAndJudgeWithTheEchoEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  ExampleSwarm swarm("ajet-echo-engine");
  if (!swarm.ok()) return;
  stage_js_example(swarm.dir().path(), *node_modules, "node_agent");
  const fs::path app = stage_js_example(swarm.dir().path(), *node_modules, "langgraph_agent");
  auto call = [](const std::string& expression) {
    return "<tool_call>\n" +
           Json{{"name", "calculator"}, {"arguments", {{"expression", expression}}}}.dump() +
           "\n</tool_call>";
  };
  auto task = [](const std::string& id, const std::string& query) {
    return Json{{"task_id", id},
                {"main_query", query},
                {"metadata", {{"answer", 163}}},
                {"env_type", "calc"}}
               .dump() +
           "\n";
  };
  write_file_atomic(app / "tasks.jsonl", task("right", "<answer>163</answer>") +
                                             task("wrong", "<answer>+163</answer>") +
                                             task("tool", call("37*4+15")) +
                                             task("limit", call("1+1") + "\n" + call("2+2") + "\n" +
                                                               call("3+3") + "\n" + call("4+4")));
  Captured r = run_capture(
      "cd " + shell_quote(app.string()) + " && node agent.mjs --swarm-url " +
      shell_quote(swarm.url()) + " --ajet " + shell_quote(bin("ajet").string()) +
      " --tasks tasks.jsonl --episodes 8 --repeat 2 --parallel 2 --max-turns 3 --max-tokens 256");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<Json> episodes = episode_lines(r.out);
  ASSERT_EQ(episodes.size(), 8u) << r.out;
  std::map<std::string, std::vector<Json>> by_task;
  for (const Json& e : episodes) {
    EXPECT_EQ(e["reason"], e["local_reason"])
        << "the local judge disagrees with ajet tasks judge: " << e.dump();
    by_task[e["task_id"]].push_back(e);
  }
  for (const auto& [id, list] : by_task) ASSERT_EQ(list.size(), 2u) << id << "\n" << r.out;
  for (const Json& e : by_task["right"]) {
    EXPECT_EQ(e["reward"], 1) << e.dump();
    EXPECT_EQ(e["reason"], "correct") << e.dump();
    EXPECT_EQ(e["tool_calls"], 0) << e.dump();
  }
  for (const Json& e : by_task["wrong"]) {
    EXPECT_EQ(e["reward"], 0) << e.dump();
    EXPECT_EQ(e["reason"], "bad_answer_format") << e.dump();  // "+163" is not a plain integer
  }
  // One call, its result sent back; the next reply (the echoed tool response) has no answer tag.
  for (const Json& e : by_task["tool"]) {
    EXPECT_EQ(e["tool_calls"], 1) << e.dump();
    EXPECT_EQ(e["turns"], 2) << e.dump();
    EXPECT_EQ(e["reward"], 0) << e.dump();
  }
  // Four calls in one reply: three results, then the limit error ends the episode without a reply.
  for (const Json& e : by_task["limit"]) {
    EXPECT_EQ(e["tool_calls"], 4) << e.dump();
    EXPECT_EQ(e["turns"], 1) << e.dump();
    EXPECT_EQ(e["reason"], "no_answer") << e.dump();
    EXPECT_EQ(e["reward"], 0) << e.dump();
  }
  expect_stored_as_reported(swarm.api(), episodes);
}

// Runs a calc_agreement script and checks its report: the example's calculator and judge against
// the reference (the tool results in `ajet tasks demos`, the verdicts of `ajet tasks judge`).
void expect_agreement(const std::string& command) {
  Captured r = run_capture(command + " " + shell_quote(bin("ajet").string()));
  std::string last =
      r.out.substr(r.out.rfind("{\"ok\"") == std::string::npos ? 0 : r.out.rfind("{\"ok\""));
  Json report = Json::parse(last, nullptr, false);
  ASSERT_TRUE(report.is_object()) << "exit " << r.status << ", output:\n" << r.out;
  EXPECT_GE(report["tool_results"].get<int>(), 50) << r.out;
  EXPECT_EQ(report["verdicts"].get<int>(), 16 * 15) << r.out;
  EXPECT_EQ(report["reasons"].size(), 5u) << "every calc judge reason should occur: " << r.out;
  for (const auto& m : report["mismatches"]) ADD_FAILURE() << m.dump();
  EXPECT_TRUE(report["ok"].get<bool>()) << r.out;
  EXPECT_EQ(r.status, 0) << r.out;
}

// node_agent/calculator.mjs (the JS examples' calculator and judge; error texts too).
// examples/first_agent: `ajet --conf examples/first_agent/config.yaml` as the README says, on the
// fixture's micro model instead of the warmed-up tiny one (its 400-id tokenizer makes the prompt
// longer, so the lengths grow), a couple of steps: the Node agent trains in worker mode (torch:
// each step an optimizer step) and runs per episode too; every episode it served ended with its own
// reward, and its validation requests carried AJET_SAMPLING's parameters.
TEST(FirstAgentExampleTest, TrainsStepsThroughClassicModeInWorkerAndPerEpisodeMode) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  for (const std::string mode : {"worker", "per_episode"}) {
    SCOPED_TRACE(mode);
    ScratchDir dir;
    Fixture f = fixture(true);
    ASSERT_FALSE(::testing::Test::HasFailure());
    const fs::path model = model_with_positions(f.model, dir / "model", 2048);
    const fs::path app = stage_js_example(dir.path(), *node_modules, "first_agent");
    std::string yaml = read_file(app / "config.yaml");
    const std::vector<std::pair<std::string, std::string>> edits = {
        {"path: exp/main/models/calc-sft", "path: " + model.string()},
        {"max_prompt_length: 448", "max_prompt_length: 1536"},
        {"max_model_len: 640", "max_model_len: 2048"},
        {"max_response_length_in_one_turn: 48", "max_response_length_in_one_turn: 16"},
        {"train_batch_size: 8", "train_batch_size: 2"},
        {"num_repeat: 8", "num_repeat: 2"},
        {"max_env_worker: 32", "max_env_worker: 4"},
        {"total_training_steps: 20",
         mode == "worker" ? "total_training_steps: 2" : "total_training_steps: 1"},
        {"val_before_train: true",
         "val_before_train: true\n    val_max_num_task_each_validation: 2"},
        {"user_workflow_mode: worker", "user_workflow_mode: " + mode},
        {"kv_cache_memory_mb: 256", "kv_cache_memory_mb: 64"},
    };
    for (const auto& [from, to] : edits) {
      const size_t at = yaml.find(from);
      ASSERT_NE(at, std::string::npos)
          << "examples/first_agent/config.yaml no longer has '" << from << "'";
      yaml.replace(at, from.size(), to);
    }
    write_file_atomic(app / "config.yaml", yaml);
    Captured r = run_capture("cd " + shell_quote(dir.path().string()) + " && " +
                             shell_quote(bin("ajet").string()) +
                             " --conf examples/first_agent/config.yaml --exp-dir exps");
    ASSERT_EQ(r.status, 0) << r.out;
    if (mode == "worker") EXPECT_NE(r.out.find("4 worker processes"), std::string::npos) << r.out;
    int train = 0, val = 0;
    std::istringstream lines(read_file(dir / "exps" / "first_agent" / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const Json rec = Json::parse(line);
      if (rec["kind"] == "train") {
        train += 1;
        EXPECT_EQ(rec["global_step"].get<int64_t>(), train)
            << rec.dump();  // torch: trained every step
        EXPECT_EQ(rec["rollout"]["episodes"].get<int64_t>(), 4) << rec.dump();
        EXPECT_EQ(rec["rollout"]["failed"].get<int64_t>(), 0) << rec.dump();
        EXPECT_FALSE(rec["rollout"]["terminations"].contains("agent_error")) << rec.dump();
        EXPECT_GE(rec["rollout"]["llm_calls"].get<int64_t>(), 4) << rec.dump();
      } else if (rec["kind"] == "validation") {
        val += 1;
        EXPECT_FALSE(rec["greedy_rollout"]["terminations"].contains("agent_error")) << rec.dump();
        EXPECT_GT(rec["sampled_requests"]["calls"].get<int64_t>(), 0) << rec.dump();
        EXPECT_EQ(rec["sampled_requests"]["sampled_calls"], rec["sampled_requests"]["calls"])
            << rec.dump();
      }
    }
    EXPECT_EQ(train, mode == "worker" ? 2 : 1) << r.out;
    EXPECT_GE(val, 2) << r.out;
    EXPECT_EQ(r.out.find("ran greedy"), std::string::npos) << r.out;
  }
}

TEST(CalcTaskAgreementTest, JsCalculatorAndJudgeAgreeWithAjetTasks) {
  if (run_capture("command -v node").status != 0)
    GTEST_SKIP() << "SKIPPED LOUDLY: node is not installed";
  ASSERT_TRUE(fs::exists(bin("ajet"))) << "build the ajet target";
  expect_agreement("node " + shell_quote(source("tests/examples/calc_agreement.mjs").string()));
}

// python_agent/calculator.py (values; its error texts are Python's own).
TEST(CalcTaskAgreementTest, PythonCalculatorAndJudgeAgreeWithAjetTasks) {
  ASSERT_TRUE(fs::exists(bin("ajet"))) << "build the ajet target";
  expect_agreement("PYTHONDONTWRITEBYTECODE=1 python3 " +
                   shell_quote(source("tests/examples/calc_agreement.py").string()));
}

}  // namespace
}  // namespace ajet::examples_test
