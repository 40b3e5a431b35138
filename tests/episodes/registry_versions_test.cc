// The front's step counter against the engine's policy version, and the async staleness bound on
// the episodes that are trained: global_step adopts the version the engine reports when it connects
// (after --resume from an older checkpoint, or none) and after each step; an async batch records
// each episode's staleness and leaves out episodes that lag more than max_staleness.
#include <gtest/gtest.h>

#include "registry_test_util.h"

namespace ajet::episodes {
namespace {

using testing::RegistryHarness;
using testing::small_options;

// A chat call of `uuid` whose generated tokens came from policy `versions`.
void record_call(RegistryHarness& h, const std::string& uuid, int64_t index,
                 std::vector<int32_t> versions) {
  store::CallRow call;
  call.episode_uuid = uuid;
  call.call_index = index;
  call.policy_versions = std::move(versions);
  ASSERT_TRUE(h.registry.record_llm_call(call));
}

TEST(RegistryVersions, EngineReadyAdoptsTheEnginesPolicyVersion) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.registry.start_booting();
  h.registry.engine_ready("engine resumed from global_step_3", 3);
  EXPECT_EQ(h.registry.global_step(), 3);
  h.end("c", h.claim("c"), "t", 1);
  Batch b = h.registry.take_batch();
  EXPECT_EQ(b.global_step, 3);
  h.registry.finish_batch(b.batch_id, Json{{"policy_version", 4}});
  EXPECT_EQ(h.registry.global_step(), 4);

  // The engine restarts from an older checkpoint (version 2): the front follows it down, and the
  // next batch trains as step 2.
  h.registry.engine_restarting("engine died");
  h.registry.engine_ready("engine resumed from global_step_2", 2);
  EXPECT_EQ(h.registry.global_step(), 2);
  h.end("c", h.claim("c"), "t", 0);
  b = h.registry.take_batch();
  EXPECT_EQ(b.global_step, 2);
  // A reply without a version keeps counting by one; one with a version wins over the count.
  h.registry.finish_batch(b.batch_id, Json::object());
  EXPECT_EQ(h.registry.global_step(), 3);
  h.end("c", h.claim("c"), "t", 0);
  b = h.registry.take_batch();
  h.registry.finish_batch(b.batch_id, Json{{"policy_version", 7}});
  EXPECT_EQ(h.registry.global_step(), 7);
}

TEST(RegistryVersions, EngineReadyWithoutAVersionKeepsTheStep) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  h.end("c", h.claim("c"), "t", 1);
  Batch b = h.registry.take_batch();
  h.registry.finish_batch(b.batch_id, Json::object());
  h.registry.engine_restarting("engine died");
  h.registry.engine_ready("engine ready");
  EXPECT_EQ(h.registry.global_step(), 1);
}

TEST(RegistryVersions, AsyncBatchesRecordStalenessAndLeaveOutEpisodesBeyondTheBound) {
  RegistryOptions o = small_options(Backbone::kAsync, 1, 1);
  o.max_staleness = 1;
  RegistryHarness h(o);
  h.start();
  // `slow` generates at version 0 and keeps running across two batches.
  const std::string slow = h.claim("c");
  record_call(h, slow, 0, {0, 0, 0});

  const std::string a = h.claim("c");
  record_call(h, a, 0, {0, 0});
  h.end("c", a, "t1", 1);
  Batch first = h.registry.take_batch();  // trains 0 -> 1
  EXPECT_EQ(first.policy_version, 0);
  EXPECT_EQ(first.summary()["staleness"][a], 0);

  const std::string b = h.claim("c");  // 1 batch behind: allowed
  record_call(h, b, 0, {0});
  h.end("c", b, "t2", 1);
  EXPECT_FALSE(h.try_claim("c").success);  // 2 behind
  h.registry.finish_batch(first.batch_id, Json{{"policy_version", 1}});
  Batch second = h.registry.take_batch();  // trains 1 -> 2 on tokens of version 0: 1 behind
  EXPECT_EQ(second.policy_version, 1);
  ASSERT_EQ(second.episodes.size(), 1u);
  EXPECT_EQ(second.summary()["staleness"][b], 1);
  EXPECT_EQ(second.summary()["staleness_max"], 1);

  record_call(h, slow, 1,
              {1, 1});  // a later call on newer weights; its oldest token stays version 0
  h.end("c", slow, "t3", 1);
  h.registry.finish_batch(second.batch_id, Json{{"policy_version", 2}});
  Batch third = h.registry.take_batch();  // would train version-0 tokens from version 2: left out
  EXPECT_EQ(third.policy_version, 2);
  EXPECT_TRUE(third.episodes.empty());
  EXPECT_EQ(third.summary()["staleness_max"], 0);
}

// torch batches are on-policy, except episodes carried over a batch boundary (a client between
// calls when the drain closed): those are held to ajet.async.max_staleness like async's.
TEST(RegistryVersions, TorchBatchesAreOnPolicyAndCarriedEpisodesAreHeldToMaxStaleness) {
  RegistryHarness h(small_options(Backbone::kTorch, 1, 1));
  h.start();
  const std::string a = h.claim("c"), carried = h.claim("c2");
  record_call(h, a, 0, {0});
  record_call(h, carried, 0, {0});
  h.end("c", a, "t", 1);
  h.now += 3;  // `carried` is idle past the drain's grace
  h.registry.sweep();
  Batch b = h.registry.take_batch();
  EXPECT_EQ(b.policy_version, 0);
  EXPECT_EQ(b.summary()["staleness_max"], 0);
  h.registry.begin_weight_export();
  h.registry.end_weight_export();
  h.registry.finish_batch(b.batch_id, Json{{"policy_version", 1}});
  h.end("c2", carried, "u", 1);
  h.now += 3;
  h.registry.sweep();
  Batch next =
      h.registry.take_batch();  // version-0 tokens trained from version 1: within max_staleness 1
  ASSERT_EQ(next.episodes.size(), 1u);
  EXPECT_EQ(next.summary()["staleness_max"], 1);
}

}  // namespace
}  // namespace ajet::episodes
