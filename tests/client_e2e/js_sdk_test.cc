// The official OpenAI JS SDK (pinned in tests/js/package.json) against the real ajet-swarm, driven
// by tests/js/openai_sdk_swarm.mjs; and the Node example agent (examples/node_agent) end to end.
// Both are skipped loudly when node or the npm packages are unavailable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client_e2e/client_e2e_util.h"
#include <map>
#include <sstream>

#include "common/fs.h"

namespace ajet::clients_test {
namespace {

// Runs an SDK driver (tests/js/<script>) against `swarm` and reports every failed check.
void run_sdk_checks(BootedSwarm& swarm, const fs::path& node_modules, const std::string& mode,
                    const std::string& script = "openai_sdk_swarm.mjs", size_t min_checks = 10) {
  Json train = swarm.api().claim("js-sdk", "train");
  Json eval = swarm.api().claim("js-sdk", "eval");
  ASSERT_TRUE(train.value("success", false)) << train.dump();
  ASSERT_TRUE(eval.value("success", false)) << eval.dump();
  Captured r = run_capture("node " + shell_quote(source("tests/js/" + script).string()) + " " +
                           shell_quote(node_modules.string()) + " " + mode + " " +
                           shell_quote(train["openai_base_url"].get<std::string>()) + " " +
                           shell_quote(train["openai_api_key"].get<std::string>()) + " " +
                           shell_quote(eval["openai_api_key"].get<std::string>()));
  std::string last =
      r.out.substr(r.out.rfind("{\"ok\"") == std::string::npos ? 0 : r.out.rfind("{\"ok\""));
  Json report = Json::parse(last, nullptr, false);
  ASSERT_TRUE(report.is_object()) << "exit " << r.status << ", output:\n" << r.out;
  ASSERT_GE(report["checks"].size(), min_checks) << r.out;
  for (const auto& c : report["checks"]) {
    EXPECT_TRUE(c["ok"].get<bool>())
        << mode << ": " << c["name"].get<std::string>() << ": " << c.value("detail", "");
  }
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST(OpenAiJsSdkTest, EveryResponseParsesAndMatchesWithTheEchoEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-echo-engine");
  if (HasFailure()) return;
  run_sdk_checks(swarm, *node_modules, "echo");
}

TEST(OpenAiJsSdkTest, EveryResponseParsesWithTheRealEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-engine");
  if (HasFailure()) return;
  run_sdk_checks(swarm, *node_modules, "real");
}

TEST(OpenAiJsSdkTest, ResponsesParseAndMatchWithTheEchoEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-echo-engine");
  if (HasFailure()) return;
  run_sdk_checks(swarm, *node_modules, "echo", "openai_responses_swarm.mjs", 8);
}

TEST(OpenAiJsSdkTest, ResponsesParseWithTheRealEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-engine");
  if (HasFailure()) return;
  run_sdk_checks(swarm, *node_modules, "real", "openai_responses_swarm.mjs", 8);
}

TEST(AnthropicJsSdkTest, MessagesParseAndMatchWithTheEchoEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-echo-engine");
  if (HasFailure()) return;
  run_sdk_checks(swarm, *node_modules, "echo", "anthropic_sdk_swarm.mjs", 7);
}

TEST(AnthropicJsSdkTest, MessagesParseWithTheRealEngine) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-engine");
  if (HasFailure()) return;
  run_sdk_checks(swarm, *node_modules, "real", "anthropic_sdk_swarm.mjs", 7);
}

TEST(NodeExampleTest, ClaimsCallsToolsAndReportsRewards) {
  std::string why;
  auto node_modules = npm_node_modules(&why);
  if (!node_modules) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  BootedSwarm swarm("ajet-echo-engine", "",
                    /*train_batch_size=*/100);  // no batch boundary mid-test
  if (HasFailure()) return;
  // The example resolves `openai` from its own directory: run a copy next to the test's
  // node_modules.
  const fs::path app = swarm.dir() / "node_agent";
  fs::create_directories(app);
  for (const char* f : {"agent.mjs", "swarm.mjs", "calculator.mjs", "package.json"}) {
    fs::copy_file(source(std::string("examples/node_agent/") + f), app / f);
  }
  fs::create_directory_symlink(*node_modules, app / "node_modules");
  // The echo engine answers with the last user-role message: "42" is a correct final answer at
  // once; a question that is a tool call makes the agent run the calculator, and the echoed tool
  // result (Qwen's template renders it as a user-role <tool_response>) is the correct answer; "41"
  // is wrong.
  write_file_atomic(
      app / "tasks.jsonl",
      "{\"task_id\": \"plain\", \"question\": \"42\", \"answer\": 42}\n"
      "{\"task_id\": \"tool\", \"question\": \"<tool_call>\\n{\\\"name\\\": \\\"calculator\\\", "
      "\\\"arguments\\\": {\\\"expression\\\": \\\"(3 + 4) * 5\\\"}}\\n</tool_call>\", \"answer\": "
      "35}\n"
      "{\"task_id\": \"wrong\", \"question\": \"41\", \"answer\": 42}\n");
  Captured r =
      run_capture("cd " + shell_quote(app.string()) + " && node agent.mjs --swarm-url " +
                  shell_quote(swarm.url()) +
                  " --tasks tasks.jsonl --episodes 6 --repeat 2 --parallel 2" + " --max-turns 2");
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<std::string, std::vector<Json>> by_task;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("task_id")) by_task[j["task_id"]].push_back(j);
  }
  ASSERT_EQ(by_task["plain"].size(), 2u) << r.out;
  ASSERT_EQ(by_task["tool"].size(), 2u) << r.out;
  ASSERT_EQ(by_task["wrong"].size(), 2u) << r.out;
  for (const auto& e : by_task["plain"]) EXPECT_EQ(e["reward"], 1) << e.dump();
  for (const auto& e : by_task["tool"]) {
    EXPECT_EQ(e["reward"], 1) << e.dump();
    EXPECT_EQ(e["tool_calls"], 1) << e.dump();
  }
  for (const auto& e : by_task["wrong"]) EXPECT_EQ(e["reward"], 0) << e.dump();
  // The server stored them: six episodes, the per-task rewards as reported.
  Json pool = swarm.api().get("/get_current_batch_rollout_pool_information").json();
  EXPECT_EQ(pool["completed_episodes"], 6) << pool.dump();
  const Json& stats = pool["completed_tasks_reward_stats"];
  EXPECT_EQ(stats["plain"]["reward_mean"], 1.0) << pool.dump();
  EXPECT_EQ(stats["tool"]["reward_mean"], 1.0) << pool.dump();
  EXPECT_EQ(stats["wrong"]["reward_mean"], 0.0) << pool.dump();
}

}  // namespace
}  // namespace ajet::clients_test
