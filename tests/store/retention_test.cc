// Store::retain_calls (issue 38: the main command's 2-minute RL stage left a 210 MB store, every
// call of every step kept): the newest trained steps keep every call, older ones a sample, the
// rest's call rows go with a note per episode, and the file gives the pages back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "common/error.h"
#include "store/store.h"
#include "support/scratch_dir.h"

namespace ajet::store {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kStepEpisodes = 6;
constexpr int kEpisodeCalls = 2;

std::string retained_uuid(int step, int i) {
  return "s" + std::to_string(step) + "-e" + std::to_string(i);
}

CallRow retained_call(const std::string& uuid, int index) {
  CallRow c;
  c.episode_uuid = uuid;
  c.call_index = index;
  c.agent_name = "a";
  c.request_json = R"({"messages":[{"role":"user","content":"hi"}]})";
  c.prompt_ids.assign(20000, 7);  // 80 KB a call: the token arrays are what fills a store
  c.completion_ids = {1, 2};
  c.logprobs = {-0.5f, -0.5f};
  c.policy_versions = {0, 0};
  c.finish_reason = "stop";
  return c;
}

// One trained step: its episodes end in order i = 0, 1, ... (episode 5 of a step ends first when
// `reversed`, so the sample follows end time, not names).
void add_trained_step(Store& store, int step, bool reversed = false) {
  std::vector<std::string> uuids;
  for (int i = 0; i < kStepEpisodes; ++i) {
    EpisodeRow row;
    row.uuid = retained_uuid(step, i);
    row.client_uuid = "c";
    row.status = kEpisodeFinished;
    row.task_id = "t";
    row.reward = 1.0;
    row.claimed_at = 100.0 * step;
    row.ended_at = 100.0 * step + (reversed ? kStepEpisodes - i : i);
    store.upsert_episode(row);
    for (int k = 0; k < kEpisodeCalls; ++k) store.put_call(retained_call(row.uuid, k));
    uuids.push_back(row.uuid);
  }
  store.put_batch({step, step - 1, 100.0 * step, kBatchTaken, std::nullopt, Json::object()}, uuids);
  store.update_batch(step, kBatchTrained, 100.0 * step + 50,
                     Json{{"rollout", {{"episodes", kStepEpisodes}}}});
}

int64_t store_file_bytes(const fs::path& p) {
  return fs::exists(p) ? int64_t(fs::file_size(p)) : 0;
}

TEST(CallRetention, RecentStepsKeepEveryCallOlderOnesASampleAndTheRestAreNoted) {
  ajet::test_support::ScratchDir dir;
  Store store(dir / "s.db");
  const CallRetention retention{3, 2};
  for (int step = 1; step <= 6; ++step) {
    add_trained_step(store, step, /*reversed=*/step == 2);
    store.retain_calls(retention, 1000.0 + step);
  }
  // An eval episode and a batch being trained are never touched.
  EpisodeRow eval;
  eval.uuid = "eval-1";
  eval.episode_type = "eval";
  eval.status = kEpisodeFinished;
  store.upsert_episode(eval);
  store.put_call(retained_call("eval-1", 0));
  store.put_batch({7, 6, 700, kBatchTaken, std::nullopt, Json::object()}, {});
  store.retain_calls(retention, 2000).get();

  for (int step = 1; step <= 6; ++step) {
    for (int i = 0; i < kStepEpisodes; ++i) {
      const std::string uuid = retained_uuid(step, i);
      const bool sampled = step == 2 ? i >= kStepEpisodes - 2 : i < 2;  // the first two to end
      const bool kept = step >= 4 || sampled;
      EXPECT_EQ(store.get_calls(uuid).size(), kept ? size_t(kEpisodeCalls) : 0u) << uuid;
      std::optional<DroppedCalls> note = store.get_dropped_calls(uuid);
      ASSERT_EQ(note.has_value(), !kept) << uuid;
      if (note) {
        EXPECT_EQ(note->batch_id, step);
        EXPECT_EQ(note->calls, kEpisodeCalls);
        EXPECT_GT(note->bytes, 2 * 80000);
        EXPECT_THAT(
            note->policy,
            HasSubstr(
                "the last 3 trained steps in full, of each earlier step the first 2 episodes"));
      }
      // The episode row, its reward and its batch's stats stay.
      ASSERT_TRUE(store.get_episode(uuid).has_value()) << uuid;
      EXPECT_EQ(store.get_episode(uuid)->reward, 1.0);
    }
  }
  EXPECT_EQ(store.get_calls("eval-1").size(), 1u);
  for (const BatchRow& b : store.get_batches()) {
    if (b.id <= 6) EXPECT_EQ(b.stats["rollout"]["episodes"], kStepEpisodes) << b.id;
  }
  // The episode list counts what went.
  EpisodePageRequest one;
  one.filter.uuid = retained_uuid(1, 5);
  const EpisodePage page = store.list_episodes(one);
  ASSERT_EQ(page.episodes.size(), 1u);
  EXPECT_EQ(page.episodes[0].llm_calls, 0);
  EXPECT_EQ(page.episodes[0].llm_calls_not_retained, kEpisodeCalls);
}

TEST(CallRetention, MinusOneKeepsEveryCall) {
  ajet::test_support::ScratchDir dir;
  Store store(dir / "s.db");
  for (int step = 1; step <= 3; ++step) add_trained_step(store, step);
  store.retain_calls({-1, 0}, 1).get();
  for (int i = 0; i < kStepEpisodes; ++i) {
    EXPECT_EQ(store.get_calls(retained_uuid(1, i)).size(), size_t(kEpisodeCalls));
  }
  EXPECT_FALSE(store.get_dropped_calls(retained_uuid(1, 3)).has_value());
}

// A new store returns freed pages to the file system: the file shrinks once old steps' calls go.
TEST(CallRetention, TheFileShrinksInANewStore) {
  ajet::test_support::ScratchDir dir;
  const fs::path path = dir / "s.db";
  {
    Store store(path);
    for (int step = 1; step <= 8; ++step) add_trained_step(store, step);
  }  // closing checkpoints the WAL into the file
  const int64_t full = store_file_bytes(path);
  EXPECT_GT(full, 8 * kStepEpisodes * kEpisodeCalls * 80000);
  {
    Store store(path);
    store.retain_calls({1, 0}, 1).get();
  }
  EXPECT_LT(store_file_bytes(path), full / 4) << "was " << full;
}

// A store made before retention existed (no incremental vacuum) cannot shrink, but reuses the
// pages: refilling what retention deleted does not grow the file.
TEST(CallRetention, AnOlderStoreStopsGrowing) {
  ajet::test_support::ScratchDir dir;
  const fs::path path = dir / "s.db";
  { Store store(path); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA auto_vacuum=NONE; VACUUM;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const CallRetention retention{2, 0};
  {
    Store store(path);
    for (int step = 1; step <= 4; ++step) {
      add_trained_step(store, step);
      store.retain_calls(retention, step);
    }
  }
  const int64_t before = store_file_bytes(path);
  {
    Store store(path);
    for (int step = 5; step <= 6; ++step) {
      add_trained_step(store, step);
      store.retain_calls(retention, step);
    }
  }
  // Two steps' calls were written, and two older steps' calls freed first: within a page or two.
  EXPECT_LE(store_file_bytes(path), before + 64 * 1024) << "was " << before;
}

}  // namespace
}  // namespace ajet::store
