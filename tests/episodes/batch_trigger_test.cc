#include <gtest/gtest.h>

#include "common/error.h"
#include "episodes/batch_trigger.h"

namespace ajet::episodes {
namespace {

FinishedEpisode ep(const std::string& uuid, const std::string& task, double reward,
                   const std::string& client = "c") {
  FinishedEpisode e;
  e.episode_uuid = uuid;
  e.task_id = task;
  e.reward = reward;
  e.client_uuid = client;
  return e;
}

TEST(BatchProgress, CountsTasksNonDummyTasksAndStats) {
  BatchProgress p;
  p.add(ep("a1", "A", 1));
  p.add(ep("a2", "A", 0, "d"));
  p.add(ep("b1", "B", 1));
  p.add(ep("b2", "B", 1));
  p.add(ep("c1", "C", 0));
  EXPECT_EQ(p.episodes(), 5u);
  EXPECT_EQ(p.finished_tasks(2), 2u);            // A and B have 2 episodes
  EXPECT_EQ(p.finished_non_dummy_tasks(2), 1u);  // B's rewards are all equal
  EXPECT_EQ(p.finished_tasks(1), 3u);
  auto stats = p.task_stats();
  EXPECT_DOUBLE_EQ(stats["A"].reward_mean, 0.5);
  EXPECT_DOUBLE_EQ(stats["A"].reward_std, 0.5);
  EXPECT_EQ(stats["A"].client_uuids, (std::vector<std::string>{"c", "d"}));
  EXPECT_TRUE(stats["B"].all_rewards_equal);
  EXPECT_FALSE(stats["A"].all_rewards_equal);
}

TEST(BatchTrigger, EachMethodFiresAtItsThreshold) {
  BatchProgress p;
  TriggerInput in;
  in.train_batch_size = 2;
  in.num_repeat = 2;

  in.method = SampleCollection::kEnoughTasks;
  p.add(ep("a1", "A", 1));
  p.add(ep("a2", "A", 1));
  p.add(ep("b1", "B", 0));
  EXPECT_FALSE(batch_triggered(p, in));  // one finished task
  in.method = SampleCollection::kEnoughEpisodes;
  EXPECT_FALSE(batch_triggered(p, in));  // 3 < 2 * 2
  p.add(ep("c1", "C", 0));
  EXPECT_TRUE(batch_triggered(p, in));  // 4 episodes, though only one task is finished
  in.method = SampleCollection::kEnoughTasks;
  EXPECT_FALSE(batch_triggered(p, in));
  p.add(ep("b2", "B", 0));
  EXPECT_TRUE(batch_triggered(p, in));  // A and B finished
  in.method = SampleCollection::kEnoughNonDummyTasks;
  EXPECT_FALSE(batch_triggered(p, in));  // A and B both have equal rewards
  p.add(ep("c2", "C", 1));
  EXPECT_FALSE(batch_triggered(p, in));  // C is non-dummy: 1 of 2
  p.add(ep("a3", "A", 0));
  EXPECT_TRUE(batch_triggered(p, in));  // A now varies too; extra episodes stay in the task

  in.method = SampleCollection::kAnyClientAgrees;
  in.active_clients = 2;
  in.agreed_clients = 0;
  EXPECT_FALSE(batch_triggered(p, in));
  in.agreed_clients = 1;
  EXPECT_TRUE(batch_triggered(p, in));
  in.method = SampleCollection::kAllClientsAgree;
  EXPECT_FALSE(batch_triggered(p, in));
  in.agreed_clients = 2;
  EXPECT_TRUE(batch_triggered(p, in));
  BatchProgress empty;
  EXPECT_FALSE(batch_triggered(empty, in));  // agreement alone never makes an empty batch
  in.active_clients = in.agreed_clients = 0;
  EXPECT_FALSE(batch_triggered(p, in));  // nobody active: nobody agreed
}

TEST(BatchTrigger, MethodNames) {
  for (auto m : {SampleCollection::kEnoughTasks, SampleCollection::kEnoughEpisodes,
                 SampleCollection::kEnoughNonDummyTasks, SampleCollection::kAnyClientAgrees,
                 SampleCollection::kAllClientsAgree}) {
    EXPECT_EQ(parse_sample_collection(sample_collection_name(m)), m);
  }
  EXPECT_EQ(sample_collection_name(SampleCollection::kEnoughTasks),
            "rollout_until_finish_enough_tasks");
  EXPECT_THROW(parse_sample_collection("rollout_forever"), Error);
}

}  // namespace
}  // namespace ajet::episodes
