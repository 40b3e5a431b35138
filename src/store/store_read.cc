// Synchronous reads on the reader connection, and recovery after a restart.
#include <mutex>

#include "common/encoding.h"
#include "common/error.h"
#include "common/json.h"
#include "store/blob.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace ajet::store {

namespace {

constexpr const char* kEpisodeColumns =
    "e.uuid, e.client_uuid, e.episode_type, e.status, e.task_id, e.optional_task_id, e.reward, "
    "e.is_success, "
    "e.metadata, e.log_metrics, e.discard_episode_timeout, e.claimed_at, e.ended_at, e.batch_id";

EpisodeRow read_episode(const Stmt& s) {
  EpisodeRow row;
  row.uuid = s.column_text(0);
  row.client_uuid = s.column_text(1);
  row.episode_type = s.column_text(2);
  row.status = s.column_text(3);
  row.task_id = s.column_text(4);
  row.optional_task_id = s.column_text(5);
  row.reward = s.column_optional_double(6);
  if (auto v = s.column_optional_int(7)) row.is_success = *v != 0;
  row.metadata = parse_stored_json(s.column_text(8), "episode " + row.uuid + " metadata");
  row.log_metrics = parse_stored_json(s.column_text(9), "episode " + row.uuid + " log_metrics");
  row.discard_episode_timeout = s.column_double(10);
  row.claimed_at = s.column_double(11);
  row.ended_at = s.column_optional_double(12);
  row.batch_id = s.column_optional_int(13);
  return row;
}

std::vector<EpisodeRow> read_episodes(Stmt& s) {
  std::vector<EpisodeRow> out;
  while (s.step()) out.push_back(read_episode(s));
  s.reset();
  return out;
}

std::vector<CallRow> read_calls(Db& db, const std::string& episode_uuid) {
  Stmt& s = db.prepare(
      "SELECT episode_uuid, call_index, agent_name, request, response, prompt_ids, message_spans, "
      "completion_ids, "
      "logprobs, raw_logprobs, policy_versions, finish_reason, latency_ms, started_at, "
      "finished_at, bodies_from, adapter "
      "FROM calls WHERE episode_uuid = ?1 ORDER BY call_index");
  s.bind(1, episode_uuid);
  std::vector<CallRow> out;
  while (s.step()) {
    CallRow c;
    c.episode_uuid = s.column_text(0);
    c.call_index = s.column_int(1);
    c.agent_name = s.column_text(2);
    c.request_json = s.column_text(3);
    c.response_json = s.column_text(4);
    std::string what = "call " + std::to_string(c.call_index) + " of episode " + c.episode_uuid;
    c.prompt_ids = decode_i32(s.column_blob(5), what + " prompt_ids");
    std::vector<int32_t> spans = decode_i32(s.column_blob(6), what + " message_spans");
    if (spans.size() % 2 != 0)
      fail(ErrorCode::kDataLoss, what + " message_spans: odd number of values");
    for (size_t i = 0; i + 1 < spans.size(); i += 2)
      c.message_spans.push_back({spans[i], spans[i + 1]});
    c.completion_ids = decode_i32(s.column_blob(7), what + " completion_ids");
    c.logprobs = decode_f32(s.column_blob(8), what + " logprobs");
    c.raw_logprobs = decode_f32(s.column_blob(9), what + " raw_logprobs");
    c.policy_versions = decode_i32(s.column_blob(10), what + " policy_versions");
    c.finish_reason = s.column_text(11);
    c.latency_ms = s.column_double(12);
    c.started_at = s.column_double(13);
    c.finished_at = s.column_double(14);
    c.bodies_from = s.column_optional_int(15);
    c.adapter = s.column_text(16);
    out.push_back(std::move(c));
  }
  s.reset();
  return out;
}

std::optional<std::string> read_state(Db& db, const std::string& key) {
  Stmt& s = db.prepare("SELECT value FROM state WHERE key = ?1");
  s.bind(1, key);
  std::optional<std::string> out;
  if (s.step()) out = s.column_blob(0);
  s.reset();
  return out;
}

}  // namespace

std::optional<std::string> Store::get_state(const std::string& key) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  return read_state(*reader_db_, key);
}

std::optional<EpisodeRow> Store::get_episode(const std::string& uuid) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare(std::string("SELECT ") + kEpisodeColumns +
                                " FROM episodes e WHERE e.uuid = ?1");
  s.bind(1, uuid);
  auto rows = read_episodes(s);
  if (rows.empty()) return std::nullopt;
  return rows.front();
}

std::string Store::resolve_episode_uuid(const std::string& id) {
  if (id.empty()) invalid_argument("an episode id (or the start of one) is required");
  std::lock_guard<std::mutex> lock(reader_mu_);
  // The uuids starting with `id`: [id, id + 0xFF) in the primary key's byte order (uuids are
  // ASCII).
  Stmt& s = reader_db_->prepare(
      "SELECT uuid FROM episodes WHERE uuid >= ?1 AND uuid < ?2 ORDER BY uuid LIMIT 2");
  s.bind(1, id);
  s.bind(2, id + "\xff");
  std::vector<std::string> found;
  while (s.step()) found.push_back(s.column_text(0));
  s.reset();
  if (found.empty())
    fail(ErrorCode::kNotFound, "no episode has the id " + id + " or an id starting with it");
  if (found.size() == 1 || found.front() == id) return found.front();
  Stmt& count = reader_db_->prepare(
      "SELECT COUNT(*) FROM (SELECT 1 FROM episodes WHERE uuid >= ?1 AND uuid < ?2 LIMIT ?3)");
  count.bind(1, id);
  count.bind(2, id + "\xff");
  count.bind(3, kEpisodeCountBound + 1);
  const int64_t n = count.step() ? count.column_int(0) : 2;
  count.reset();
  invalid_argument(
      "the episode id prefix " + id + " is ambiguous: " +
      (n > kEpisodeCountBound ? std::to_string(kEpisodeCountBound) + "+" : std::to_string(n)) +
      " episodes start with it; give more characters of the id");
}

std::vector<CallRow> Store::get_calls(const std::string& episode_uuid) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  return read_calls(*reader_db_, episode_uuid);
}

std::optional<DroppedCalls> Store::get_dropped_calls(const std::string& episode_uuid) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare(
      "SELECT batch_id, calls, bytes, policy, at FROM dropped_calls WHERE episode_uuid = ?1");
  s.bind(1, episode_uuid);
  std::optional<DroppedCalls> out;
  if (s.step()) {
    out = DroppedCalls{s.column_int(0), s.column_int(1), s.column_int(2), s.column_text(3),
                       s.column_double(4)};
  }
  s.reset();
  return out;
}

std::vector<EpisodeRow> Store::get_batch_episodes(int64_t batch_id) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s =
      reader_db_->prepare(std::string("SELECT ") + kEpisodeColumns +
                          " FROM episodes e WHERE e.batch_id = ?1 ORDER BY e.ended_at, e.rowid");
  s.bind(1, batch_id);
  return read_episodes(s);
}

std::vector<BatchRow> Store::get_batches() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare(
      "SELECT id, global_step, created_at, status, finished_at, stats FROM batches ORDER BY id");
  std::vector<BatchRow> out;
  while (s.step()) {
    BatchRow b;
    b.id = s.column_int(0);
    b.global_step = s.column_int(1);
    b.created_at = s.column_double(2);
    b.status = s.column_text(3);
    b.finished_at = s.column_optional_double(4);
    b.stats = parse_stored_json(s.column_text(5), "batch " + std::to_string(b.id) + " stats");
    out.push_back(std::move(b));
  }
  s.reset();
  return out;
}

std::vector<MetricRow> Store::get_metrics(const std::string& name) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare(
      "SELECT step, name, value, created_at FROM metrics WHERE name = ?1 ORDER BY step, rowid");
  s.bind(1, name);
  std::vector<MetricRow> out;
  while (s.step())
    out.push_back({s.column_int(0), s.column_text(1), s.column_double(2), s.column_double(3)});
  s.reset();
  return out;
}

std::vector<MetricRow> Store::get_metrics_after(const std::string& name, int64_t after_step) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare(
      "SELECT step, name, value, created_at FROM metrics WHERE name = ?1 AND step > ?2 ORDER BY "
      "step, rowid");
  s.bind(1, name);
  s.bind(2, after_step);
  std::vector<MetricRow> out;
  while (s.step())
    out.push_back({s.column_int(0), s.column_text(1), s.column_double(2), s.column_double(3)});
  s.reset();
  return out;
}

std::vector<MetricSeriesInfo> Store::list_metric_names() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  // metrics_by_name (name, step) covers this: one pass over the index, no table rows read.
  Stmt& s = reader_db_->prepare(
      "SELECT name, count(*), max(step) FROM metrics GROUP BY name ORDER BY name");
  std::vector<MetricSeriesInfo> out;
  while (s.step()) out.push_back({s.column_text(0), s.column_int(1), s.column_int(2)});
  s.reset();
  return out;
}

int64_t Store::count_episodes(const std::string& status) {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Stmt& s = reader_db_->prepare("SELECT count(*) FROM episodes WHERE status = ?1");
  s.bind(1, status);
  int64_t n = s.step() ? s.column_int(0) : 0;
  s.reset();
  return n;
}

RecoveredState Store::recover() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  Db& db = *reader_db_;
  RecoveredState out;
  out.has_data = std::stoll(db.query_text(
                     "SELECT (SELECT count(*) FROM episodes) + (SELECT count(*) FROM batches) + "
                     "(SELECT count(*) FROM state)")) > 0;
  out.episode_key_secret = read_state(db, kStateEpisodeKeySecret).value_or("");
  out.train_config_yaml = read_state(db, kStateTrainConfigYaml).value_or("");
  out.engine_status = read_state(db, kStateEngineStatus).value_or("");
  if (auto step = read_state(db, kStateGlobalStep)) {
    try {
      out.global_step = std::stoll(*step);
    } catch (const std::exception&) {
      fail(ErrorCode::kDataLoss,
           "store " + path_.string() + ": global_step '" + *step + "' is not an integer");
    }
  }
  if (auto snapshot = read_state(db, kStateRegistrySnapshot)) {
    out.registry_snapshot = parse_stored_json(*snapshot, "store registry snapshot");
  }
  out.next_batch_id = std::stoll(db.query_text("SELECT COALESCE(MAX(id), 0) + 1 FROM batches"));
  Stmt& pending = db.prepare(std::string("SELECT ") + kEpisodeColumns +
                             " FROM episodes e LEFT JOIN batches b ON b.id = e.batch_id "
                             "WHERE e.status = 'finished' AND e.episode_type = 'train' AND "
                             "(e.batch_id IS NULL OR b.id IS NULL OR b.status = 'taken') "
                             // Left out of its batch for staleness (the task ledger says so): a
                             // restart must not collect it again as if it were fresh.
                             "AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.key = 'episode:' || "
                             "e.uuid AND l.state = 'dropped' AND l.reason = 'stale') "
                             "ORDER BY e.ended_at, e.rowid");
  out.pending_finished = read_episodes(pending);
  Stmt& claimed = db.prepare(std::string("SELECT ") + kEpisodeColumns +
                             " FROM episodes e WHERE e.status IN ('claimed', 'prepared') "
                             "ORDER BY e.claimed_at, e.rowid");
  for (EpisodeRow& row : read_episodes(claimed)) {
    RecoveredEpisode episode{std::move(row), {}};
    episode.calls = read_calls(db, episode.episode.uuid);
    out.claimed.push_back(std::move(episode));
  }
  return out;
}

std::string Store::load_or_create_secret() {
  std::lock_guard<std::mutex> lock(reader_mu_);
  if (auto secret = read_state(*reader_db_, kStateEpisodeKeySecret); secret && !secret->empty())
    return *secret;
  std::string secret = hex_encode(random_bytes(32));
  put_state(kStateEpisodeKeySecret, secret).get();  // the writer never takes reader_mu_
  return secret;
}

}  // namespace ajet::store
