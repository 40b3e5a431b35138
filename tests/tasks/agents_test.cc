// The built-in agents against a scripted model: perfect episodes, wrong answers, garbage, malformed
// tool calls, the tool-call limit, model failures, and what the model is shown each turn.
#include <gtest/gtest.h>

#include "scripted_model.h"
#include "tasks/builtin.h"
#include "tasks/calc.h"
#include "tasks/frozenlake.h"

namespace ajet::tasks {
namespace {

using testing::calc_call;
using testing::ScriptedChatModel;
using testing::ScriptedTurn;

Task one_task(const std::string& name, OrderedJson params = OrderedJson::object(),
              uint64_t seed = 21) {
  return builtin_task(name).generate(
      GenerateOptions{.split = Split::kTrain, .count = 1, .seed = seed, .params = params})[0];
}

std::string termination(const EpisodeResult& r) {
  return r.output.metadata["termination"].get<std::string>();
}

TEST(CalcAgent, PerfectEpisode) {
  const Task t = one_task("calc");
  const std::string expr = t.metadata["expression"].get<std::string>();
  const std::string answer = t.metadata["answer"].dump();
  ScriptedChatModel model({{calc_call(expr)}, {"<answer>" + answer + "</answer>"}});
  EpisodeResult r = builtin_task("calc").run_episode(t, model);
  EXPECT_EQ(r.output.reward, 1.0);
  EXPECT_TRUE(r.output.is_success);
  EXPECT_EQ(termination(r), "answered");
  EXPECT_EQ(r.output.metadata["task_id"], t.task_id);
  EXPECT_EQ(r.output.metadata["turns"], 2);
  EXPECT_EQ(r.output.metadata["tool_calls"], 1);
  EXPECT_EQ(r.output.log_metrics["used_tool"], 1.0);
  // The model saw system + user and the calculator tool, then its call and the tool's result.
  ASSERT_EQ(model.calls(), 2u);
  EXPECT_EQ(model.seen_messages[0].size(), 2u);
  EXPECT_EQ(model.seen_messages[0][0].role, text::Role::kSystem);
  EXPECT_EQ(model.seen_messages[0][1].content, t.main_query);
  ASSERT_EQ(model.seen_tools[0].size(), 1u);
  EXPECT_EQ(model.seen_tools[0][0]["function"]["name"], "calculator");
  const auto& second = model.seen_messages[1];
  ASSERT_EQ(second.size(), 4u);
  EXPECT_EQ(second[2].tool_calls.at(0).name, "calculator");
  EXPECT_EQ(second[3].role, text::Role::kTool);
  EXPECT_EQ(second[3].content, answer);
  EXPECT_EQ(second[3].tool_call_id, second[2].tool_calls[0].id);
  EXPECT_EQ(r.messages.size(), 5u);
  // The judge agrees with the agent on the finished conversation.
  EXPECT_EQ(builtin_task("calc").judge_episode(t, r.messages).reward, 1.0);
}

TEST(CalcAgent, WrongAnswerScoresZero) {
  const Task t = one_task("calc");
  const int64_t truth = t.metadata["answer"].get<int64_t>();
  ScriptedChatModel model({{"<answer>" + std::to_string(truth + 1) + "</answer>"}});
  EpisodeResult r = builtin_task("calc").run_episode(t, model);
  EXPECT_EQ(r.output.reward, 0.0);
  EXPECT_FALSE(r.output.is_success);
  EXPECT_EQ(termination(r), "answered");
  EXPECT_EQ(r.output.metadata["judge_reason"], "wrong_answer");
  EXPECT_EQ(r.output.metadata["tool_calls"], 0);
}

TEST(CalcAgent, GarbageEndsWithAReason) {
  const Task t = one_task("calc");
  for (const std::string garbage :
       {"", "7 7 7 <|im_start|> ???", "<answer>", "\xff\xfe not utf8"}) {
    ScriptedChatModel model({{garbage}});
    EpisodeResult r = builtin_task("calc").run_episode(t, model);
    EXPECT_EQ(r.output.reward, 0.0) << garbage;
    EXPECT_EQ(termination(r), "no_answer") << garbage;
  }
  ScriptedChatModel cut(std::vector<ScriptedTurn>{{"<answer>12", "length"}});
  EXPECT_EQ(termination(builtin_task("calc").run_episode(t, cut)), "truncated");
}

TEST(CalcAgent, MalformedToolCallEndsTheEpisode) {
  const Task t = one_task("calc");
  ScriptedChatModel model(
      {{"<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
        "\"1+\n</tool_call>"}});
  EpisodeResult r = builtin_task("calc").run_episode(t, model);
  EXPECT_EQ(r.output.reward, 0.0);
  EXPECT_EQ(termination(r), "malformed_tool_call");
  EXPECT_EQ(model.calls(), 1u);
}

TEST(CalcAgent, BadToolArgumentsGetErrorResultsAndTheAgentContinues) {
  const Task t = one_task("calc");
  const std::string answer = t.metadata["answer"].dump();
  ScriptedChatModel model(
      {{"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"1\"}}\n</tool_call>"},
       {"<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expr\": \"1\"}}\n</tool_call>"},
       {calc_call("2+*3")},
       {"<answer>" + answer + "</answer>"}});
  EpisodeResult r = builtin_task("calc").run_episode(t, model);
  EXPECT_EQ(r.output.reward, 1.0);
  EXPECT_EQ(r.output.metadata["tool_calls"], 3);
  EXPECT_EQ(r.output.log_metrics["tool_errors"], 3.0);
  std::vector<std::string> results;
  for (const auto& m : r.messages) {
    if (m.role == text::Role::kTool) results.push_back(m.content);
  }
  EXPECT_EQ(results, (std::vector<std::string>{"error: unknown tool 'calc'",
                                               "error: arguments need \"expression\"",
                                               "error: expected a number, found '*' at column 3"}));
}

TEST(CalcAgent, ToolCallLimit) {
  const Task t = one_task("calc");
  ScriptedChatModel model({{calc_call("1+1")},
                           {calc_call("1+2")},
                           {calc_call("1+3")},
                           {calc_call("1+4")},
                           {calc_call("1+5")}});
  EpisodeResult r = builtin_task("calc").run_episode(t, model);
  EXPECT_EQ(r.output.reward, 0.0);
  EXPECT_EQ(termination(r), "tool_call_limit");
  EXPECT_EQ(model.calls(), 4u);  // three allowed calls, the fourth ends it
  EXPECT_EQ(r.output.metadata["tool_calls"], 4);
  EXPECT_EQ(r.messages.back().content, "error: tool call limit reached (3)");
  // The limit is per episode and can be set by the launcher; parallel calls count one by one.
  ScriptedChatModel twice({{calc_call("1+1") + calc_call("2+2")}});
  EpisodeResult r2 = builtin_task("calc").run_episode(t, twice, AgentOptions{.max_tool_calls = 1});
  EXPECT_EQ(termination(r2), "tool_call_limit");
  EXPECT_EQ(r2.output.metadata["tool_calls"], 2);
}

TEST(CalcAgent, ModelFailuresEndCleanly) {
  const Task t = one_task("calc");
  ScriptedChatModel full({{calc_call("1+1")}, {"", "stop", ErrorCode::kResourceExhausted}});
  EpisodeResult r = builtin_task("calc").run_episode(t, full);
  EXPECT_EQ(termination(r), "context_limit");
  EXPECT_EQ(r.output.reward, 0.0);
  EXPECT_EQ(r.output.metadata["turns"], 1);
  ScriptedChatModel down({{"", "stop", ErrorCode::kUnavailable}});
  EpisodeResult r2 = builtin_task("calc").run_episode(t, down);
  EXPECT_EQ(termination(r2), "model_error");
  EXPECT_NE(r2.output.metadata["error"].get<std::string>().find("scripted failure"),
            std::string::npos);
}

TEST(CalcAgent, BrokenTaskIsAnAgentErrorNotAnException) {
  Task t = one_task("calc");
  t.metadata.erase("answer");
  t.metadata.erase("expression");
  ScriptedChatModel model({{"<answer>1</answer>"}});
  EpisodeResult r = builtin_task("calc").run_episode(t, model);
  EXPECT_EQ(termination(r), "agent_error");
  EXPECT_EQ(r.output.reward, 0.0);
  EXPECT_NE(r.output.metadata["error"].get<std::string>().find("metadata needs"),
            std::string::npos);
}

TEST(CountdownAgent, OneTurnRewards) {
  const Task t = one_task("countdown");
  const BuiltinTask& kind = builtin_task("countdown");
  ScriptedChatModel good({{"<answer>" + t.metadata["solution"].get<std::string>() + "</answer>"}});
  EpisodeResult r = kind.run_episode(t, good);
  EXPECT_EQ(r.output.reward, 1.0);
  EXPECT_EQ(termination(r), "answered");
  ScriptedChatModel wrong({{"<answer>1+1</answer>"}});
  EXPECT_DOUBLE_EQ(kind.run_episode(t, wrong).output.reward, 0.1);
  ScriptedChatModel garbage({{"banana"}});
  EpisodeResult g = kind.run_episode(t, garbage);
  EXPECT_EQ(g.output.reward, 0.0);
  EXPECT_EQ(termination(g), "no_answer");
  EXPECT_TRUE(good.seen_tools[0].empty());
}

// A model that plays frozenlake perfectly by reading the grid it is shown.
std::string oracle_move(const std::vector<text::ChatMessage>& messages) {
  const std::string& grid = messages.back().content;
  std::vector<std::string> rows;
  size_t pos = 0;
  while (pos <= grid.size()) {
    size_t e = grid.find('\n', pos);
    if (e == std::string::npos) e = grid.size();
    rows.push_back(grid.substr(pos, e - pos));
    pos = e + 1;
  }
  int pr = 0;
  int pc = 0;
  for (int r = 0; r < static_cast<int>(rows.size()); ++r) {
    size_t c = rows[static_cast<size_t>(r)].find('P');
    if (c != std::string::npos) {
      pr = r;
      pc = static_cast<int>(c);
      rows[static_cast<size_t>(r)][c] = pr == 0 && c == 0 ? 'S' : 'F';
    }
  }
  LakeMap map{rows};
  return "<action>" + std::string(move_name(best_move(map, pr, pc).value_or(Move::kDown))) +
         "</action>";
}

TEST(FrozenLakeAgent, PerfectEpisodeOnAStillLake) {
  const Task t = one_task("frozenlake");
  ScriptedChatModel model(oracle_move);
  EpisodeResult r = builtin_task("frozenlake").run_episode(t, model);
  EXPECT_EQ(r.output.reward, 1.0);
  EXPECT_EQ(termination(r), "goal");
  EXPECT_EQ(r.output.metadata["steps"], t.metadata["shortest_path"]);
  EXPECT_EQ(model.calls(), t.metadata["shortest_path"].get<size_t>());
  // The agent's conversation replays to the same reward through the judge.
  EXPECT_EQ(builtin_task("frozenlake").judge_episode(t, r.messages).reward, 1.0);
  // Each observation is the grid with P moved.
  EXPECT_EQ(model.seen_messages[0].back().content, t.main_query);
  EXPECT_NE(model.seen_messages[1].back().content, t.main_query);
}

TEST(FrozenLakeAgent, FormatErrorsHolesAndStepLimit) {
  const Task t = one_task("frozenlake");
  const BuiltinTask& kind = builtin_task("frozenlake");
  ScriptedChatModel chatty({{"I think I'll go down."}});
  EpisodeResult r = kind.run_episode(t, chatty);
  EXPECT_EQ(termination(r), "format_error");
  EXPECT_EQ(r.output.reward, 0.0);
  ScriptedChatModel two({{"<action>Down</action> <action>Right</action>"}});
  EXPECT_EQ(termination(kind.run_episode(t, two)), "format_error");

  std::vector<ScriptedTurn> walls(40, ScriptedTurn{"<action>Up</action>"});
  ScriptedChatModel stuck(walls);
  EpisodeResult s = kind.run_episode(t, stuck, AgentOptions{.max_steps = 5});
  EXPECT_EQ(termination(s), "max_steps");
  EXPECT_EQ(stuck.calls(), 5u);
  EXPECT_EQ(s.output.reward, 0.0);

  // A lake with a hole right of S.
  Task h = t;
  h.metadata["map"] = std::vector<std::string>{"SH", "FG"};
  h.init_messages = OrderedJson::array();
  ScriptedChatModel fall({{"<action>Right</action>"}});
  EpisodeResult f = kind.run_episode(h, fall);
  EXPECT_EQ(termination(f), "hole");
  EXPECT_EQ(f.output.log_metrics["fell_in_hole"], 1.0);
}

TEST(FrozenLakeAgent, SlipperyEpisodesReplayWithTheirSeed) {
  const Task t = one_task("frozenlake", {{"slippery", true}});
  const BuiltinTask& kind = builtin_task("frozenlake");
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    ScriptedChatModel model(oracle_move);
    EpisodeResult r = kind.run_episode(t, model, AgentOptions{.env_seed = seed});
    EXPECT_EQ(r.output.metadata["env_seed"], seed);
    const Judgement j = kind.judge_episode(t, r.messages, AgentOptions{.env_seed = seed});
    EXPECT_EQ(j.reward, r.output.reward);
    EXPECT_EQ(j.details["steps"], r.output.metadata["steps"]);
  }
}

}  // namespace
}  // namespace ajet::tasks
