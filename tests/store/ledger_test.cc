// The task ledger (store/ledger.h): reconciliation with the version a restarted engine serves,
// redraws, the summary's skipped and duplicated counts, and the SQL that writes them, on hand-made
// cases whose right answers are worked out in the comments.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "store/ledger.h"
#include "store/store.h"
#include "support/scratch_dir.h"

namespace ajet::store {
namespace {

using TempDir = ajet::test_support::ScratchDir;

LedgerRow drawn(const std::string& task, int64_t seq, int64_t step) {
  LedgerRow r;
  r.key = draw_key("tasks", seq);
  r.task_id = task;
  r.source = "tasks";
  r.seq = seq;
  r.drawn_step = step;
  return r;
}

LedgerRow settled(LedgerRow r, const std::string& state, int64_t step,
                  const std::string& reason = "") {
  r.state = state;
  r.step = step;
  r.reason = reason;
  r.consumed = reason == kDropInfraFailure ? 0 : 1;
  return r;
}

TEST(LedgerReconcile, RowsConsumedAfterTheServedVersionGoBackInFlight) {
  // The engine resumed from the checkpoint of step 3: what steps 4 and 5 trained is gone.
  LedgerRow late = settled(drawn("a", 0, 5), kLedgerTrained, 5);
  EXPECT_TRUE(reconcile_row(late, 3));
  EXPECT_EQ(late.state, kLedgerInFlight);
  EXPECT_FALSE(late.step.has_value());
  EXPECT_EQ(late.consumed, 0);
  EXPECT_EQ(late.attempts, 2);
  LedgerRow dropped = settled(drawn("b", 1, 4), kLedgerDropped, 4, kDropZeroVariance);
  EXPECT_TRUE(reconcile_row(dropped, 3));
  EXPECT_EQ(dropped.state, kLedgerInFlight);
  EXPECT_EQ(dropped.reason, "");
  // At or before the checkpoint, in flight, or never counted: left alone.
  LedgerRow kept = settled(drawn("c", 2, 3), kLedgerTrained, 3);
  EXPECT_FALSE(reconcile_row(kept, 3));
  EXPECT_EQ(kept.state, kLedgerTrained);
  LedgerRow flying = drawn("d", 3, 4);
  EXPECT_FALSE(reconcile_row(flying, 3));
  LedgerRow failed = settled(drawn("e", 4, 4), kLedgerDropped, 4, kDropInfraFailure);
  EXPECT_FALSE(reconcile_row(failed, 3));
  EXPECT_EQ(failed.reason, kDropInfraFailure);
  LedgerRow stale;  // swarm mode: an episode left out of its batch, which no replay trains
  stale.key = "episode:u";
  stale = settled(stale, kLedgerDropped, 4, kDropStale);
  EXPECT_FALSE(reconcile_row(stale, 3));
}

TEST(LedgerReconcile, ARedrawPutsARowInFlightUnlessItCounts) {
  LedgerRow again = redraw_row(drawn("a", 0, 4), 4, 10.0);
  EXPECT_EQ(again.state, kLedgerInFlight);
  EXPECT_EQ(again.attempts, 2);
  EXPECT_EQ(again.drawn_step, 4);
  LedgerRow failed =
      redraw_row(settled(drawn("b", 1, 4), kLedgerDropped, 3, kDropInfraFailure), 4, 10.0);
  EXPECT_EQ(failed.state, kLedgerInFlight);
  EXPECT_EQ(failed.reason, "");
  // A trained row drawn again stays trained: if it trains again, the mark counts it twice.
  LedgerRow done = redraw_row(settled(drawn("c", 2, 2), kLedgerTrained, 2), 7, 10.0);
  EXPECT_EQ(done.state, kLedgerTrained);
  EXPECT_EQ(done.step, 2);
  EXPECT_EQ(done.drawn_step, 2);
}

TEST(LedgerSummary, CountsSkippedDuplicatedAndDroppedRows) {
  std::vector<LedgerRow> rows = {
      settled(drawn("a", 0, 1), kLedgerTrained, 1),
      settled(drawn("b", 1, 1), kLedgerDropped, 1, kDropZeroVariance),
      drawn("c", 2, 2),  // in flight at step 2 <= 3: skipped
      drawn("d", 3, 4),  // in flight at step 4 > 3: still running
      // seq 4 was never drawn although 5 was: skipped
      settled(drawn("f", 5, 3), kLedgerTrained, 3),
  };
  rows.back().consumed = 2;  // trained twice
  rows.back().attempts = 2;
  const LedgerSummary s = summarize(rows, 3);
  EXPECT_EQ(s.rows, 5);
  EXPECT_EQ(s.trained, 2);
  EXPECT_EQ(s.in_flight, 2);
  EXPECT_EQ(s.dropped.at(kDropZeroVariance), 1);
  EXPECT_EQ(s.skipped, 2);
  EXPECT_EQ(s.skipped_keys,
            (std::vector<std::string>{"draw:tasks:2", "draw:tasks:4 (never drawn)"}));
  EXPECT_EQ(s.duplicated, 1);
  EXPECT_EQ(s.duplicated_keys, std::vector<std::string>{"draw:tasks:5"});
  EXPECT_EQ(s.redone, 1);
  const Json j = s.to_json();
  EXPECT_EQ(j["dropped"], 1);
  EXPECT_EQ(j["dropped_by_reason"][kDropZeroVariance], 1);
}

std::map<std::string, LedgerRow> by_key(Store& store) {
  store.flush().get();
  std::map<std::string, LedgerRow> out;
  for (LedgerRow& r : store.ledger_rows()) out[r.key] = std::move(r);
  return out;
}

LedgerBatch batch_of(int64_t id, int64_t step,
                     std::vector<std::pair<std::string, std::string>> episodes) {
  LedgerBatch b;
  b.batch_id = id;
  b.step = step;
  for (auto& [uuid, task] : episodes) b.trained.push_back({uuid, task});
  return b;
}

// Classic mode: two steps of two tasks; step 2's checkpoint was lost (the engine came back at
// version 1). Its rows go back in flight and its batch is rolled back with its episodes; drawn and
// trained again, every row counts once.
TEST(LedgerStore, DrawsMarksAndRollbackAgreeWithTheCheckpoint) {
  TempDir dir;
  Store store(dir / "s.db");
  store.ledger_draw({drawn("a", 0, 1), drawn("b", 1, 1)}).get();
  store.put_batch(BatchRow{1, 0, 1.0, kBatchTrained, 2.0, Json::object()}, {}).get();
  store.ledger_mark_batch(batch_of(1, 1, {{"e1", "a"}, {"e2", "a"}, {"e3", "b"}})).get();
  store.ledger_draw({drawn("c", 2, 2), drawn("d", 3, 2)}).get();
  LedgerBatch second = batch_of(2, 2, {{"e4", "c"}, {"e5", "c"}});
  second.zero_variance_tasks = {"c"};
  second.stale = {{"e6", "d"}};  // every episode of d was too stale
  EpisodeRow e4;
  e4.uuid = "e4";
  e4.status = kEpisodeFinished;
  e4.task_id = "c";
  store.upsert_episode(e4).get();
  store.put_batch(BatchRow{2, 1, 3.0, kBatchTrained, 4.0, Json::object()}, {"e4"}).get();
  store.ledger_mark_batch(second).get();
  auto rows = by_key(store);
  EXPECT_EQ(rows["draw:tasks:0"].state, kLedgerTrained);
  EXPECT_EQ(rows["draw:tasks:0"].step, 1);
  EXPECT_EQ(rows["draw:tasks:0"].consumed, 1);  // one row per task, not per episode
  EXPECT_EQ(rows["draw:tasks:2"].reason, kDropZeroVariance);
  EXPECT_EQ(rows["draw:tasks:3"].reason, kDropStale);
  EXPECT_EQ(summarize(store.ledger_rows(), 2).skipped, 0);

  store.rollback_after(1).get();
  rows = by_key(store);
  EXPECT_EQ(rows["draw:tasks:0"].state, kLedgerTrained);  // step 1 is in the checkpoint
  EXPECT_EQ(rows["draw:tasks:2"].state, kLedgerInFlight);
  EXPECT_EQ(rows["draw:tasks:3"].state, kLedgerInFlight);
  const std::vector<RolledBackBatch> lost = store.rolled_back_batches();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].batch.id, 2);
  ASSERT_EQ(lost[0].episodes.size(), 1u);
  EXPECT_EQ(lost[0].episodes[0].uuid, "e4");
  // Before it trains again, step 2's rows are skipped for weights at version 2, not at 1.
  EXPECT_EQ(summarize(store.ledger_rows(), 1).skipped, 0);
  EXPECT_EQ(summarize(store.ledger_rows(), 2).skipped, 2);

  store.ledger_draw({drawn("c", 2, 2), drawn("d", 3, 2)}).get();  // the resumed run draws again
  store.ledger_mark_batch(batch_of(3, 2, {{"e7", "c"}, {"e8", "d"}})).get();
  rows = by_key(store);
  EXPECT_EQ(rows["draw:tasks:2"].state, kLedgerTrained);
  EXPECT_EQ(rows["draw:tasks:2"].consumed, 1);
  EXPECT_EQ(rows["draw:tasks:2"].attempts, 3);  // drawn, rolled back, drawn again
  const LedgerSummary s = summarize(store.ledger_rows(), 2);
  EXPECT_EQ(s.trained, 4);
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.duplicated, 0);
  EXPECT_EQ(s.redone, 2);

  // A batch that trains a task whose every draw already counts: trained twice.
  store.ledger_mark_batch(batch_of(4, 3, {{"e9", "a"}})).get();
  EXPECT_EQ(summarize(store.ledger_rows(), 3).duplicated, 1);
}

// Swarm mode: no draws; each acknowledged episode gets its row when its batch trains. A refused
// batch's rows are infra failures that a rollback leaves alone.
TEST(LedgerStore, SwarmEpisodesHaveARowEachAndRollBackToo) {
  TempDir dir;
  Store store(dir / "s.db");
  store.ledger_mark_batch(batch_of(1, 1, {{"u1", "t1"}, {"u2", "t1"}})).get();
  LedgerBatch refused = batch_of(2, 1, {{"u3", "t2"}});
  refused.failed = "bad input";
  store.ledger_mark_batch(refused).get();
  store.ledger_mark_batch(batch_of(3, 2, {{"u4", "t3"}})).get();
  auto rows = by_key(store);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows["episode:u1"].state, kLedgerTrained);
  EXPECT_EQ(rows["episode:u3"].reason, kDropInfraFailure);
  EXPECT_EQ(rows["episode:u3"].consumed, 0);
  store.rollback_after(1).get();
  rows = by_key(store);
  EXPECT_EQ(rows["episode:u4"].state, kLedgerInFlight);
  EXPECT_EQ(rows["episode:u3"].reason, kDropInfraFailure);
  EXPECT_EQ(summarize(store.ledger_rows(), 2).skipped, 1);  // u4, until it trains again
  store.ledger_mark_batch(batch_of(4, 2, {{"u4", "t3"}})).get();
  const LedgerSummary s = summarize(store.ledger_rows(), 2);
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.duplicated, 0);
  store.ledger_mark_batch(batch_of(5, 3, {{"u4", "t3"}})).get();  // the same episode again
  EXPECT_EQ(summarize(store.ledger_rows(), 3).duplicated, 1);
}

// A new run on the same store (start_engine without a checkpoint) starts at kStateRunFirstBatch: a
// rollback in it never reaches the batches of the run before.
TEST(LedgerStore, ARollbackStaysInsideTheRun) {
  TempDir dir;
  Store store(dir / "s.db");
  store.put_batch(BatchRow{1, 5, 1.0, kBatchTrained, 2.0, Json::object()}, {}).get();
  store.ledger_mark_batch(batch_of(1, 6, {{"old", "t"}})).get();
  store.put_state(kStateRunFirstBatch, "2").get();
  store.put_batch(BatchRow{2, 0, 3.0, kBatchTrained, 4.0, Json::object()}, {}).get();
  store.ledger_mark_batch(batch_of(2, 1, {{"new", "t2"}})).get();
  store.rollback_after(0).get();
  auto rows = by_key(store);
  EXPECT_EQ(rows["episode:old"].state, kLedgerTrained);
  EXPECT_EQ(rows["episode:new"].state, kLedgerInFlight);
  const std::vector<BatchRow> batches = store.get_batches();
  EXPECT_EQ(batches[0].status, kBatchTrained);
  EXPECT_EQ(batches[1].status, kBatchRolledBack);
}

// An episode left out of its batch for staleness has no batch; a restarted front must not collect
// it again as a fresh one (it would train with an unknown, hence zero, staleness).
TEST(LedgerStore, ARestartDoesNotCollectAStaleEpisodeAgain) {
  TempDir dir;
  {
    Store store(dir / "s.db");
    for (const char* uuid : {"fresh", "stale"}) {
      EpisodeRow e;
      e.uuid = uuid;
      e.status = kEpisodeFinished;
      e.task_id = "t";
      store.upsert_episode(e).get();
    }
    LedgerBatch b = batch_of(1, 1, {});
    b.stale = {{"stale", "t"}};
    store.ledger_mark_batch(b).get();
  }
  Store store(dir / "s.db");
  const RecoveredState r = store.recover();
  ASSERT_EQ(r.pending_finished.size(), 1u);
  EXPECT_EQ(r.pending_finished[0].uuid, "fresh");
}

// A store from before the ledger (schema version 3) gains the empty table when opened.
TEST(LedgerStore, AnOlderStoreGainsTheLedger) {
  TempDir dir;
  { Store store(dir / "s.db"); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "s.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE ledger; PRAGMA user_version=3", nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  Store store(dir / "s.db");
  EXPECT_TRUE(store.ledger_rows().empty());
  store.ledger_draw({drawn("a", 0, 1)}).get();
  EXPECT_EQ(store.ledger_rows().size(), 1u);
}

}  // namespace
}  // namespace ajet::store
