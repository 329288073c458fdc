// Thin RAII over SQLite for the modules that keep durable state in it (the orchestrator's state,
// the ledger): a connection, prepared statements, and transactions that roll back unless
// committed. Every error names the database (`where`) and SQLite's message.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace trellis::sqlite {

// One connection. Writable ones create the file (and its directory) when absent and use WAL with
// synchronous=FULL, so that a committed transaction survives a crash; read-only ones never write.
class Database {
 public:
  enum Mode { kReadWrite, kReadOnly };
  Database(const std::filesystem::path& path, Mode mode);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& where() const { return where_; }
  // Runs one or more statements without results; Error naming the database on failure.
  void exec(const char* sql) const;
  int64_t last_insert_rowid() const;
  int changes() const;  // rows changed by the last statement

 private:
  sqlite3* db_ = nullptr;
  std::string where_;
};

// One prepared statement; bind() fills parameters left to right.
class Statement {
 public:
  Statement(const Database& db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int64_t v);
  Statement& bind(double v);
  Statement& bind(const std::string& v);
  // Advances; true while there is a row.
  bool step();
  int64_t i64(int col);
  double f64(int col);
  std::string text(int col);

 private:
  void check(int rc);
  const Database& db_;
  sqlite3_stmt* st_ = nullptr;
  int n_ = 0;
};

// BEGIN IMMEDIATE ... COMMIT; rolled back when left without commit() (an exception).
class Transaction {
 public:
  explicit Transaction(const Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  const Database& db_;
  bool done_ = false;
};

}  // namespace trellis::sqlite
