#include "research/journal.h"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>

#include "common/error.h"
#include "common/time_text.h"
#include "store/sqlite.h"

namespace ajet::research {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, round INTEGER NOT NULL, role TEXT NOT NULL,
  confirms INTEGER, params TEXT NOT NULL, seed INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
  attempts INTEGER NOT NULL, launches INTEGER NOT NULL, runtime_s REAL NOT NULL, result REAL, error TEXT NOT NULL,
  revalidate INTEGER);
CREATE TABLE IF NOT EXISTS points (
  trial INTEGER NOT NULL, step INTEGER NOT NULL, value REAL NOT NULL, PRIMARY KEY (trial, step));
CREATE TABLE IF NOT EXISTS rungs (
  trial INTEGER NOT NULL, rung INTEGER NOT NULL, value REAL NOT NULL, step INTEGER NOT NULL, PRIMARY KEY (trial, rung));
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY, time TEXT NOT NULL, kind TEXT NOT NULL, trial INTEGER, reason TEXT NOT NULL,
  numbers TEXT NOT NULL);
)sql";

constexpr const char* kTrialColumns =
    "id, name, round, role, confirms, params, seed, status, reason, attempts, launches, runtime_s, "
    "result, error, "
    "revalidate";

TrialRow read_trial(store::Stmt& s) {
  TrialRow t;
  t.id = s.column_int(0);
  t.name = s.column_text(1);
  t.round = s.column_int(2);
  t.role = s.column_text(3);
  t.confirms = s.column_optional_int(4);
  const Json params = parse_json(s.column_text(5), "journal trial params");
  for (const auto& [k, v] : params.items()) t.params[k] = v;
  t.seed = s.column_int(6);
  t.status = s.column_text(7);
  t.reason = s.column_text(8);
  t.attempts = s.column_int(9);
  t.launches = s.column_int(10);
  t.runtime_s = s.column_double(11);
  t.result = s.column_optional_double(12);
  t.error = s.column_text(13);
  t.revalidate = s.column_optional_int(14);
  return t;
}

std::string params_json(const Params& params) {
  Json j = Json::object();
  for (const auto& [k, v] : params) j[k] = v;
  return j.dump();
}

}  // namespace

Journal::Journal(const std::filesystem::path& file) : db_(std::make_unique<store::Db>(file)) {
  db_->exec("PRAGMA journal_mode=WAL");
  db_->exec("PRAGMA synchronous=FULL");  // a decision is on disk before anything acts on it
  db_->exec(kSchema);
  if (const char* at = std::getenv("AJET_RESEARCH_KILL_AT")) kill_at_ = std::atoll(at);
  if (const char* before = std::getenv("AJET_RESEARCH_KILL_BEFORE_COMMIT"))
    kill_before_commit_ = std::string(before) == "1";
}

Journal::~Journal() = default;

void Journal::transaction(const std::function<void()>& body) {
  db_->exec("BEGIN IMMEDIATE");
  try {
    body();
  } catch (...) {
    db_->exec("ROLLBACK");
    throw;
  }
  ++transactions_;
  if (kill_at_ > 0 && transactions_ == kill_at_ && kill_before_commit_) ::kill(::getpid(), SIGKILL);
  db_->exec("COMMIT");
  if (kill_at_ > 0 && transactions_ == kill_at_) ::kill(::getpid(), SIGKILL);
}

std::optional<std::string> Journal::meta(const std::string& key) {
  store::Stmt& s = db_->prepare("SELECT value FROM meta WHERE key = ?");
  s.bind(1, key);
  if (!s.step()) return std::nullopt;
  return s.column_text(0);
}

namespace {

// Journal::meta(key) parsed whole as a T.
template <typename T>
std::optional<T> meta_number(Journal& journal, const std::filesystem::path& file,
                             const std::string& key, const char* kind) {
  const auto text = journal.meta(key);
  if (!text) return std::nullopt;
  T value{};
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end || text->empty()) {
    invalid_argument("research journal " + file.string() + ": meta '" + key + "' is '" +
                     text->substr(0, 40) + "', not " + kind +
                     " (a damaged or hand-edited journal)");
  }
  return value;
}

}  // namespace

std::optional<int64_t> Journal::meta_int(const std::string& key) {
  return meta_number<int64_t>(*this, db_->path(), key, "an integer");
}

std::optional<double> Journal::meta_double(const std::string& key) {
  return meta_number<double>(*this, db_->path(), key, "a number");
}

void Journal::set_meta(const std::string& key, const std::string& value) {
  store::Stmt& s = db_->prepare(
      "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
      "excluded.value");
  s.bind(1, key).bind(2, value);
  s.run();
}

int64_t Journal::add_trial(const TrialRow& t) {
  store::Stmt& s = db_->prepare(
      "INSERT INTO trials (name, round, role, confirms, params, seed, status, reason, attempts, "
      "launches, runtime_s, "
      "result, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, t.name)
      .bind(2, t.round)
      .bind(3, t.role)
      .bind(4, t.confirms)
      .bind(5, params_json(t.params));
  s.bind(6, t.seed).bind(7, t.status).bind(8, t.reason).bind(9, t.attempts).bind(10, t.launches);
  s.bind(11, t.runtime_s).bind(12, t.result).bind(13, t.error);
  s.run();
  return sqlite3_last_insert_rowid(db_->raw());
}

void Journal::update_trial(const TrialRow& t) {
  store::Stmt& s = db_->prepare(
      "UPDATE trials SET status = ?, reason = ?, attempts = ?, launches = ?, runtime_s = ?, result "
      "= ?, error = ?, "
      "revalidate = ? WHERE id = ?");
  s.bind(1, t.status)
      .bind(2, t.reason)
      .bind(3, t.attempts)
      .bind(4, t.launches)
      .bind(5, t.runtime_s);
  s.bind(6, t.result).bind(7, t.error).bind(8, t.revalidate).bind(9, t.id);
  s.run();
}

std::vector<TrialRow> Journal::trials() {
  store::Stmt& s =
      db_->prepare(std::string("SELECT ") + kTrialColumns + " FROM trials ORDER BY id");
  std::vector<TrialRow> out;
  while (s.step()) out.push_back(read_trial(s));
  return out;
}

TrialRow Journal::trial(int64_t id) {
  store::Stmt& s =
      db_->prepare(std::string("SELECT ") + kTrialColumns + " FROM trials WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) fail(ErrorCode::kNotFound, "journal: no trial " + std::to_string(id));
  return read_trial(s);
}

bool Journal::add_point(int64_t trial, int64_t step, double value) {
  store::Stmt& s =
      db_->prepare("INSERT OR IGNORE INTO points (trial, step, value) VALUES (?, ?, ?)");
  s.bind(1, trial).bind(2, step).bind(3, value);
  s.run();
  return sqlite3_changes(db_->raw()) > 0;
}

std::vector<Point> Journal::points(std::optional<int64_t> trial) {
  store::Stmt& s =
      trial ? db_->prepare("SELECT trial, step, value FROM points WHERE trial = ? ORDER BY step")
            : db_->prepare("SELECT trial, step, value FROM points ORDER BY trial, step");
  if (trial) s.bind(1, *trial);
  std::vector<Point> out;
  while (s.step()) out.push_back(Point{s.column_int(0), s.column_int(1), s.column_double(2)});
  return out;
}

bool Journal::add_rung(int64_t trial, int64_t rung, double value, int64_t step) {
  store::Stmt& s =
      db_->prepare("INSERT OR IGNORE INTO rungs (trial, rung, value, step) VALUES (?, ?, ?, ?)");
  s.bind(1, trial).bind(2, rung).bind(3, value).bind(4, step);
  s.run();
  return sqlite3_changes(db_->raw()) > 0;
}

std::map<int64_t, double> Journal::rung_values(int64_t rung) {
  store::Stmt& s = db_->prepare("SELECT trial, value FROM rungs WHERE rung = ?");
  s.bind(1, rung);
  std::map<int64_t, double> out;
  while (s.step()) out[s.column_int(0)] = s.column_double(1);
  return out;
}

void Journal::add_decision(const std::string& kind, std::optional<int64_t> trial,
                           const std::string& reason, const Json& numbers) {
  store::Stmt& s = db_->prepare(
      "INSERT INTO decisions (time, kind, trial, reason, numbers) VALUES (?, ?, ?, ?, ?)");
  s.bind(1, local_time_text("%Y-%m-%d %H:%M:%S"))
      .bind(2, kind)
      .bind(3, trial)
      .bind(4, reason)
      .bind(5, numbers.dump());
  s.run();
}

std::vector<Decision> Journal::decisions() {
  store::Stmt& s =
      db_->prepare("SELECT id, time, kind, trial, reason, numbers FROM decisions ORDER BY id");
  std::vector<Decision> out;
  while (s.step()) {
    out.push_back(Decision{s.column_int(0), s.column_text(1), s.column_text(2),
                           s.column_optional_int(3), s.column_text(4),
                           parse_json(s.column_text(5), "journal decision numbers")});
  }
  return out;
}

}  // namespace ajet::research
