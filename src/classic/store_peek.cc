#include "classic/store_peek.h"

#include <sqlite3.h>

#include <functional>
#include <string>

namespace ajet::classic {

namespace {

// One text column of one row (the first), or nullopt; `bind` binds the statement's parameters.
std::optional<std::string> query_text(const std::filesystem::path& store_file, const char* sql,
                                      const std::function<void(sqlite3_stmt*)>& bind) {
  if (!std::filesystem::exists(store_file)) return std::nullopt;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(store_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return std::nullopt;
  }
  sqlite3_busy_timeout(db, 2000);
  std::optional<std::string> out;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK) {
    bind(stmt);
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      if (text != nullptr) out = std::string(reinterpret_cast<const char*>(text));
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

}  // namespace

std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& store_file) {
  std::optional<std::string> dir = query_text(store_file, "SELECT value FROM state WHERE key = 'latest_checkpoint'",
                                              [](sqlite3_stmt*) {});
  if (!dir || dir->empty()) return std::nullopt;
  return std::filesystem::path(*dir);
}

std::optional<Json> trained_batch_stats(const std::filesystem::path& store_file, int64_t global_step) {
  std::optional<std::string> text =
      query_text(store_file, "SELECT stats FROM batches WHERE global_step = ?1 AND status = 'trained' ORDER BY id DESC LIMIT 1",
                 [global_step](sqlite3_stmt* stmt) { sqlite3_bind_int64(stmt, 1, global_step); });
  if (!text) return std::nullopt;
  Json j = Json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

}  // namespace ajet::classic
