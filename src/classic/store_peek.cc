#include "classic/store_peek.h"

#include <sqlite3.h>

namespace ajet::classic {

std::optional<Json> trained_batch_stats(const std::filesystem::path& store_file, int64_t global_step) {
  if (!std::filesystem::exists(store_file)) return std::nullopt;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(store_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return std::nullopt;
  }
  sqlite3_busy_timeout(db, 2000);
  std::optional<Json> out;
  sqlite3_stmt* stmt = nullptr;
  const char* sql = "SELECT stats FROM batches WHERE global_step = ?1 AND status = 'trained' ORDER BY id DESC LIMIT 1";
  if (sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr) == SQLITE_OK) {
    sqlite3_bind_int64(stmt, 1, global_step);
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      if (text != nullptr) {
        Json j = Json::parse(reinterpret_cast<const char*>(text), nullptr, false);
        if (!j.is_discarded() && j.is_object()) out = std::move(j);
      }
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

}  // namespace ajet::classic
