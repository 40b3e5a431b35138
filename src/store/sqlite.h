// A thin RAII layer over the SQLite C API for the store: one connection, cached prepared
// statements, errors as ajet::Error naming the database file. Internal to src/store; one thread per
// Db at a time.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ajet::store {

class Db;

// A prepared statement. bind() indices start at 1, column() indices at 0.
class Stmt {
 public:
  Stmt(Db& db, std::string_view sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int index, int64_t value);
  Stmt& bind(int index, double value);
  Stmt& bind(int index, std::string_view text);
  Stmt& bind_blob(int index, std::string_view bytes);
  Stmt& bind_null(int index);
  Stmt& bind(int index, const std::optional<int64_t>& value);
  Stmt& bind(int index, const std::optional<double>& value);

  bool step();  // true when a row is available
  void run();   // steps a statement that returns no rows
  void reset();

  bool is_null(int column) const;
  int64_t column_int(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;
  std::string column_blob(int column) const;
  std::optional<int64_t> column_optional_int(int column) const;
  std::optional<double> column_optional_double(int column) const;

 private:
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

class Db {
 public:
  explicit Db(const std::filesystem::path& path);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(std::string_view sql);
  // A cached statement for `sql`, reset with bindings cleared.
  Stmt& prepare(const std::string& sql);
  // Runs a one-row query such as "PRAGMA user_version" and returns column 0 as text ("" if no row).
  std::string query_text(const std::string& sql);

  sqlite3* raw() { return db_; }
  const std::filesystem::path& path() const { return path_; }
  // Throws the Error for SQLite result `rc` with the connection's message and `what` as context.
  [[noreturn]] void raise(int rc, std::string_view what) const;

 private:
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  std::map<std::string, std::unique_ptr<Stmt>> cache_;
};

}  // namespace ajet::store
