// Ledger tests: entries chain and verify; an edit of any column of any entry with the real
// `sqlite3` shell, a deletion or a renumbering is named by verify (and by `trellis ledger verify`);
// only the keeper and the roles it granted may state what they state; contributions sum what
// verdicts accepted.
#include "ledger/ledger.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "common/identity.h"
#include "error_of.h"
#include "ledger/contributions.h"
#include "ledger/verify.h"
#include "nginx_process.h"  // run_command

namespace trellis::ledger {
namespace {
namespace fs = std::filesystem;
using test::run_command;

Json submission(const Identity& node, int64_t step, int64_t number, const std::string& sha,
                int64_t tokens) {
  return {{"node", node.address()}, {"step", step}, {"submission", number},
          {"sha256", sha},          {"samples", 8}, {"work_units", tokens}};
}

Json verdict(const Identity& node, int64_t step, int64_t number, const std::string& sha,
             bool accepted) {
  return {{"node", node.address()}, {"step", step},         {"submission", number},
          {"sha256", sha},          {"accepted", accepted}, {"reason", accepted ? "" : "forged"}};
}

std::string sha(char c) { return std::string(64, c); }

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trellis_ledger_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    db_ = std::make_unique<sqlite::Database>(path(), sqlite::Database::kReadWrite);
    sqlite::Transaction tx(*db_);
    ledger_ = std::make_unique<Ledger>(*db_, keeper_, "run-1", Json{{"stake", 10}});
    tx.commit();
  }
  void TearDown() override {
    ledger_.reset();
    db_.reset();
    fs::remove_all(dir_);
  }
  fs::path path() const { return dir_ / "orchestrator.sqlite"; }

  // Appends in a transaction of its own, as the orchestrator does beside its change.
  Entry add(const Statement& s) {
    sqlite::Transaction tx(*db_);
    Entry e = ledger_->append(s);
    tx.commit();
    return e;
  }
  Entry add(const std::string& kind, const Json& body) { return add(ledger_->state(kind, body)); }

  // Seven entries: pool, registration, stake, a submission accepted by a validator, one rejected
  // with a slash and an eviction.
  void fill() {
    add("registration", {{"node", node_.address()}, {"ip", "10.0.0.7"}});
    add("stake", {{"node", node_.address()}, {"amount", 10}});
    add("role", {{"address", validator_.address()}, {"role", "validator"}});
    add("submission", submission(node_, 0, 0, sha('a'), 1200));
    add(make_statement("run-1", validator_, "verdict", verdict(node_, 0, 0, sha('a'), true),
                       now_ms()));
    add("submission", submission(node_, 1, 0, sha('b'), 900));
    add(make_statement("run-1", validator_, "verdict", verdict(node_, 1, 0, sha('b'), false),
                       now_ms()));
    add("slash", {{"node", node_.address()}, {"amount", 10}, {"reason", "forged"}});
    add("eviction", {{"node", node_.address()}, {"reason", "forged"}});
  }

  Verification check(const std::string& keeper = "") {
    const sqlite::Database reader(path(), sqlite::Database::kReadOnly);
    return verify(reader, keeper);
  }

  // Runs SQL through the sqlite3 shell, as someone with the file would.
  void tamper(const std::string& sql) {
    std::string out;
    ASSERT_EQ(run_command("sqlite3 " + path().string() + " \"" + sql + "\"", &out), 0) << out;
  }

  fs::path dir_;
  Identity keeper_ = Identity::generate(), node_ = Identity::generate(),
           validator_ = Identity::generate();
  std::unique_ptr<sqlite::Database> db_;
  std::unique_ptr<Ledger> ledger_;
};

TEST_F(LedgerTest, EntriesChainAndVerify) {
  fill();
  const Verification v = check(keeper_.address());
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.verified, 10);
  EXPECT_EQ(v.ledger_id, "run-1");
  EXPECT_EQ(v.keeper, keeper_.address());
  // Each entry links to the one before, in order.
  const sqlite::Database reader(path(), sqlite::Database::kReadOnly);
  std::string prev = genesis_hash();
  int64_t seq = 0;
  verify(reader, "", [&](const Entry& e, const Json&) {
    EXPECT_EQ(e.seq, ++seq);
    EXPECT_EQ(e.prev_hash, prev);
    prev = e.hash;
  });
  EXPECT_EQ(seq, 10);
}

TEST_F(LedgerTest, AnEditOfAnyColumnWithSqlite3NamesTheEntry) {
  fill();
  // Entry 6 is the validator's accepting verdict: the one a cheat would most like to change.
  const std::vector<std::string> edits = {
      "UPDATE ledger SET body = replace(body, 'true', 'false') WHERE seq = 6",
      "UPDATE ledger SET body = replace(body, '" + sha('a') + "', '" + sha('c') +
          "') WHERE seq = 6",
      "UPDATE ledger SET kind = 'stake' WHERE seq = 6",
      "UPDATE ledger SET author = '" + keeper_.address() + "' WHERE seq = 6",
      "UPDATE ledger SET time_ms = time_ms + 1 WHERE seq = 6",
      "UPDATE ledger SET signature = replace(signature, substr(signature, 1, 2), 'ff') WHERE "
      "seq = 6",
      "UPDATE ledger SET hash = '" + sha('d') + "' WHERE seq = 6",
      "UPDATE ledger SET seal = replace(seal, substr(seal, 1, 2), 'ff') WHERE seq = 6",
      "UPDATE ledger SET prev_hash = '" + sha('e') + "' WHERE seq = 6",
  };
  const fs::path pristine = dir_ / "pristine.sqlite";
  db_.reset();  // closes the database: WAL checkpointed into the file
  fs::copy_file(path(), pristine);
  for (const std::string& sql : edits) {
    SCOPED_TRACE(sql);
    fs::copy_file(pristine, path(), fs::copy_options::overwrite_existing);
    tamper(sql);
    const Verification v = check();
    EXPECT_FALSE(v.ok);
    EXPECT_EQ(v.broken_seq, 6) << v.problem;
    EXPECT_EQ(v.verified, 5);
    EXPECT_NE(v.problem.find("entry 6"), std::string::npos) << v.problem;
  }
  // Removed: named as missing. Renumbered to the end: missing as well.
  for (const std::string& sql : {std::string("DELETE FROM ledger WHERE seq = 6"),
                                 std::string("UPDATE ledger SET seq = 99 WHERE seq = 6")}) {
    SCOPED_TRACE(sql);
    fs::copy_file(pristine, path(), fs::copy_options::overwrite_existing);
    tamper(sql);
    const Verification v = check();
    EXPECT_EQ(v.broken_seq, 6);
    EXPECT_NE(v.problem.find("entry 6 is missing"), std::string::npos) << v.problem;
  }
  // Two entries swapped (their numbers exchanged): the first out of place is named.
  fs::copy_file(pristine, path(), fs::copy_options::overwrite_existing);
  tamper(
      "UPDATE ledger SET seq = 100 WHERE seq = 6; UPDATE ledger SET seq = 6 WHERE seq = 7; "
      "UPDATE ledger SET seq = 7 WHERE seq = 100");
  EXPECT_EQ(check().broken_seq, 6);
  // Untouched, it verifies.
  fs::copy_file(pristine, path(), fs::copy_options::overwrite_existing);
  EXPECT_TRUE(check().ok);
}

TEST_F(LedgerTest, TheCommandNamesTheBrokenEntryAndExitsOne) {
  fill();
  db_.reset();
  std::string out;
  ASSERT_EQ(run_command(std::string(TRELLIS_BIN) + " ledger verify " + dir_.string(), &out), 0)
      << out;
  EXPECT_NE(out.find("10 entries verify"), std::string::npos) << out;
  EXPECT_NE(out.find(keeper_.address()), std::string::npos) << out;
  ASSERT_EQ(run_command(
                std::string(TRELLIS_BIN) + " ledger contributions --json " + path().string(), &out),
            0)
      << out;
  const Json row = parse_json(out, "contributions");
  EXPECT_EQ(row["node"], node_.address());
  EXPECT_EQ(row["accepted"], 1);
  EXPECT_EQ(row["rejected"], 1);
  EXPECT_EQ(row["work_units"], 1200);
  EXPECT_EQ(row["slashed"], 10);
  EXPECT_EQ(row["evicted"], true);

  tamper("UPDATE ledger SET body = replace(body, '1200', '99999') WHERE seq = 5");
  EXPECT_EQ(run_command(std::string(TRELLIS_BIN) + " ledger verify " + dir_.string(), &out), 1);
  EXPECT_NE(out.find("entry 5"), std::string::npos) << out;
  EXPECT_EQ(run_command(std::string(TRELLIS_BIN) + " ledger contributions " + dir_.string(), &out),
            1);  // nothing is summed from a ledger that does not verify
  EXPECT_EQ(out.find("99999"), std::string::npos) << out;
  // Someone else's key as the expected keeper: entry 1 is named.
  EXPECT_EQ(run_command(std::string(TRELLIS_BIN) + " ledger verify " + dir_.string() +
                            " --keeper " + node_.address(),
                        &out),
            1);
  EXPECT_NE(out.find("not by the expected"), std::string::npos) << out;
}

TEST_F(LedgerTest, OnlyTheKeeperAndGrantedRolesMayState) {
  add("submission", submission(node_, 0, 0, sha('a'), 5));
  const auto by_validator = [&] {
    return make_statement("run-1", validator_, "verdict", verdict(node_, 0, 0, sha('a'), true),
                          now_ms());
  };
  // A validator the ledger never named, a node stating its own stake, a second pool entry.
  EXPECT_NE(test::error_of([&] { add(by_validator()); }).find("may not state a verdict"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              add(make_statement("run-1", node_, "stake",
                                 {{"node", node_.address()}, {"amount", 1000}}, now_ms()));
            }).find("may not state a stake"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              add("pool",
                  {{"ledger", "run-1"}, {"keeper", keeper_.address()}, {"policy", Json::object()}});
            }).find("only come first"),
            std::string::npos);
  // A statement signed for another ledger, or changed after signing.
  add("role", {{"address", validator_.address()}, {"role", "validator"}});
  Statement other = make_statement("run-2", validator_, "verdict",
                                   verdict(node_, 0, 0, sha('a'), true), now_ms());
  EXPECT_NE(test::error_of([&] { add(other); }).find("signature"), std::string::npos);
  Statement changed = by_validator();
  changed.body = verdict(node_, 0, 0, sha('b'), true).dump();
  EXPECT_NE(test::error_of([&] { add(changed); }).find("signature"), std::string::npos);
  // Malformed bodies: a missing field, an extra one, a negative count, an unknown kind.
  EXPECT_NE(test::error_of([&] {
              add("stake", {{"node", node_.address()}});
            }).find("missing field 'amount'"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              add("stake", {{"node", node_.address()}, {"amount", 1}, {"bonus", 5}});
            }).find("unexpected field 'bonus'"),
            std::string::npos);
  EXPECT_FALSE(test::error_of([&] {
                 add("stake", {{"node", node_.address()}, {"amount", -5}});
               }).empty());
  EXPECT_NE(test::error_of([&] {
              add("gift", {{"node", node_.address()}});
            }).find("unknown kind"),
            std::string::npos);
  // The granted validator may; nothing refused reached the ledger.
  add(by_validator());
  const Verification v = check();
  EXPECT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.verified, 4);
}

TEST_F(LedgerTest, AnotherKeyOrRunCannotTakeOverTheLedger) {
  fill();
  EXPECT_NE(test::error_of([&] {
              Ledger(*db_, node_, "run-1", Json::object());
            }).find("kept by " + keeper_.address()),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { Ledger(*db_, keeper_, "run-2", Json::object()); }).find("run-1"),
            std::string::npos);
  EXPECT_NE(
      test::error_of([&] { Ledger(*db_, keeper_, "run 1\n", Json::object()); }).find("ledger id"),
      std::string::npos);
  // Reopened by its keeper, the chain continues.
  sqlite::Transaction tx(*db_);
  Ledger again(*db_, keeper_, "run-1", Json::object());
  EXPECT_EQ(again.record("registration", {{"node", validator_.address()}, {"ip", "::1"}}).seq, 11);
  tx.commit();
  EXPECT_TRUE(check().ok);
}

TEST_F(LedgerTest, AHostileFileCostsBoundedMemoryAndIsNamed) {
  fill();
  db_.reset();
  // A 64 MiB body on entry 4; then a time that is text on entry 2 (SQLite itself refuses a
  // sequence number that is not an integer).
  tamper(
      "UPDATE ledger SET body = '{\\\"node\\\":\\\"' || hex(zeroblob(33554432)) || '\\\"}' WHERE "
      "seq = 4");
  Verification v = check();
  EXPECT_EQ(v.broken_seq, 4);
  EXPECT_NE(v.problem.find("over the limit"), std::string::npos) << v.problem;
  tamper("UPDATE ledger SET time_ms = 'soon' WHERE seq = 2");
  v = check();
  EXPECT_EQ(v.broken_seq, 2) << v.problem;
  tamper("DROP TABLE ledger");
  v = check();
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.problem.find("no ledger"), std::string::npos);
}

TEST(Contributions, TheNewestVerdictDecidesAndAVerdictAloneCountsNothing) {
  const Identity keeper = Identity::generate(), a = Identity::generate(), b = Identity::generate();
  ContributionTally tally;
  int64_t seq = 0;
  const auto feed = [&](const std::string& kind, const Json& body) {
    Entry e;
    e.seq = ++seq;
    e.statement = make_statement("r", keeper, kind, body, 0);
    tally.add(e, body);
  };
  feed("submission", submission(a, 0, 0, sha('1'), 100));
  feed("verdict", verdict(a, 0, 0, sha('1'), true));
  feed("submission", submission(a, 0, 1, sha('2'), 50));
  feed("verdict", verdict(a, 0, 1, sha('2'), true));
  feed("verdict", verdict(a, 0, 1, sha('2'), false));     // overturned
  feed("submission", submission(b, 2, 0, sha('3'), 70));  // no verdict yet
  feed("verdict", verdict(b, 3, 0, sha('4'), true));      // no such submission
  feed("stake", {{"node", b.address()}, {"amount", 5}});
  const auto rows = tally.nodes();
  ASSERT_EQ(rows.size(), 2u);
  for (const Contribution& c : rows) {
    if (c.node == a.address()) {
      EXPECT_EQ(c.accepted, 1);
      EXPECT_EQ(c.rejected, 1);
      EXPECT_EQ(c.work_units, 100);
      EXPECT_EQ(c.samples, 8);
    } else {
      EXPECT_EQ(c.accepted, 0);
      EXPECT_EQ(c.work_units, 0);
      EXPECT_EQ(c.staked, 5);
    }
  }
}

}  // namespace
}  // namespace trellis::ledger
