// The task ledger's SQL (store/ledger.h): draws, what each batch did to its tasks, the rollback to
// the version a restarted engine serves, and reads.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include "store/sqlite.h"
#include "store/store.h"

namespace ajet::store {

namespace {

double ledger_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr const char* kLedgerColumns =
    "key, task_id, source, seq, drawn_step, state, step, reason, consumed, attempts, batch_id, "
    "updated_at";

LedgerRow read_ledger_row(const Stmt& s) {
  LedgerRow r;
  r.key = s.column_text(0);
  r.task_id = s.column_text(1);
  r.source = s.column_text(2);
  r.seq = s.column_int(3);
  r.drawn_step = s.column_int(4);
  r.state = s.column_text(5);
  r.step = s.column_optional_int(6);
  r.reason = s.column_text(7);
  r.consumed = s.column_int(8);
  r.attempts = s.column_int(9);
  r.batch_id = s.column_optional_int(10);
  r.updated_at = s.column_double(11);
  return r;
}

std::vector<LedgerRow> read_ledger_rows(Stmt& s) {
  std::vector<LedgerRow> out;
  while (s.step()) out.push_back(read_ledger_row(s));
  s.reset();
  return out;
}

std::optional<LedgerRow> find_ledger_row(Db& db, const std::string& sql, const std::string& bound) {
  Stmt& s = db.prepare(std::string("SELECT ") + kLedgerColumns + " FROM ledger " + sql);
  s.bind(1, bound);
  std::optional<LedgerRow> out;
  if (s.step()) out = read_ledger_row(s);
  s.reset();
  return out;
}

void write_ledger_row(Db& db, const LedgerRow& r) {
  db.prepare(
        "INSERT OR REPLACE INTO ledger (key, task_id, source, seq, drawn_step, state, step, "
        "reason, consumed, attempts, batch_id, updated_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")
      .bind(1, r.key)
      .bind(2, r.task_id)
      .bind(3, r.source)
      .bind(4, r.seq)
      .bind(5, r.drawn_step)
      .bind(6, r.state)
      .bind(7, r.step)
      .bind(8, r.reason)
      .bind(9, r.consumed)
      .bind(10, r.attempts)
      .bind(11, r.batch_id)
      .bind(12, r.updated_at)
      .run();
}

// The row done by `batch`: its state, step, reason and batch; counted unless an infra failure.
void settle_row(LedgerRow& r, const LedgerBatch& batch, const std::string& state,
                const std::string& reason, double now) {
  r.state = state;
  r.step = batch.step;
  r.reason = reason;
  r.batch_id = batch.batch_id;
  r.updated_at = now;
  if (reason != kDropInfraFailure) r.consumed += 1;
}

// One task's episodes in `batch`: its oldest draw in flight settles; with no draw in flight, a
// consumed draw of it counts again (trained twice); with no draw at all (swarm mode), each episode
// has its own row.
void settle_task(Db& db, const LedgerBatch& batch, const std::string& task_id,
                 const std::vector<std::string>& episode_uuids, const std::string& state,
                 const std::string& reason, double now) {
  std::optional<LedgerRow> draw = find_ledger_row(
      db,
      "WHERE task_id = ?1 AND seq >= 0 AND state = 'in_flight' ORDER BY drawn_step, seq LIMIT 1",
      task_id);
  if (!draw && reason != kDropInfraFailure) {
    draw =
        find_ledger_row(db,
                        "WHERE task_id = ?1 AND seq >= 0 AND consumed > 0 ORDER BY step DESC, seq "
                        "DESC LIMIT 1",
                        task_id);
    if (draw) {
      draw->consumed += 1;
      draw->updated_at = now;
      write_ledger_row(db, *draw);
      return;
    }
  }
  if (draw) {
    settle_row(*draw, batch, state, reason, now);
    write_ledger_row(db, *draw);
    return;
  }
  if (find_ledger_row(db, "WHERE task_id = ?1 AND seq >= 0 LIMIT 1", task_id)) return;
  for (const std::string& uuid : episode_uuids) {
    const std::string key = "episode:" + uuid;
    LedgerRow r = find_ledger_row(db, "WHERE key = ?1", key).value_or(LedgerRow{});
    if (r.key.empty()) {
      r.key = key;
      r.task_id = task_id;
      r.drawn_step = batch.step;
      r.attempts = 0;
    }
    if (r.state == kLedgerInFlight || r.reason == kDropInfraFailure) r.attempts += 1;
    if (r.consumed > 0 && reason != kDropInfraFailure) {
      r.consumed += 1;  // trained again although its earlier training still counts
      r.updated_at = now;
    } else {
      settle_row(r, batch, state, reason, now);
    }
    write_ledger_row(db, r);
  }
}

using TaskEpisodes = std::map<std::string, std::vector<std::string>>;  // task id -> episode uuids

TaskEpisodes episodes_by_task(const std::vector<LedgerBatch::Episode>& episodes) {
  TaskEpisodes out;
  for (const auto& e : episodes) out[e.task_id].push_back(e.uuid);
  return out;
}

}  // namespace

std::future<void> Store::ledger_draw(std::vector<LedgerRow> rows, Done done) {
  return enqueue(
      [rows = std::move(rows)](Db& db) {
        const double now = ledger_now();
        for (const LedgerRow& drawn : rows) {
          std::optional<LedgerRow> old = find_ledger_row(db, "WHERE key = ?1", drawn.key);
          if (old) {
            write_ledger_row(db, redraw_row(*old, drawn.drawn_step, now));
          } else {
            LedgerRow r = drawn;
            r.updated_at = now;
            write_ledger_row(db, r);
          }
        }
      },
      std::move(done));
}

std::future<void> Store::ledger_mark_batch(LedgerBatch batch, Done done) {
  return enqueue(
      [batch = std::move(batch)](Db& db) {
        const double now = ledger_now();
        const TaskEpisodes trained = episodes_by_task(batch.trained);
        const std::set<std::string> zero(batch.zero_variance_tasks.begin(),
                                         batch.zero_variance_tasks.end());
        for (const auto& [task, uuids] : trained) {
          if (batch.failed) {
            settle_task(db, batch, task, uuids, kLedgerDropped, kDropInfraFailure, now);
          } else if (zero.count(task) > 0) {
            settle_task(db, batch, task, uuids, kLedgerDropped, kDropZeroVariance, now);
          } else {
            settle_task(db, batch, task, uuids, kLedgerTrained, "", now);
          }
        }
        for (const auto& [task, uuids] : episodes_by_task(batch.stale)) {
          if (trained.count(task) == 0)
            settle_task(db, batch, task, uuids, kLedgerDropped, kDropStale, now);
        }
      },
      std::move(done));
}

std::future<void> Store::rollback_after(int64_t version, Done done) {
  return enqueue(
      [version](Db& db) {
        // Only this run's batches: a new run on the same store starts at kStateRunFirstBatch.
        const std::string first_text = db.query_text(
            std::string("SELECT value FROM state WHERE key = '") + kStateRunFirstBatch + "'");
        const int64_t first = first_text.empty() ? 0 : std::stoll(first_text);
        // A batch with global_step g trained into version g + 1.
        db.prepare(
              "UPDATE batches SET status = ?1 WHERE status = ?2 AND global_step >= ?3 AND id >= "
              "?4")
            .bind(1, std::string_view(kBatchRolledBack))
            .bind(2, std::string_view(kBatchTrained))
            .bind(3, version)
            .bind(4, first)
            .run();
        Stmt& s = db.prepare(std::string("SELECT ") + kLedgerColumns +
                             " FROM ledger WHERE step > ?1 AND state != 'in_flight' AND "
                             "(batch_id IS NULL OR batch_id >= ?2)");
        s.bind(1, version);
        s.bind(2, first);
        std::vector<LedgerRow> rows = read_ledger_rows(s);
        for (LedgerRow& r : rows) {
          if (reconcile_row(r, version)) write_ledger_row(db, r);
        }
      },
      std::move(done));
}

std::vector<LedgerRow> Store::ledger_rows() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare(std::string("SELECT ") + kLedgerColumns +
                                " FROM ledger ORDER BY drawn_step, source, seq, key");
  return read_ledger_rows(s);
}

std::vector<RolledBackBatch> Store::rolled_back_batches() {
  std::vector<RolledBackBatch> out;
  for (BatchRow& b : get_batches()) {
    if (b.status != kBatchRolledBack) continue;
    std::vector<EpisodeRow> episodes = get_batch_episodes(b.id);
    if (!episodes.empty()) out.push_back(RolledBackBatch{std::move(b), std::move(episodes)});
  }
  std::stable_sort(out.begin(), out.end(), [](const RolledBackBatch& a, const RolledBackBatch& b) {
    return a.batch.global_step < b.batch.global_step;
  });
  return out;
}

}  // namespace ajet::store
