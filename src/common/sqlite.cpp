#include "common/sqlite.h"

#include <sqlite3.h>

#include "common/error.h"

namespace trellis::sqlite {

Database::Database(const std::filesystem::path& path, Mode mode) : where_(path.string()) {
  if (mode == kReadWrite && !path.parent_path().empty()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) fail(path.parent_path().string(), "cannot create directory: {}", ec.message());
  }
  const int flags =
      mode == kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(where_.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    fail(where_, "cannot open the database: {}", why);
  }
  try {
    sqlite3_busy_timeout(db_, 10000);
    if (mode == kReadWrite) {
      exec("PRAGMA journal_mode=WAL");
      exec("PRAGMA synchronous=FULL");
    }
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
}

Database::~Database() { sqlite3_close(db_); }

void Database::exec(const char* sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string why = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    fail(where_, "database error: {}", why);
  }
}

int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int Database::changes() const { return sqlite3_changes(db_); }

Statement::Statement(const Database& db, const std::string& sql) : db_(db) {
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &st_, nullptr) != SQLITE_OK) {
    fail(db_.where(), "database error preparing a query: {}", sqlite3_errmsg(db.handle()));
  }
}

Statement::~Statement() { sqlite3_finalize(st_); }

Statement& Statement::bind(int64_t v) {
  check(sqlite3_bind_int64(st_, ++n_, v));
  return *this;
}

Statement& Statement::bind(double v) {
  check(sqlite3_bind_double(st_, ++n_, v));
  return *this;
}

Statement& Statement::bind(const std::string& v) {
  check(sqlite3_bind_text(st_, ++n_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_.where(), "database error: {}", sqlite3_errmsg(db_.handle()));
}

int64_t Statement::i64(int col) { return sqlite3_column_int64(st_, col); }
double Statement::f64(int col) { return sqlite3_column_double(st_, col); }

std::string Statement::text(int col) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(st_, col))) : "";
}

void Statement::check(int rc) {
  if (rc != SQLITE_OK) {
    fail(db_.where(), "database error binding a value: {}", sqlite3_errmsg(db_.handle()));
  }
}

Transaction::Transaction(const Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace trellis::sqlite
