// The ledger from the command line (src/ledger), read-only:
//   trellis ledger verify PATH [--keeper ADDRESS]       chain, signatures, seals, authority
//   trellis ledger show PATH [--kind K] [--node A] [--json]   the verified entries
//   trellis ledger contributions PATH [--json]          work, stake and slashes per node
// PATH is an orchestrator's database (orchestrator.sqlite) or a directory holding one (a run
// directory or orchestrator.data_dir). Each exits 1 when the ledger does not verify, naming the
// first broken entry.
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/error.h"
#include "common/json.h"
#include "common/sqlite.h"
#include "ledger/contributions.h"
#include "ledger/verify.h"

namespace trellis::cli {
namespace fs = std::filesystem;
namespace {

struct LedgerFlags {
  std::string path, keeper, kind, node;
  bool json = false;
};

fs::path database_of(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    for (const fs::path& candidate :
         {p / "orchestrator.sqlite", p / "orchestrator" / "orchestrator.sqlite"}) {
      if (fs::is_regular_file(candidate, ec)) return candidate;
    }
    fail(path,
         "no orchestrator.sqlite in this directory (give the orchestrator's database, or "
         "the run directory or orchestrator.data_dir that holds it)");
  }
  if (!fs::is_regular_file(p, ec)) fail(path, "no such file");
  return p;
}

// Verifies, calling `visit` with each verified entry; prints why and exits 1 when broken.
ledger::Verification verify_or_exit(
    const LedgerFlags& f,
    const std::function<void(const ledger::Entry&, const Json&)>& visit = {}) {
  const sqlite::Database db(database_of(f.path), sqlite::Database::kReadOnly);
  ledger::Verification v = ledger::verify(db, f.keeper, visit);
  if (!v.ok) {
    std::cerr << fmt::format("ledger {}: does not verify: {}\n", db.where(), v.problem);
    if (v.broken_seq > 0) {
      std::cerr << fmt::format("({} entries before entry {} verify)\n", v.verified, v.broken_seq);
    }
    std::exit(1);
  }
  return v;
}

void add_path_option(CLI::App* cmd, LedgerFlags& f) {
  cmd->add_option("path", f.path, "orchestrator.sqlite, or a directory holding it")->required();
  cmd->add_option("--keeper", f.keeper,
                  "the keeper's address (the orchestrator's public key) the ledger must have: "
                  "anyone can write a ledger of their own");
}

std::string short_address(const std::string& a) { return a.substr(0, 12); }

}  // namespace

void add_ledger_commands(CLI::App& app) {
  auto* ledger = app.add_subcommand("ledger", "Verify and read the ledger of a run");
  ledger->require_subcommand(1);

  static LedgerFlags verify_flags;
  auto* verify = ledger->add_subcommand(
      "verify", "Recompute the hash chain, signatures and seals; name the first broken entry");
  add_path_option(verify, verify_flags);
  verify->callback([] {
    const auto v = verify_or_exit(verify_flags);
    std::cout << fmt::format("ledger '{}' kept by {}: {} entries verify\n", v.ledger_id, v.keeper,
                             v.verified);
  });

  static LedgerFlags show_flags;
  auto* show = ledger->add_subcommand("show", "Print the ledger's entries (after verifying each)");
  add_path_option(show, show_flags);
  show->add_option("--kind", show_flags.kind, "only entries of this kind (submission, verdict...)");
  show->add_option("--node", show_flags.node, "only entries about this node address");
  show->add_flag("--json", show_flags.json, "one JSON object per line");
  show->callback([] {
    verify_or_exit(show_flags, [](const ledger::Entry& e, const Json& body) {
      if (!show_flags.kind.empty() && e.statement.kind != show_flags.kind) return;
      if (!show_flags.node.empty() && body.value("node", std::string()) != show_flags.node) return;
      if (show_flags.json) {
        std::cout << Json{{"seq", e.seq},
                          {"kind", e.statement.kind},
                          {"author", e.statement.author},
                          {"time_ms", e.statement.time_ms},
                          {"body", body},
                          {"hash", e.hash}}
                         .dump()
                  << "\n";
      } else {
        std::cout << fmt::format("{:>6}  {:<12}  {}  {}\n", e.seq, e.statement.kind,
                                 short_address(e.statement.author), body.dump());
      }
    });
  });

  static LedgerFlags sum_flags;
  auto* sum = ledger->add_subcommand(
      "contributions", "Per node: accepted and rejected submissions, work units, stake, slashes");
  add_path_option(sum, sum_flags);
  sum->add_flag("--json", sum_flags.json, "one JSON object per node");
  sum->callback([] {
    ledger::ContributionTally tally;
    verify_or_exit(sum_flags,
                   [&](const ledger::Entry& e, const Json& body) { tally.add(e, body); });
    if (!sum_flags.json) {
      std::cout << fmt::format("{:<64}  {:>8}  {:>8}  {:>12}  {:>8}  {:>8}  {}\n", "node",
                               "accepted", "rejected", "work_units", "staked", "slashed",
                               "evicted");
    }
    for (const auto& c : tally.nodes()) {
      if (sum_flags.json) {
        std::cout << Json{{"node", c.node},         {"accepted", c.accepted},
                          {"rejected", c.rejected}, {"work_units", c.work_units},
                          {"samples", c.samples},   {"staked", c.staked},
                          {"slashed", c.slashed},   {"evicted", c.evicted}}
                         .dump()
                  << "\n";
      } else {
        std::cout << fmt::format("{:<64}  {:>8}  {:>8}  {:>12}  {:>8}  {:>8}  {}\n", c.node,
                                 c.accepted, c.rejected, c.work_units, c.staked, c.slashed,
                                 c.evicted ? "yes" : "no");
      }
    }
  });
}

}  // namespace trellis::cli
