#include "store/sqlite.h"

#include "common/error.h"

namespace ajet::store {

namespace {

ErrorCode code_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_FORMAT: return ErrorCode::kDataLoss;
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM: return ErrorCode::kIo;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return ErrorCode::kUnavailable;
    case SQLITE_CONSTRAINT: return ErrorCode::kFailedPrecondition;
    default: return ErrorCode::kInternal;
  }
}

}  // namespace

Db::Db(const std::filesystem::path& path) : path_(path) {
  int rc =
      sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    fail(code_for(rc), "store " + path.string() + ": cannot open: " + message);
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, 10000);
}

Db::~Db() {
  cache_.clear();  // statements must be finalized before the connection closes
  sqlite3_close(db_);
}

void Db::raise(int rc, std::string_view what) const {
  std::string message = sqlite3_errmsg(db_);
  if ((rc & 0xff) == SQLITE_NOTADB) message += " (not an AgentJet store, or a corrupt one)";
  fail(code_for(rc),
       "store " + path_.string() + ": " + message + " (while " + std::string(what) + ")");
}

void Db::exec(std::string_view sql) {
  std::string text(sql);
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) raise(rc, text.substr(0, 60));
}

Stmt& Db::prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) it = cache_.emplace(sql, std::make_unique<Stmt>(*this, sql)).first;
  it->second->reset();
  return *it->second;
}

std::string Db::query_text(const std::string& sql) {
  Stmt& s = prepare(sql);
  std::string out = s.step() ? s.column_text(0) : "";
  s.reset();
  return out;
}

Stmt::Stmt(Db& db, std::string_view sql) : db_(db) {
  int rc = sqlite3_prepare_v2(db.raw(), sql.data(), int(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) db.raise(rc, "preparing " + std::string(sql.substr(0, 60)));
}

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

Stmt& Stmt::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}
Stmt& Stmt::bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}
Stmt& Stmt::bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_, index, text.data(), int(text.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::bind_blob(int index, std::string_view bytes) {
  sqlite3_bind_blob(stmt_, index, bytes.data(), int(bytes.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::bind_null(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}
Stmt& Stmt::bind(int index, const std::optional<int64_t>& value) {
  return value ? bind(index, *value) : bind_null(index);
}
Stmt& Stmt::bind(int index, const std::optional<double>& value) {
  return value ? bind(index, *value) : bind_null(index);
}

bool Stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.raise(rc, std::string("running ") + sqlite3_sql(stmt_));
}

void Stmt::run() {
  while (step()) {
  }
  reset();
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Stmt::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
int64_t Stmt::column_int(int column) const { return sqlite3_column_int64(stmt_, column); }
double Stmt::column_double(int column) const { return sqlite3_column_double(stmt_, column); }
std::string Stmt::column_text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  return p == nullptr
             ? std::string()
             : std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, column));
}
std::string Stmt::column_blob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  return p == nullptr
             ? std::string()
             : std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, column));
}
std::optional<int64_t> Stmt::column_optional_int(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_int(column);
}
std::optional<double> Stmt::column_optional_double(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_double(column);
}

}  // namespace ajet::store
