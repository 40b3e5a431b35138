// The cocktail-training throttle (same rules and cases as
// clients/python/tests/test_client_units.py).
#include "client/throttle.h"

#include <gtest/gtest.h>

namespace ajet::client {
namespace {

struct RunningEpisode {
  std::string uuid, client, task;
};

Json pool(const Json& completed, const std::vector<RunningEpisode>& running, int64_t batch = 2,
          int64_t repeat = 2, const std::string& method = "rollout_until_finish_enough_tasks") {
  Json r = Json::object();
  for (const auto& e : running)
    r[e.uuid] = {{"client_uuid", e.client}, {"optional_task_id", e.task}};
  return {{"sample_collection_method", method},
          {"completed_task_target", batch},
          {"task_expected_num_repeat", repeat},
          {"completed_tasks_client_uuids", completed},
          {"running_episode_details", r}};
}

ThrottlePolicy policy(const std::string& task, double ratio = 1.5) {
  ThrottlePolicy p;
  p.current_task_id = task;
  p.ratio = ratio;
  return p;
}

TEST(ThrottleTest, NoThrottleWhileNothingRunsAndTheBatchIsNotFull) {
  RecentTasks recent;
  Json completed = {{"a", {"me"}}, {"b", {"me"}}, {"c", {"me"}}};
  EXPECT_FALSE(throttle_decision(policy("new", 1.0), pool(completed, {}), "me", recent));
  EXPECT_TRUE(recent.contains("new"));
}

TEST(ThrottleTest, ANewTaskIsHeldBackAtBatchTimesRatioOwnTasks) {
  RecentTasks recent;
  auto three = pool(Json::object(), {{"e1", "me", "a"}, {"e2", "me", "b"}, {"e3", "me", "c"}});
  auto reason = throttle_decision(policy("new"), three, "me", recent);
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("3 distinct tasks"), std::string::npos) << *reason;
  EXPECT_FALSE(recent.contains("new"));
  auto two = pool(Json::object(), {{"e1", "me", "a"}, {"e2", "me", "b"}});
  EXPECT_FALSE(throttle_decision(policy("new"), two, "me", recent));
}

TEST(ThrottleTest, TasksInTheBatchOrSeenRecentlyAreNeverHeldBack) {
  auto p = pool(Json::object(),
                {{"e1", "me", "a"}, {"e2", "me", "b"}, {"e3", "me", "c"}, {"e4", "other", "x"}});
  for (const char* task : {"a", "x"}) {
    RecentTasks recent;
    EXPECT_FALSE(throttle_decision(policy(task, 1.0), p, "me", recent)) << task;
  }
  RecentTasks recent;
  recent.remember("z", 2, 2);
  EXPECT_FALSE(throttle_decision(policy("z", 1.0), p, "me", recent));
  EXPECT_TRUE(throttle_decision(policy("y", 1.0), p, "me", recent));
}

TEST(ThrottleTest, TasksSharedWithOtherClientsDoNotCount) {
  RecentTasks recent;
  auto p = pool(Json::object(), {{"e1", "me", "a"},
                                 {"e2", "other", "a"},
                                 {"e3", "me", "b"},
                                 {"e4", "other", "b"},
                                 {"e5", "me", "c"}});
  EXPECT_FALSE(throttle_decision(policy("new", 1.0), p, "me", recent));
}

TEST(ThrottleTest, TheRecentBufferIsBounded) {
  RecentTasks recent;
  for (int i = 0; i < 20; ++i) recent.remember("t" + std::to_string(i), 1, 2);
  EXPECT_TRUE(recent.contains("t19"));
  EXPECT_FALSE(recent.contains("t13"));  // capacity 1 x 2 x 3 = 6
  EXPECT_TRUE(recent.contains("t14"));
}

TEST(ThrottleTest, BadPoliciesAndOtherTriggersAreErrorsNamingTheProblem) {
  RecentTasks recent;
  try {
    throttle_decision(policy("a"),
                      pool(Json::object(), {}, 2, 2, "rollout_until_finish_enough_episodes"), "me",
                      recent);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rollout_until_finish_enough_tasks"), std::string::npos);
  }
  EXPECT_THROW(throttle_decision(policy(""), pool(Json::object(), {}), "me", recent), Error);
  EXPECT_THROW(throttle_decision(policy("a"), Json{{"sample_collection_method", ""}}, "me", recent),
               Error);
}

}  // namespace
}  // namespace ajet::client
