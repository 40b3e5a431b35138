// The overwatch rendering of a server snapshot (the terminal only draws these lines).
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
  s.status = {{"engine_status", "ENGINE.ROLLING"}, {"engine_status_detail", "engine ready (pid 42)"}, {"global_step", 3}};
  s.pool = {
      {"sample_collection_method", "rollout_until_finish_enough_tasks"},
      {"completed_episodes", 5},
      {"completed_episode_target", 8},
      {"completed_tasks", 1},
      {"completed_task_target", 4},
      {"completed_non_dummy_tasks", 0},
      {"completed_non_dummy_task_target", 4},
      {"task_expected_num_repeat", 2},
      {"completed_tasks_details", {{"task-a", {"aaaaaaaa1111", "bbbbbbbb2222"}}, {"task-b", {"cccccccc3333"}}}},
      {"completed_tasks_reward_stats",
       {{"task-a", {{"episodes", 2}, {"reward_mean", 0.5}, {"reward_std", 0.5}}},
        {"task-b", {{"episodes", 1}, {"reward_mean", 1.0}, {"reward_std", 0.0}}}}},
      {"running_episode_details",
       {{"ep-quiet", {{"episode_status", "claimed"}, {"time_since_last_activity", "50.0s"},
                      {"discard_episode_timeout", "60.0s"}, {"llm_call_count", "2"}, {"client_uuid", "client-1"},
                      {"optional_task_id", "task-c"}}},
        {"ep-busy", {{"episode_status", "claimed"}, {"time_since_last_activity", "0.5s"},
                     {"discard_episode_timeout", "60.0s"}, {"llm_call_count", "9"}, {"client_uuid", "client-2"},
                     {"optional_task_id", ""}}}}},
      {"registered_episodes", 6},
      {"claimed_episodes", 2},
      {"pool_size", 8},
      {"backbone", "debug"}};
  s.logs = Json::array({{{"timestamp", 1'800'000'000.0}, {"tag", "engine"}, {"message", "engine ready"}}});
  return s;
}

std::string line_with(const std::vector<StyledLine>& lines, const std::string& needle, LineStyle* style = nullptr) {
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
  EXPECT_THAT(line_with(lines, "Engine:"), HasSubstr("ENGINE.ROLLING  global step 3  backbone debug"));
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
