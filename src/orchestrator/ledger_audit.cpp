#include "orchestrator/ledger_audit.h"

#include <utility>

#include "ledger/ledger.h"

namespace trellis::orchestrator {
namespace {

constexpr const char* kEntryColumns = "seq, kind, author, time_ms, body, hash";

// A row of a query of kEntryColumns as the dashboard shows it.
Json entry_json(sqlite::Statement& q, int64_t verified_through) {
  const int64_t seq = q.i64(0);
  const std::string text = q.text(4);
  Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) body = text;  // what an unverified (broken) entry holds, shown as text
  return {{"seq", seq},
          {"kind", q.text(1)},
          {"author", q.text(2)},
          {"time_ms", q.i64(3)},
          {"body", body},
          {"hash", q.text(5)},
          {"verified", seq <= verified_through}};
}

}  // namespace

LedgerAudit::LedgerAudit(std::filesystem::path database, std::string keeper, double min_interval_s,
                         double max_age_s)
    : path_(std::move(database)),
      keeper_(std::move(keeper)),
      min_interval_s_(min_interval_s),
      max_age_s_(max_age_s) {}

const sqlite::Database& LedgerAudit::db() {
  if (!db_) db_.emplace(path_, sqlite::Database::kReadOnly);
  return *db_;
}

int64_t LedgerAudit::head_seq() {
  sqlite::Statement q(db(), fmt::format("SELECT COALESCE(MAX(seq), 0) FROM {}", ledger::kTable));
  q.step();
  return q.i64(0);
}

std::shared_ptr<const LedgerAudit::Result> LedgerAudit::current(double now) {
  std::lock_guard lock(mu_);
  const int64_t head = head_seq();
  if (last_) {
    const double age = now - last_->checked_at;
    const bool stale = age >= max_age_s_ || (head != last_->head_seq && age >= min_interval_s_);
    if (!stale) return last_;
  }
  auto r = std::make_shared<Result>();
  ledger::ContributionTally tally;
  r->verification = ledger::verify(
      db(), keeper_, [&](const ledger::Entry& e, const Json& body) { tally.add(e, body); });
  r->contributions = tally.nodes();
  r->head_seq = head;
  r->checked_at = now;
  last_ = std::move(r);
  return last_;
}

Json LedgerAudit::page(int64_t before_seq, int64_t limit, int64_t verified_through) {
  std::lock_guard lock(mu_);
  sqlite::Statement q(db(), fmt::format("SELECT {} FROM {} WHERE seq < ? ORDER BY seq DESC LIMIT ?",
                                        kEntryColumns, ledger::kTable));
  q.bind(before_seq).bind(limit);
  Json out = Json::array();
  while (q.step()) out.push_back(entry_json(q, verified_through));
  return out;
}

Json LedgerAudit::naming(const std::string& node, int64_t step, int64_t number,
                         int64_t verified_through) {
  std::lock_guard lock(mu_);
  // A scan with SQLite's JSON functions: one operator's click, not a hot path. Bodies that are
  // not JSON (a tampered ledger) are skipped rather than failing the query.
  sqlite::Statement q(
      db(), fmt::format("SELECT {} FROM {} WHERE json_valid(body) AND json_extract(body, '$.node') "
                        "= ? AND json_extract(body, '$.step') = ? AND json_extract(body, "
                        "'$.submission') = ? ORDER BY seq",
                        kEntryColumns, ledger::kTable));
  q.bind(node).bind(step).bind(number);
  Json out = Json::array();
  while (q.step()) out.push_back(entry_json(q, verified_through));
  return out;
}

}  // namespace trellis::orchestrator
