// The registry with a real SQLite store: durability before acknowledgement, what each episode end
// leaves on disk, and resuming after the front dies.
#include <filesystem>
#include <future>
#include <map>
#include <set>

#include "common/encoding.h"
#include "registry_test_util.h"

namespace ajet::episodes {
namespace {

namespace fs = std::filesystem;
using testing::small_options;

class TempStore {
 public:
  TempStore() : dir_(fs::temp_directory_path() / ("ajet_registry_store_" + new_uuid_hex())) {
    fs::create_directories(dir_);
  }
  ~TempStore() { fs::remove_all(dir_); }
  fs::path path() const { return dir_ / "front.db"; }

 private:
  fs::path dir_;
};

// A registry over `store` using the store's secret, on a manual clock.
struct Front {
  Front(store::Store& s, RegistryOptions options)
      : store(s),
        registry(std::move(options), EpisodeKeySigner(s.load_or_create_secret()), &s,
                 [this] { return now; }) {}

  std::string claim(const std::string& client, double timeout = 240) {
    ClaimRequest req;
    req.client_uuid = client;
    req.discard_episode_timeout = timeout;
    ClaimResponse r = registry.claim_episode(req);
    EXPECT_TRUE(r.success) << r.fail_cause;
    keys[r.episode_uuid] = r.openai_api_key;
    return r.episode_uuid;
  }
  void call(const std::string& uuid, int32_t token) {
    LlmCallTicket t = registry.begin_llm_call(uuid);
    store::CallRow row;
    row.episode_uuid = uuid;
    row.call_index = t.call_index;
    row.agent_name = "a";
    row.prompt_ids = {1, 2, token};
    row.completion_ids = {token, token};
    row.logprobs = {-0.5f, -0.25f};
    row.policy_versions = {0, 0};
    EXPECT_TRUE(registry.record_llm_call(row));
    registry.end_llm_call(uuid);
  }
  void end(const std::string& client, const std::string& uuid, const std::string& task,
           double reward) {
    registry.end_episode_wait(testing::RegistryHarness::end_request(client, uuid, task, reward));
  }

  double now = 5000;
  store::Store& store;
  Registry registry;
  std::map<std::string, std::string> keys;
};

TEST(RegistryStore, EndAnswersOnlyAfterTheEpisodeAndItsCallsAreCommitted) {
  TempStore tmp;
  store::Store store(tmp.path());
  Front f(store, small_options(Backbone::kTorch, 8, 4));
  f.registry.start_booting();
  f.registry.engine_ready();
  std::string a = f.claim("c1");
  f.call(a, 7);
  f.call(a, 8);
  std::optional<store::EpisodeRow> seen;
  size_t calls_seen = 0;
  std::promise<void> answered;
  f.registry.end_episode(testing::RegistryHarness::end_request("c1", a, "t", 0.75),
                         [&](std::optional<CommandError> error) {
                           EXPECT_FALSE(error.has_value());
                           seen = store.get_episode(a);  // what a restart would see at this moment
                           calls_seen = store.get_calls(a).size();
                           answered.set_value();
                         });
  answered.get_future().get();
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->status, store::kEpisodeFinished);
  EXPECT_EQ(seen->reward, 0.75);
  EXPECT_EQ(seen->task_id, "t");
  EXPECT_EQ(seen->metadata["task_id"], "t");
  EXPECT_EQ(calls_seen, 2u);
}

TEST(RegistryStore, AbortReclaimAndStopLeaveTheRightRows) {
  TempStore tmp;
  store::Store store(tmp.path());
  Front f(store, small_options(Backbone::kTorch, 8, 4));
  f.registry.start_booting();
  f.registry.engine_ready();
  std::string aborted = f.claim("c1"), idle = f.claim("c1", 10), finished = f.claim("c2"),
              running = f.claim("c2");
  for (const auto& uuid : {aborted, idle, running}) f.call(uuid, 3);
  f.registry.abort_episode(AbortRequest{"c1", aborted});
  f.now += 11;
  f.registry.sweep();
  f.end("c2", finished, "t", 1);
  f.registry.stop();
  store.flush().get();
  EXPECT_EQ(store.get_episode(aborted)->status, store::kEpisodeAborted);
  EXPECT_EQ(store.get_episode(idle)->status, store::kEpisodeReclaimed);
  EXPECT_EQ(store.get_episode(running)->status, store::kEpisodeDropped);
  EXPECT_EQ(store.get_episode(finished)->status,
            store::kEpisodeFinished);  // finished ones stay stored
  for (const auto& uuid : {aborted, idle, running})
    EXPECT_TRUE(store.get_calls(uuid).empty()) << uuid;
  // Stopped means abandoned: a later restart does not resume that batch.
  EXPECT_TRUE(store.recover().pending_finished.empty());
  EXPECT_EQ(store.recover().engine_status, "ENGINE.OFFLINE");
}

TEST(RegistryStore, TrainingAndDebugBatchesAreRecorded) {
  TempStore tmp;
  store::Store store(tmp.path());
  {
    Front f(store, small_options(Backbone::kTorch, 1, 2));
    f.registry.start_booting();
    f.registry.engine_ready();
    f.end("c", f.claim("c"), "t", 1);
    f.end("c", f.claim("c"), "t", 0);
    Batch b = f.registry.take_batch();
    f.registry.finish_batch(b.batch_id, Json{{"loss", 0.5}});  // blocks until the step is durable
    EXPECT_EQ(store.get_state(store::kStateGlobalStep), "1");
    auto batches = store.get_batches();
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(batches[0].status, store::kBatchTrained);
    EXPECT_EQ(batches[0].stats["loss"], 0.5);
    EXPECT_EQ(batches[0].stats["rollout"]["episodes"], 2);
    EXPECT_EQ(store.get_batch_episodes(b.batch_id).size(), 2u);
    ASSERT_EQ(store.get_metrics("rollout/reward_mean").size(), 1u);
    EXPECT_DOUBLE_EQ(store.get_metrics("rollout/reward_mean")[0].value, 0.5);
    f.registry.stop();
  }
  store.flush().get();
  store::RecoveredState r = store.recover();
  Front f(store, small_options(Backbone::kDebug, 1, 1));
  f.registry.restore(r);
  f.registry.start_booting();
  f.registry.engine_ready();
  f.end("c", f.claim("c"), "t", 1);
  store.flush().get();
  auto batches = store.get_batches();
  EXPECT_EQ(batches.back().status, store::kBatchRecorded);
  EXPECT_EQ(batches.back().global_step, 1);  // restored step, not advanced by the debug backbone
  EXPECT_EQ(f.registry.global_step(), 1);
}

// An engine that comes back on a checkpoint older than the front's step (version 1 of 2) lost the
// batch of step 2 from its weights: that batch is trained again first, with the same episodes,
// then the batch the engine was training when it died (its connection lost), as it was. No trigger
// is needed for either, and the store marks the lost batch rolled back.
TEST(RegistryStore, AnEngineBackOnAnOlderCheckpointTrainsTheLostBatchesAgain) {
  TempStore tmp;
  store::Store store(tmp.path());
  Front f(store, small_options(Backbone::kTorch, 1, 1));
  f.registry.start_booting();
  f.registry.engine_ready("", 0);
  std::vector<std::string> episodes;
  std::vector<int64_t> batch_ids;
  for (int step = 1; step <= 3; ++step) {
    const std::string uuid = f.claim("c");
    f.end("c", uuid, "t" + std::to_string(step), 1.0);
    const Batch b = f.registry.take_batch();
    episodes.push_back(uuid);
    batch_ids.push_back(b.batch_id);
    if (step < 3) f.registry.finish_batch(b.batch_id, Json{{"policy_version", step}});
  }
  f.registry.return_batch(batch_ids[2]);  // train_step: engine connection lost
  f.registry.engine_restarting("the engine died");
  f.registry.engine_ready("resumed from global_step_1", 1);
  EXPECT_EQ(f.registry.global_step(), 1);
  for (size_t again : {1u, 2u}) {
    ASSERT_TRUE(f.registry.batch_ready()) << "batch of step " << again + 1;
    const Batch b = f.registry.take_batch();
    ASSERT_EQ(b.episodes.size(), 1u);
    EXPECT_EQ(b.episodes[0].episode_uuid, episodes[again]);
    EXPECT_EQ(b.global_step, int64_t(again));
    f.registry.finish_batch(b.batch_id, Json{{"policy_version", int64_t(again) + 1}});
  }
  EXPECT_FALSE(f.registry.batch_ready());
  EXPECT_EQ(f.registry.global_step(), 3);
  std::map<int64_t, std::string> status;
  for (const store::BatchRow& row : store.get_batches()) status[row.id] = row.status;
  EXPECT_EQ(status[batch_ids[0]], store::kBatchTrained);
  EXPECT_EQ(status[batch_ids[1]], store::kBatchRolledBack);
  EXPECT_TRUE(store.rolled_back_batches().empty());  // its episode is in a trained batch again
}

TEST(RegistryStore, ARestartedFrontResumesTheBatchAndClaimedEpisodes) {
  TempStore tmp;
  std::string a, b, c, key_c;
  {
    store::Store store(tmp.path());
    Front f(store, small_options(Backbone::kTorch, 2, 2));
    f.registry.start_booting();
    f.registry.engine_ready();
    a = f.claim("c1");
    b = f.claim("c1");
    c = f.claim("c2");
    key_c = f.keys[c];
    f.call(a, 1);
    f.call(c, 2);
    f.end("c1", a, "T", 1);
    f.end("c1", b, "T", 0);
    store.flush().get();
    // The front dies here: no stop(), the registry and store just go away.
  }
  store::Store store(tmp.path());
  store::RecoveredState recovered = store.recover();
  Front f(store, small_options(Backbone::kTorch, 2, 2));
  f.registry.restore(recovered);
  f.registry.start_booting();
  f.registry.engine_ready();
  Json info = f.registry.pool_info();
  EXPECT_EQ(info["completed_episodes"], 2);
  EXPECT_EQ(info["completed_tasks"], 1);
  EXPECT_TRUE(info["running_episode_details"].contains(c));
  // The client of `c` keeps going with the key it already has.
  EpisodeKeyClaims claims = f.registry.signer().verify("Bearer " + key_c);
  EXPECT_EQ(claims.episode_uuid, c);
  EXPECT_EQ(f.registry.begin_llm_call(c).call_index, 1);  // call 0 was recorded before the crash
  EXPECT_TRUE(f.registry.can_continue_episode(EpisodeRef{"c2", c}));
  f.end("c2", c, "U", 1);
  f.end("c2", f.claim("c2"), "U", 0);
  ASSERT_TRUE(f.registry.batch_ready());
  Batch batch = f.registry.take_batch();
  std::set<std::string> uuids;
  for (const auto& e : batch.episodes) uuids.insert(e.episode_uuid);
  EXPECT_TRUE(uuids.count(a) && uuids.count(b) && uuids.count(c));
  EXPECT_EQ(store.get_calls(c).size(), 1u);
  EXPECT_EQ(store.get_calls(a).size(), 1u);
}

}  // namespace
}  // namespace ajet::episodes
