// Opening (schema, version checks, WAL) and the writer thread with group commit.
#include "store/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "store/blob.h"
#include "store/sqlite.h"

namespace ajet::store {

namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE episodes (
  uuid TEXT PRIMARY KEY,
  client_uuid TEXT NOT NULL,
  episode_type TEXT NOT NULL,
  status TEXT NOT NULL,
  task_id TEXT NOT NULL,
  optional_task_id TEXT NOT NULL,
  reward REAL,
  is_success INTEGER,
  metadata TEXT NOT NULL,
  log_metrics TEXT NOT NULL,
  discard_episode_timeout REAL NOT NULL,
  claimed_at REAL NOT NULL,
  ended_at REAL,
  batch_id INTEGER
);
CREATE INDEX episodes_by_status ON episodes(status, episode_type);
CREATE INDEX episodes_by_batch ON episodes(batch_id);
CREATE TABLE calls (
  episode_uuid TEXT NOT NULL,
  call_index INTEGER NOT NULL,
  agent_name TEXT NOT NULL,
  request TEXT NOT NULL,
  response TEXT NOT NULL,
  prompt_ids BLOB NOT NULL,       -- int32 LE
  message_spans BLOB NOT NULL,    -- int32 LE pairs [begin, end)
  completion_ids BLOB NOT NULL,   -- int32 LE
  logprobs BLOB NOT NULL,         -- float32 LE
  raw_logprobs BLOB NOT NULL,     -- float32 LE
  policy_versions BLOB NOT NULL,  -- int32 LE
  finish_reason TEXT NOT NULL,
  latency_ms REAL NOT NULL,
  started_at REAL NOT NULL,
  finished_at REAL NOT NULL,
  bodies_from INTEGER,            -- NULL: request/response are this row's; else the call_index holding them
  adapter TEXT NOT NULL DEFAULT '', -- the LoRA adapter that generated it ('' = the base model)
  UNIQUE (episode_uuid, call_index)
);
CREATE TABLE batches (
  id INTEGER PRIMARY KEY,
  global_step INTEGER NOT NULL,
  created_at REAL NOT NULL,
  status TEXT NOT NULL,
  finished_at REAL,
  stats TEXT NOT NULL
);
CREATE TABLE metrics (
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL NOT NULL,
  created_at REAL NOT NULL
);
CREATE INDEX metrics_by_name ON metrics(name, step);
CREATE TABLE state (
  key TEXT PRIMARY KEY,
  value BLOB NOT NULL
);
)sql";

// The ledger (schema version 4): part of every new store, and what an older store gains.
constexpr const char* kLedgerSchema = R"sql(
CREATE TABLE ledger (
  key TEXT PRIMARY KEY,           -- draw:<source>:<seq> (classic) or episode:<uuid> (swarm)
  task_id TEXT NOT NULL,
  source TEXT NOT NULL,
  seq INTEGER NOT NULL,           -- position in the source's task stream; -1 for episodes
  drawn_step INTEGER NOT NULL,
  state TEXT NOT NULL,            -- in_flight | trained | dropped
  step INTEGER,                   -- trained / dropped: the policy version its batch trained into
  reason TEXT NOT NULL,           -- dropped: why
  consumed INTEGER NOT NULL,      -- times counted in the weights; > 1: trained twice
  attempts INTEGER NOT NULL,
  batch_id INTEGER,
  updated_at REAL NOT NULL
);
CREATE INDEX ledger_by_task ON ledger(task_id, state);
)sql";

// Indexes added after schema version 1 shipped: created at every open (IF NOT EXISTS), so an older
// store gains them and an older AgentJet still opens a store that has them. Keyset paging of
// GET /episodes walks episodes_by_claimed backwards; a task filter walks episodes_by_task.
constexpr const char* kLaterIndexes = R"sql(
CREATE INDEX IF NOT EXISTS episodes_by_claimed ON episodes(claimed_at, uuid);
CREATE INDEX IF NOT EXISTS episodes_by_task ON episodes(task_id, claimed_at, uuid);
CREATE TABLE IF NOT EXISTS retained_batches (
  batch_id INTEGER PRIMARY KEY,  -- a trained batch Store::retain_calls has applied to
  kept_episodes INTEGER NOT NULL,
  dropped_episodes INTEGER NOT NULL,
  at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS dropped_calls (
  episode_uuid TEXT PRIMARY KEY,  -- an episode whose calls retention deleted
  batch_id INTEGER NOT NULL,
  calls INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  policy TEXT NOT NULL,
  at REAL NOT NULL
);
)sql";

int64_t to_int(const std::string& text) { return text.empty() ? 0 : std::stoll(text); }

std::string encode_spans(const std::vector<MessageSpan>& spans) {
  std::vector<int32_t> flat;
  flat.reserve(spans.size() * 2);
  for (const auto& s : spans) {
    flat.push_back(s.begin);
    flat.push_back(s.end);
  }
  return encode_i32(flat);
}

// Takes an exclusive lock on `<store>.lock` so two fronts never share a store. The kernel drops it
// when the process dies, however it dies.
int lock_store(const std::filesystem::path& path) {
  std::string lock_path = path.string() + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(ErrorCode::kIo, "store " + path.string() + ": cannot open lock file " + lock_path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    fail(ErrorCode::kFailedPrecondition, "store " + path.string() +
                                             " is in use by another process (lock " + lock_path +
                                             " is held)");
  }
  return fd;
}

void check_and_create_schema(Db& db, bool fsync_each_commit) {
  const std::string where = "store " + db.path().string();
  int64_t app_id = to_int(db.query_text("PRAGMA application_id"));  // SQLITE_NOTADB surfaces here
  int64_t version = to_int(db.query_text("PRAGMA user_version"));
  if (version > kSchemaVersion) {
    fail(ErrorCode::kFailedPrecondition,
         where + " was written by a newer AgentJet (schema version " + std::to_string(version) +
             ", this build reads up to " + std::to_string(kSchemaVersion) +
             "): upgrade AgentJet, or use another store file");
  }
  if (app_id != 0 && app_id != kApplicationId) {
    fail(ErrorCode::kDataLoss, where +
                                   " is a SQLite database of another application (application_id " +
                                   std::to_string(app_id) + "), not an AgentJet store");
  }
  if (app_id == 0 && to_int(db.query_text("SELECT count(*) FROM sqlite_master")) > 0) {
    fail(ErrorCode::kDataLoss,
         where + " is a SQLite database without the AgentJet marker, not an AgentJet store");
  }
  // Pages freed by retention (Store::retain_calls) go back to the file system. Only a store without
  // tables can take this (and only before WAL is on); an older store reuses its free pages instead.
  if (version == 0) db.exec("PRAGMA auto_vacuum=INCREMENTAL");
  std::string mode = db.query_text("PRAGMA journal_mode=WAL");
  if (mode != "wal")
    fail(ErrorCode::kIo, where + ": cannot enable WAL mode (journal_mode is '" + mode + "')");
  db.exec(fsync_each_commit ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
  if (version == 0) {
    db.exec("BEGIN IMMEDIATE");
    db.exec(kSchema);
    db.exec(kLedgerSchema);
    db.exec("PRAGMA application_id=" + std::to_string(kApplicationId));
    db.exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
    db.exec("COMMIT");
  } else if (version < kSchemaVersion) {
    db.exec("BEGIN IMMEDIATE");
    // Version 1 kept every choice's own copy of the bodies; its rows read as bodies_from NULL.
    if (version < 2) db.exec("ALTER TABLE calls ADD COLUMN bodies_from INTEGER");
    // Version 2 knew no adapters: its calls are the base model's.
    if (version < 3) db.exec("ALTER TABLE calls ADD COLUMN adapter TEXT NOT NULL DEFAULT ''");
    // Version 3 kept no ledger: the rows start with the next draw or batch.
    if (version < 4) db.exec(kLedgerSchema);
    db.exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
    db.exec("COMMIT");
  }
  db.exec(kLaterIndexes);
}

}  // namespace

Store::Store(const std::filesystem::path& path, Options options) : path_(path), options_(options) {
  lock_fd_ = lock_store(path);
  try {
    writer_db_ = std::make_unique<Db>(path);
    check_and_create_schema(*writer_db_, options.fsync_each_commit);
    reader_db_ = std::make_unique<Db>(path);
    reader_db_->exec("PRAGMA query_only=1");
  } catch (...) {
    reader_db_.reset();
    writer_db_.reset();
    ::close(lock_fd_);
    throw;
  }
  writer_ = std::thread([this] { writer_loop(); });
}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  writer_.join();
  reader_db_.reset();
  writer_db_.reset();
  ::close(lock_fd_);
}

std::future<void> Store::enqueue(std::function<void(Db&)> apply, Done done) {
  Job job{std::move(apply), {}, std::move(done)};
  std::future<void> result = job.promise.get_future();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!stopping_) {
      queue_.push_back(std::move(job));
      queue_cv_.notify_one();
      return result;
    }
  }
  auto error = std::make_exception_ptr(
      Error(ErrorCode::kFailedPrecondition, "store " + path_.string() + " is closing"));
  job.promise.set_exception(error);
  if (job.done) job.done(error);
  return result;
}

void Store::writer_loop() {
  for (;;) {
    std::vector<Job> group;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      while (!queue_.empty() && group.size() < options_.max_group) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    commit_group(group);
  }
}

// One transaction for the whole group; each job in its own savepoint so one bad write fails alone.
void Store::commit_group(std::vector<Job>& group) {
  Db& db = *writer_db_;
  std::vector<std::exception_ptr> errors(group.size());
  std::exception_ptr commit_error;
  try {
    db.exec("BEGIN IMMEDIATE");
    for (size_t i = 0; i < group.size(); ++i) {
      if (!group[i].apply) continue;  // a flush marker
      try {
        db.exec("SAVEPOINT job");
        group[i].apply(db);
        db.exec("RELEASE job");
      } catch (...) {
        errors[i] = std::current_exception();
        // If even this fails the transaction is broken; the outer catch fails the whole group.
        db.exec("ROLLBACK TO job");
        db.exec("RELEASE job");
      }
    }
    db.exec("COMMIT");
  } catch (...) {
    commit_error = std::current_exception();
    try {
      db.exec("ROLLBACK");
    } catch (...) {
    }
  }
  for (size_t i = 0; i < group.size(); ++i) {
    std::exception_ptr error = commit_error ? commit_error : errors[i];
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        log().error("store write failed: {}", e.what());
      }
      group[i].promise.set_exception(error);
    } else {
      group[i].promise.set_value();
    }
    if (group[i].done) {
      try {
        group[i].done(error);
      } catch (const std::exception& e) {
        log().error("store completion callback threw: {}", e.what());
      }
    }
  }
}

std::future<void> Store::upsert_episode(EpisodeRow row, Done done) {
  return enqueue(
      [row = std::move(row)](Db& db) {
        db.prepare(
              "INSERT OR REPLACE INTO episodes (uuid, client_uuid, episode_type, status, task_id, "
              "optional_task_id, "
              "reward, is_success, metadata, log_metrics, discard_episode_timeout, claimed_at, "
              "ended_at, batch_id) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)")
            .bind(1, row.uuid)
            .bind(2, row.client_uuid)
            .bind(3, row.episode_type)
            .bind(4, row.status)
            .bind(5, row.task_id)
            .bind(6, row.optional_task_id)
            .bind(7, row.reward)
            .bind(8,
                  row.is_success ? std::optional<int64_t>(*row.is_success ? 1 : 0) : std::nullopt)
            .bind(9, row.metadata.dump())
            .bind(10, row.log_metrics.dump())
            .bind(11, row.discard_episode_timeout)
            .bind(12, row.claimed_at)
            .bind(13, row.ended_at)
            .bind(14, row.batch_id)
            .run();
      },
      std::move(done));
}

std::future<void> Store::retire_episode(std::string uuid, std::string status, double ended_at,
                                        Done done) {
  return enqueue(
      [uuid = std::move(uuid), status = std::move(status), ended_at](Db& db) {
        db.prepare("UPDATE episodes SET status = ?1, ended_at = ?2 WHERE uuid = ?3")
            .bind(1, status)
            .bind(2, ended_at)
            .bind(3, uuid)
            .run();
        db.prepare("DELETE FROM calls WHERE episode_uuid = ?1").bind(1, uuid).run();
      },
      std::move(done));
}

std::future<void> Store::put_call(CallRow row, Done done) {
  return enqueue(
      [row = std::move(row)](Db& db) {
        db.prepare(
              "INSERT OR REPLACE INTO calls (episode_uuid, call_index, agent_name, request, "
              "response, prompt_ids, "
              "message_spans, completion_ids, logprobs, raw_logprobs, policy_versions, "
              "finish_reason, latency_ms, "
              "started_at, finished_at, bodies_from, adapter) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)")
            .bind(1, row.episode_uuid)
            .bind(2, row.call_index)
            .bind(3, row.agent_name)
            .bind(4, row.request_json)
            .bind(5, row.response_json)
            .bind_blob(6, encode_i32(row.prompt_ids))
            .bind_blob(7, encode_spans(row.message_spans))
            .bind_blob(8, encode_i32(row.completion_ids))
            .bind_blob(9, encode_f32(row.logprobs))
            .bind_blob(10, encode_f32(row.raw_logprobs))
            .bind_blob(11, encode_i32(row.policy_versions))
            .bind(12, row.finish_reason)
            .bind(13, row.latency_ms)
            .bind(14, row.started_at)
            .bind(15, row.finished_at)
            .bind(16, row.bodies_from)
            .bind(17, row.adapter)
            .run();
      },
      std::move(done));
}

std::future<void> Store::put_batch(BatchRow row, std::vector<std::string> episode_uuids,
                                   Done done) {
  return enqueue(
      [row = std::move(row), uuids = std::move(episode_uuids)](Db& db) {
        db.prepare(
              "INSERT OR REPLACE INTO batches (id, global_step, created_at, status, finished_at, "
              "stats) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
            .bind(1, row.id)
            .bind(2, row.global_step)
            .bind(3, row.created_at)
            .bind(4, row.status)
            .bind(5, row.finished_at)
            .bind(6, row.stats.dump())
            .run();
        for (const auto& uuid : uuids) {
          db.prepare("UPDATE episodes SET batch_id = ?1 WHERE uuid = ?2")
              .bind(1, row.id)
              .bind(2, uuid)
              .run();
        }
      },
      std::move(done));
}

std::future<void> Store::update_batch(int64_t id, std::string status, double finished_at,
                                      Json stats, Done done) {
  return enqueue(
      [=, status = std::move(status), stats = std::move(stats)](Db& db) {
        db.prepare("UPDATE batches SET status = ?1, finished_at = ?2, stats = ?3 WHERE id = ?4")
            .bind(1, status)
            .bind(2, finished_at)
            .bind(3, stats.dump())
            .bind(4, id)
            .run();
      },
      std::move(done));
}

std::future<void> Store::abandon_pending(int64_t batch_id, int64_t global_step, double at,
                                         Done done) {
  return enqueue(
      [=](Db& db) {
        db.prepare(
              "INSERT OR REPLACE INTO batches (id, global_step, created_at, status, finished_at, "
              "stats) "
              "VALUES (?1, ?2, ?3, ?4, ?3, '{}')")
            .bind(1, batch_id)
            .bind(2, global_step)
            .bind(3, at)
            .bind(4, std::string_view(kBatchAbandoned))
            .run();
        db.prepare(
              "UPDATE episodes SET batch_id = ?1 WHERE status = 'finished' AND episode_type = "
              "'train' AND (batch_id IS NULL OR batch_id IN (SELECT id FROM batches WHERE status "
              "IN ('taken', 'rolled_back')))")
            .bind(1, batch_id)
            .run();
        db.prepare(
              "UPDATE batches SET status = 'abandoned', finished_at = ?1 WHERE status IN "
              "('taken', 'rolled_back')")
            .bind(1, at)
            .run();
      },
      std::move(done));
}

std::future<void> Store::put_metrics(int64_t step,
                                     std::vector<std::pair<std::string, double>> values, double at,
                                     Done done) {
  return enqueue(
      [=, values = std::move(values)](Db& db) {
        for (const auto& [name, value] : values) {
          db.prepare("INSERT INTO metrics (step, name, value, created_at) VALUES (?1, ?2, ?3, ?4)")
              .bind(1, step)
              .bind(2, name)
              .bind(3, value)
              .bind(4, at)
              .run();
        }
      },
      std::move(done));
}

std::future<void> Store::put_state(std::string key, std::string value, Done done) {
  return enqueue(
      [key = std::move(key), value = std::move(value)](Db& db) {
        db.prepare("INSERT OR REPLACE INTO state (key, value) VALUES (?1, ?2)")
            .bind(1, key)
            .bind_blob(2, value)
            .run();
      },
      std::move(done));
}

std::string call_retention_text(const CallRetention& r) {
  if (r.full_steps < 0) return "every trained step in full (ajet.store_retention.full_steps = -1)";
  return fmt::format(
      "the last {} trained step{} in full, of each earlier step the first {} episode{} "
      "(ajet.store_retention.full_steps, sample_episodes)",
      r.full_steps, r.full_steps == 1 ? "" : "s", r.sample_episodes,
      r.sample_episodes == 1 ? "" : "s");
}

namespace {

// Trained batches retention has not yet applied to, older than the newest `full_steps` trained
// ones.
std::vector<int64_t> batches_past_retention(Db& db, int64_t full_steps) {
  Stmt& s = db.prepare(
      "SELECT b.id FROM batches b WHERE b.status = 'trained' "
      "AND b.id NOT IN (SELECT id FROM batches WHERE status = 'trained' ORDER BY id DESC LIMIT ?1) "
      "AND NOT EXISTS (SELECT 1 FROM retained_batches r WHERE r.batch_id = b.id) ORDER BY b.id");
  s.bind(1, full_steps);
  std::vector<int64_t> out;
  while (s.step()) out.push_back(s.column_int(0));
  s.reset();
  return out;
}

// One batch: the episodes past the first `sample_episodes` lose their calls, each noted.
void retain_batch_calls(Db& db, int64_t batch_id, int64_t sample_episodes,
                        const std::string& policy, double at) {
  Stmt& dropped = db.prepare(
      "SELECT c.episode_uuid, count(*), sum(length(c.request) + length(c.response) + "
      "length(c.prompt_ids) + "
      "length(c.message_spans) + length(c.completion_ids) + length(c.logprobs) + "
      "length(c.raw_logprobs) + "
      "length(c.policy_versions)) FROM calls c JOIN episodes e ON e.uuid = c.episode_uuid "
      "WHERE e.batch_id = ?1 AND e.uuid NOT IN "
      "(SELECT uuid FROM episodes WHERE batch_id = ?1 ORDER BY ended_at, rowid LIMIT ?2) "
      "GROUP BY c.episode_uuid");
  dropped.bind(1, batch_id).bind(2, sample_episodes);
  std::vector<DroppedCalls> notes;
  std::vector<std::string> uuids;
  while (dropped.step()) {
    uuids.push_back(dropped.column_text(0));
    notes.push_back(
        DroppedCalls{batch_id, dropped.column_int(1), dropped.column_int(2), policy, at});
  }
  dropped.reset();
  for (size_t i = 0; i < uuids.size(); ++i) {
    db.prepare("DELETE FROM calls WHERE episode_uuid = ?1").bind(1, uuids[i]).run();
    db.prepare(
          "INSERT OR REPLACE INTO dropped_calls (episode_uuid, batch_id, calls, bytes, policy, at) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .bind(1, uuids[i])
        .bind(2, batch_id)
        .bind(3, notes[i].calls)
        .bind(4, notes[i].bytes)
        .bind(5, policy)
        .bind(6, at)
        .run();
  }
  const int64_t episodes = std::stoll(
      db.query_text("SELECT count(*) FROM episodes WHERE batch_id = " + std::to_string(batch_id)));
  db.prepare(
        "INSERT OR REPLACE INTO retained_batches (batch_id, kept_episodes, dropped_episodes, at) "
        "VALUES (?1, ?2, ?3, ?4)")
      .bind(1, batch_id)
      .bind(2, episodes - int64_t(uuids.size()))
      .bind(3, int64_t(uuids.size()))
      .bind(4, at)
      .run();
}

}  // namespace

std::future<void> Store::retain_calls(CallRetention retention, double at, Done done) {
  return enqueue(
      [retention, at](Db& db) {
        if (retention.full_steps < 0) return;
        const std::string policy = call_retention_text(retention);
        bool deleted = false;
        for (int64_t batch_id : batches_past_retention(db, retention.full_steps)) {
          retain_batch_calls(db, batch_id, std::max<int64_t>(retention.sample_episodes, 0), policy,
                             at);
          deleted = true;
        }
        // No-op in a store without auto_vacuum (its free pages are reused by later writes instead).
        if (deleted) db.exec("PRAGMA incremental_vacuum");
      },
      std::move(done));
}

std::future<void> Store::flush() { return enqueue(nullptr, nullptr); }

size_t Store::queued_writes() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return queue_.size();
}

}  // namespace ajet::store
