// The overwatch rendering of server snapshots, one server in full or several in blocks (the
// terminal only draws these lines).
#include "client/overwatch_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ajet::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

OverwatchSnapshot snapshot() {
  OverwatchSnapshot s;
  s.url = "http://127.0.0.1:10086";
  s.connected = true;
  s.fetched_at = 1'800'000'000;
  s.requests = 7;
  s.errors = 1;
  s.status = {{"engine_status", "ENGINE.ROLLING"},
              {"engine_status_detail", "engine ready (pid 42)"},
              {"global_step", 3}};
  s.pool = {{"sample_collection_method", "rollout_until_finish_enough_tasks"},
            {"completed_episodes", 5},
            {"completed_episode_target", 8},
            {"completed_tasks", 1},
            {"completed_task_target", 4},
            {"completed_non_dummy_tasks", 0},
            {"completed_non_dummy_task_target", 4},
            {"task_expected_num_repeat", 2},
            {"completed_tasks_details",
             {{"task-a", {"aaaaaaaa1111", "bbbbbbbb2222"}}, {"task-b", {"cccccccc3333"}}}},
            {"completed_tasks_reward_stats",
             {{"task-a", {{"episodes", 2}, {"reward_mean", 0.5}, {"reward_std", 0.5}}},
              {"task-b", {{"episodes", 1}, {"reward_mean", 1.0}, {"reward_std", 0.0}}}}},
            {"running_episode_details",
             {{"ep-quiet",
               {{"episode_status", "claimed"},
                {"time_since_last_activity", "50.0s"},
                {"discard_episode_timeout", "60.0s"},
                {"llm_call_count", "2"},
                {"client_uuid", "client-1"},
                {"optional_task_id", "task-c"}}},
              {"ep-busy",
               {{"episode_status", "claimed"},
                {"time_since_last_activity", "0.5s"},
                {"discard_episode_timeout", "60.0s"},
                {"llm_call_count", "9"},
                {"client_uuid", "client-2"},
                {"optional_task_id", ""}}}}},
            {"registered_episodes", 6},
            {"claimed_episodes", 2},
            {"pool_size", 8},
            {"backbone", "debug"}};
  s.logs = Json::array(
      {{{"timestamp", 1'800'000'000.0}, {"tag", "engine"}, {"message", "engine ready"}}});
  return s;
}

std::string line_with(const std::vector<StyledLine>& lines, const std::string& needle,
                      LineStyle* style = nullptr) {
  for (const auto& l : lines) {
    if (l.text.find(needle) != std::string::npos) {
      if (style) *style = l.style;
      return l.text;
    }
  }
  return "";
}

TEST(OverwatchViewTest, ShowsStatusProgressEpisodesTasksAndLogs) {
  auto lines = render_overwatch(snapshot(), OverwatchLayout{});
  EXPECT_THAT(line_with(lines, "Engine:"),
              HasSubstr("ENGINE.ROLLING  global step 3  backbone debug"));
  LineStyle style{};
  std::string tasks = line_with(lines, "Completed tasks", &style);
  EXPECT_THAT(tasks, HasSubstr("1 / 4"));
  EXPECT_THAT(tasks, HasSubstr("25%"));
  EXPECT_THAT(tasks, HasSubstr("(chosen)"));
  EXPECT_EQ(style, LineStyle::kChosen);
  EXPECT_THAT(line_with(lines, "Completed episodes"), Not(HasSubstr("(chosen)")));
  EXPECT_THAT(line_with(lines, "Average episodes per task"), HasSubstr("1.50 / 2 expected"));
  // Longest idle first; an episode near its discard timeout is flagged.
  std::string text = overwatch_text(snapshot(), OverwatchLayout{});
  EXPECT_LT(text.find("ep-quiet"), text.find("ep-busy"));
  line_with(lines, "ep-quiet", &style);
  EXPECT_EQ(style, LineStyle::kWarn);
  EXPECT_THAT(line_with(lines, "task-a"), HasSubstr("+0.500 ± 0.500"));
  EXPECT_THAT(line_with(lines, "task-a"), HasSubstr("aaaaaaaa bbbbbbbb"));
  EXPECT_LT(text.find("task-a"), text.find("task-b"));  // most episodes first
  EXPECT_THAT(line_with(lines, "[engine]"), HasSubstr("engine ready"));
}

TEST(OverwatchViewTest, AgreeTriggersShowTheClientsAndLimitsAreKept) {
  OverwatchSnapshot s = snapshot();
  s.pool["sample_collection_method"] = "rollout_until_all_clients_agree_sync_weight";
  s.pool["active_clients"] = {{{"client_uuid", "a"}, {"agreed_sync_weight", true}},
                              {{"client_uuid", "b"}, {"agreed_sync_weight", false}}};
  OverwatchLayout layout;
  layout.width = 60;
  layout.max_episodes = 1;
  auto lines = render_overwatch(s, layout);
  std::string agree = line_with(lines, "Clients agreeing");
  EXPECT_THAT(agree, HasSubstr("1 / 2"));
  for (const auto& l : lines) {
    size_t points = 0;
    for (unsigned char c : l.text) points += (c & 0xC0) != 0x80 ? 1 : 0;
    EXPECT_LE(points, 60u) << l.text;
  }
  EXPECT_NE(line_with(lines, "ep-quiet"), "");
  EXPECT_EQ(line_with(lines, "ep-busy"), "");  // only the longest idle one
  EXPECT_THAT(line_with(lines, "Running episodes"), HasSubstr("1 longest idle shown"));
}

// A torch-backbone status: two trained batches, then one the engine refused (GET
// /get_engine_status).
Json trained_status() {
  auto trained = [](int64_t batch, int64_t step, double reward, double loss) {
    return Json{{"batch_id", batch},
                {"global_step", step},
                {"trained", true},
                {"stats",
                 {{"loss", loss},
                  {"kl", 0.0125},
                  {"rollout",
                   {{"episodes", 8},
                    {"reward_mean", reward},
                    {"reward_std", 0.25},
                    {"success_rate", 0.75}}}}}};
  };
  return Json{{"engine_status", "ENGINE.ROLLING"},
              {"global_step", 2},
              {"recent_batches",
               {trained(0, 0, 0.1, 0.5),
                trained(1, 1, 0.625, 0.25),
                {{"batch_id", 2},
                 {"global_step", 2},
                 {"trained", false},
                 {"error", {{"code", "unavailable"}, {"message", "the engine went away"}}}}}}};
}

TEST(OverwatchViewTest, ShowsTheNewestTrainedBatchsMetricsAndARefusedOneAfterIt) {
  OverwatchSnapshot s = snapshot();
  s.status = trained_status();
  auto lines = render_overwatch(s, OverwatchLayout{});
  LineStyle style{};
  std::string batch = line_with(lines, "Newest trained batch", &style);
  EXPECT_THAT(batch, HasSubstr("step 1 (batch 1)"));
  EXPECT_THAT(batch, HasSubstr("episodes 8"));
  EXPECT_THAT(batch, HasSubstr("reward mean +0.625 ± 0.250"));
  EXPECT_THAT(batch, HasSubstr("success 75.0%"));
  EXPECT_THAT(batch, HasSubstr("loss 0.2500"));
  EXPECT_THAT(batch, HasSubstr("KL 0.0125"));
  EXPECT_EQ(style, LineStyle::kGood);
  EXPECT_THAT(line_with(lines, "was not trained", &style),
              HasSubstr("batch 2 (step 2) was not trained: unavailable: the engine went away"));
  EXPECT_EQ(style, LineStyle::kBad);
}

TEST(OverwatchViewTest, MissingMetricsReadAsDashesAndNoBatchReadsNoneYet) {
  OverwatchSnapshot s = snapshot();
  s.pool["backbone"] = "torch";
  EXPECT_THAT(line_with(render_overwatch(s, OverwatchLayout{}), "Newest trained batch"),
              HasSubstr("none yet"));
  s.pool["backbone"] = "debug";
  s.pool["batches_recorded"] = 3;
  EXPECT_THAT(line_with(render_overwatch(s, OverwatchLayout{}), "Newest trained batch"),
              HasSubstr("none (debug backbone: 3 batches recorded, nothing trains)"));
  // The echo engine reports no KL; a batch without judged episodes has success_rate null.
  s.status["recent_batches"] = {{{"batch_id", 0},
                                 {"global_step", 0},
                                 {"trained", true},
                                 {"stats",
                                  {{"loss", 0.0},
                                   {"rollout",
                                    {{"episodes", 1},
                                     {"reward_mean", 1.0},
                                     {"reward_std", 0.0},
                                     {"success_rate", nullptr}}}}}}};
  std::string batch = line_with(render_overwatch(s, OverwatchLayout{}), "Newest trained batch");
  EXPECT_THAT(batch, HasSubstr("success -"));
  EXPECT_THAT(batch, HasSubstr("loss 0.0000  KL -"));
  EXPECT_EQ(line_with(render_overwatch(s, OverwatchLayout{}), "was not trained"), "");
}

TEST(OverwatchViewTest, ShowsEachClientsShareOfTheBatchLargestFirst) {
  OverwatchSnapshot s = snapshot();
  s.pool["completed_client_shares"] = {
      {"client-small", {{"episodes", 1}, {"tasks", 1}, {"share", 0.25}}},
      {"client-big", {{"episodes", 3}, {"tasks", 2}, {"share", 0.75}}}};
  auto lines = render_overwatch(s, OverwatchLayout{});
  EXPECT_THAT(line_with(lines, "Client shares of this batch"), HasSubstr("(2)"));
  std::string big = line_with(lines, "client-big");
  EXPECT_THAT(big, HasSubstr("75%"));
  EXPECT_THAT(big, HasSubstr("3 episodes"));
  EXPECT_THAT(big, HasSubstr("2 tasks"));
  std::string text = overwatch_text(s, OverwatchLayout{});
  EXPECT_LT(text.find("client-big"), text.find("client-small"));
  OverwatchLayout one;
  one.max_clients = 1;
  EXPECT_EQ(line_with(render_overwatch(s, one), "client-small"), "");
  EXPECT_THAT(line_with(render_overwatch(s, one), "Client shares"), HasSubstr("top 1 shown"));
}

TEST(OverwatchViewTest, SeveralServersRenderOneBlockEachInOrder) {
  OverwatchSnapshot a = snapshot();
  a.url = "http://127.0.0.1:7001";
  a.status = trained_status();
  a.pool["completed_client_shares"] = {
      {"client-1", {{"episodes", 5}, {"tasks", 1}, {"share", 1.0}}}};
  OverwatchSnapshot b = snapshot();
  b.url = "http://127.0.0.1:7002";
  b.status["global_step"] = 9;
  OverwatchSnapshot down;
  down.url = "http://127.0.0.1:7003";
  down.error = "connection refused";
  down.requests = 2;
  down.errors = 2;
  auto lines = render_overwatch(std::vector<OverwatchSnapshot>{a, b, down}, OverwatchLayout{});
  EXPECT_THAT(lines.front().text, HasSubstr("3 servers"));
  EXPECT_THAT(lines.front().text, HasSubstr("requests 16  errors 4"));  // summed over the servers
  std::string text = overwatch_text(std::vector<OverwatchSnapshot>{a, b, down}, OverwatchLayout{});
  const size_t first = text.find("Server 1 of 3: http://127.0.0.1:7001");
  const size_t second = text.find("Server 2 of 3: http://127.0.0.1:7002");
  const size_t third = text.find("Server 3 of 3: http://127.0.0.1:7003");
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  ASSERT_NE(third, std::string::npos) << text;
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  // Server 1's block: its engine, its progress, its newest trained batch, its clients.
  const std::string one = text.substr(first, second - first);
  EXPECT_THAT(one, HasSubstr("Engine: ENGINE.ROLLING  global step 2"));
  EXPECT_THAT(one, HasSubstr("1 / 4"));
  EXPECT_THAT(one, HasSubstr("reward mean +0.625"));
  EXPECT_THAT(one, HasSubstr("client-1"));
  EXPECT_THAT(one, HasSubstr("Running episodes: 2"));
  const std::string two = text.substr(second, third - second);
  EXPECT_THAT(two, HasSubstr("global step 9"));
  EXPECT_THAT(two, HasSubstr("Newest trained batch: none (debug backbone"));
  EXPECT_THAT(two, HasSubstr("(none yet)"));  // no client shares
  EXPECT_THAT(text.substr(third), HasSubstr("ENGINE.CANNOT_CONNECT  (connection refused)"));
  // The blocks are compact: no per-episode rows, task tables or logs.
  EXPECT_EQ(text.find("ep-quiet"), std::string::npos);
  EXPECT_EQ(text.find("Recent log"), std::string::npos);
}

TEST(OverwatchViewTest, OneServerInAListRendersInFull) {
  OverwatchSnapshot s = snapshot();
  auto single = render_overwatch(s, OverwatchLayout{});
  auto listed = render_overwatch(std::vector<OverwatchSnapshot>{s}, OverwatchLayout{});
  ASSERT_EQ(single.size(), listed.size());
  for (size_t i = 1; i < single.size(); ++i)
    EXPECT_EQ(single[i].text, listed[i].text);  // line 0 has the clock
  EXPECT_NE(line_with(listed, "ep-quiet"), "");
}

TEST(OverwatchViewTest, AnUnreachableServerReadsCannotConnect) {
  OverwatchSnapshot s;
  s.url = "http://127.0.0.1:1";
  s.error = "connection refused";
  auto lines = render_overwatch(s, OverwatchLayout{});
  LineStyle style{};
  EXPECT_THAT(line_with(lines, "ENGINE.CANNOT_CONNECT", &style), HasSubstr("connection refused"));
  EXPECT_EQ(style, LineStyle::kBad);
}

TEST(OverwatchViewTest, FetchingFromNothingCountsAnError) {
  http::ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(2000);
  http::HttpClient http("http://127.0.0.1:1", o);
  OverwatchSnapshot s = fetch_overwatch(http, "http://127.0.0.1:1", 2.0, 4, 1);
  EXPECT_FALSE(s.connected);
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.errors, 2u);
  EXPECT_FALSE(s.error.empty());
}

}  // namespace
}  // namespace ajet::client
