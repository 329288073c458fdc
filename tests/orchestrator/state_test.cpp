// The orchestrator's building blocks: counting signal samples per file, the step counter rule,
// signed URLs, and the SQLite state surviving a reopen with every decision intact: submissions,
// the validation queue and its leases, validators' verdicts, the trainer's public key, node
// registrations, evictions, rejection counts and the allowlist revision; a database of the
// previous schema is migrated.
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "common/error.h"
#include "ledger/contributions.h"
#include "ledger/verify.h"
#include "orchestrator/signed_url.h"
#include "orchestrator/state.h"
#include "orchestrator/step_counter.h"
#include "rollout_fixtures.h"

namespace trellis::orchestrator {
namespace {

namespace fs = std::filesystem;

// The orchestrator's key: the one that keeps every test database's ledger.
const Identity& keeper() {
  static const Identity k = Identity::generate();
  return k;
}

// Hands out work for `key`'s step to its node (2 groups, lease to 1000); its submission number.
int64_t assign(State& s, const SubmissionKey& key) {
  return s.assign(key.step, key.node_address, 2, 1000, 50).key.submission;
}

TEST(StepCounter, CountsOnlyGroupsWhoseRewardsDiffer) {
  const test::FileSpec spec{"run", std::string(64, 'a'), 0, 0, 0};
  std::vector<rollout::RolloutRecord> rows;
  for (const auto& [index, rewards] : std::vector<std::pair<int, std::vector<float>>>{
           {0, {0, 1, 0, 1}}, {1, {1, 1, 1, 1}}, {2, {0.5f, 0.5f, 0.25f}}, {3, {2}}}) {
    auto g = test::group(spec, index, rewards);
    rows.insert(rows.end(), g.begin(), g.end());
  }
  // Rows of one group need not be adjacent.
  std::swap(rows[1], rows[5]);
  const FileCounts c = count_file(rows);
  EXPECT_EQ(c.samples, 12);
  EXPECT_EQ(c.signal_samples, 4 + 3);  // groups 0 and 2; group 1 all equal, group 3 alone
  EXPECT_EQ(c.completion_tokens, 12 * 4);
  EXPECT_EQ(count_file({}).samples, 0);
}

TEST(StepCounter, IsTheFirstStepLackingBatchSizeSignalSamples) {
  EXPECT_EQ(step_counter({}, 5, 8), 0);
  EXPECT_EQ(step_counter({{0, 7}}, 5, 8), 0);
  EXPECT_EQ(step_counter({{0, 8}}, 5, 8), 1);
  EXPECT_EQ(step_counter({{0, 9}, {1, 8}, {3, 100}}, 5, 8), 2);  // full later steps don't skip 2
  EXPECT_EQ(step_counter({{0, 8}, {1, 8}, {2, 8}, {3, 8}, {4, 8}}, 5, 8), 5);  // done
}

TEST(SignedUrl, ValidOnlyForItsMethodPathAndLifetime) {
  const UrlSigner signer("secret"), other("other secret");
  const std::string path = "/upload/step_1/x-0.parquet";
  const std::string url = signer.sign("PUT", path, 1000);
  const std::string sig = signer.signature("PUT", path, 1000);
  EXPECT_EQ(url, path + "?expires=1000&sig=" + sig);
  EXPECT_EQ(signer.check("PUT", path, "1000", sig, 999), UrlCheck::kOk);
  EXPECT_EQ(signer.check("PUT", path, "1000", sig, 1000), UrlCheck::kOk);
  EXPECT_EQ(signer.check("PUT", path, "1000", sig, 1001), UrlCheck::kExpired);
  EXPECT_EQ(signer.check("PUT", path, "2000", sig, 999), UrlCheck::kBadSignature);
  EXPECT_EQ(signer.check("GET", path, "1000", sig, 999), UrlCheck::kBadSignature);
  EXPECT_EQ(signer.check("PUT", "/upload/step_1/x-1.parquet", "1000", sig, 999),
            UrlCheck::kBadSignature);
  EXPECT_EQ(other.check("PUT", path, "1000", sig, 999), UrlCheck::kBadSignature);
  EXPECT_EQ(signer.check("PUT", path, "", sig, 999), UrlCheck::kMissing);
  EXPECT_EQ(signer.check("PUT", path, "1000", "", 999), UrlCheck::kMissing);
  EXPECT_EQ(signer.check("PUT", path, "10x0", sig, 999), UrlCheck::kMalformed);
  EXPECT_EQ(signer.check("PUT", path, "1000", sig.substr(1), 999), UrlCheck::kMalformed);
}

TEST(State, DecisionsSurviveAReopen) {
  const auto dir = fs::temp_directory_path() / ("trellis_state_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto db = dir / "orchestrator.sqlite";
  const SubmissionKey a{0, std::string(64, 'a'), 0}, b{0, std::string(64, 'b'), 0},
      c{1, std::string(64, 'a'), 0};
  std::string secret;
  {
    State s(db, "run-1", keeper());
    // Work first: only what was handed out can be requested (group size 4, lease to 1000).
    EXPECT_EQ(s.request(a, std::string(64, '1'), 10, 4, 99), "");
    for (const auto& key : {b, a, c}) EXPECT_EQ(assign(s, key), key.submission);
    EXPECT_EQ(s.run_id(), "run-1");
    secret = s.url_secret();
    EXPECT_EQ(secret.size(), 64u);
    EXPECT_EQ(s.policy_version(), 0);
    EXPECT_EQ(s.publish_version(2), 2);
    EXPECT_EQ(s.publish_version(1), 2);  // older versions are ignored

    s.request(b, std::string(64, '1'), 10, 4, 100);
    s.request(a, std::string(64, '2'), 20, 4, 101);
    s.request(a, std::string(64, '3'), 30, 4, 102);  // refreshes the pending request
    s.request(c, std::string(64, '4'), 40, 4, 103);
    EXPECT_EQ(s.latest(a)->sha256, std::string(64, '3'));
    EXPECT_EQ(s.latest(a)->size, 30);
    EXPECT_EQ(s.latest(a)->counts.samples, 8);  // 2 groups of 4, once the file exists
    EXPECT_EQ(s.count_by_status().at("pending"), 3);

    // The hash is re-checked at commit: a request that changed it meanwhile wins.
    EXPECT_FALSE(s.accept(a, std::string(64, '2'), {8, 4, 32}, 109));
    EXPECT_TRUE(s.accept(a, std::string(64, '3'), {8, 4, 32}, 110));  // accepted first although
                                                                      // requested second
    EXPECT_TRUE(s.accept(b, std::string(64, '1'), {4, 0, 16}, 111));
    EXPECT_FALSE(s.accept(b, std::string(64, '1'), {4, 0, 16}, 112));  // nothing pending any more
    EXPECT_TRUE(s.reject(c, "bad file", 113));
    EXPECT_EQ(s.request(a, std::string(64, '5'), 1, 4, 120), "accepted");  // unchanged
    EXPECT_EQ(s.latest(a)->sha256, std::string(64, '3'));
    // A rejected one is over: trying again takes new work, the next number.
    EXPECT_EQ(s.request(c, std::string(64, '6'), 60, 4, 121), "rejected");
    EXPECT_EQ(s.assign(1, c.node_address, 2, 1000, 122).key.submission, 1);
    EXPECT_EQ(s.request({1, c.node_address, 1}, std::string(64, '6'), 60, 4, 123), "pending");
  }
  State s(db, "another name", keeper());  // the run ID is fixed at the first start
  EXPECT_EQ(s.run_id(), "run-1");
  EXPECT_EQ(s.url_secret(), secret);
  EXPECT_EQ(s.policy_version(), 2);
  const auto accepted = s.accepted(0);
  ASSERT_EQ(accepted.size(), 2u);
  EXPECT_EQ(accepted[0].key.node_address, a.node_address);
  EXPECT_EQ(accepted[0].counts.signal_samples, 4);
  EXPECT_EQ(accepted[0].sha256, std::string(64, '3'));
  EXPECT_EQ(accepted[1].key.node_address, b.node_address);
  EXPECT_EQ(s.signal_samples_by_step(), (std::map<int64_t, int64_t>{{0, 4}}));
  EXPECT_EQ(s.count_by_status(), (std::map<std::string, int64_t>{{"accepted", 2},
                                                                 {"assigned", 0},
                                                                 {"dropped", 0},
                                                                 {"pending", 1},
                                                                 {"rejected", 1},
                                                                 {"validating", 0}}));
  EXPECT_EQ(s.latest(c)->status, "rejected");
  EXPECT_EQ(s.latest({1, c.node_address, 1})->status, "pending");
  EXPECT_TRUE(s.is_accepted(a));
  EXPECT_FALSE(s.is_accepted(c));
  EXPECT_EQ(s.accepted_totals().completion_tokens, 48);
  EXPECT_EQ(s.completion_tokens_since(111), 16);
  fs::remove_all(dir);
}

TEST(State, NodesEvictionsAndTheAllowlistSurviveAReopen) {
  const auto dir =
      fs::temp_directory_path() / ("trellis_state_nodes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto db = dir / "orchestrator.sqlite";
  const std::string a(64, 'a'), b(64, 'b'), c(64, 'c'), d(64, 'd'), key(64, 'e');
  const auto ips = [](State& s) { return s.allowlist(1000).ips; };
  const auto revision = [](State& s) { return s.allowlist(1000).revision; };
  using V = std::vector<std::string>;
  {
    State s(db, "run-1", keeper());
    EXPECT_EQ(s.trainer_public_key(), "");
    EXPECT_EQ(s.allowlist(1000).revision, 0);
    EXPECT_TRUE(s.allowlist(1000).ips.empty());

    Registration r = s.register_node(a, "10.0.0.2", 1000, 1000.5);
    EXPECT_EQ(r.outcome, Registration::kRegistered);
    EXPECT_EQ(r.node.ip, "10.0.0.2");
    EXPECT_EQ(r.node.registered_at, 1000.5);
    EXPECT_EQ(r.node.signed_at, 1000);
    EXPECT_EQ(revision(s), 1);
    EXPECT_EQ(s.register_node(b, "10.0.0.1", 1000, 1001).outcome, Registration::kRegistered);
    EXPECT_EQ(revision(s), 2);
    EXPECT_EQ(ips(s), (V{"10.0.0.1", "10.0.0.2"}));  // sorted
    // A second node behind the same IP does not change the set.
    EXPECT_EQ(s.register_node(c, "10.0.0.2", 1000, 1002).outcome, Registration::kRegistered);
    EXPECT_EQ(revision(s), 2);
    EXPECT_EQ(ips(s), (V{"10.0.0.1", "10.0.0.2"}));  // de-duplicated

    // Re-registering is idempotent (the same signed request too); first registration time kept.
    r = s.register_node(a, "10.0.0.2", 1000, 1003);
    EXPECT_EQ(r.outcome, Registration::kRegistered);
    r = s.register_node(a, "10.0.0.2", 1010, 1010);
    EXPECT_EQ(r.outcome, Registration::kRegistered);
    EXPECT_EQ(r.node.registered_at, 1000.5);
    EXPECT_EQ(r.node.last_seen, 1010);
    EXPECT_EQ(revision(s), 2);
    // An older registration, or the newest one from another IP, is a replay: nothing changes.
    r = s.register_node(a, "10.0.0.9", 1009, 1011);
    EXPECT_EQ(r.outcome, Registration::kReplayed);
    EXPECT_EQ(r.node.ip, "10.0.0.2");
    EXPECT_EQ(s.register_node(a, "10.0.0.9", 1010, 1011).outcome, Registration::kReplayed);
    EXPECT_EQ(s.node(a)->ip, "10.0.0.2");
    EXPECT_EQ(s.node(a)->last_seen, 1010);
    EXPECT_EQ(revision(s), 2);
    // A node whose IP changes moves; the old IP stays while node c uses it.
    EXPECT_EQ(s.register_node(a, "10.0.0.3", 1020, 1020).outcome, Registration::kRegistered);
    EXPECT_EQ(ips(s), (V{"10.0.0.1", "10.0.0.2", "10.0.0.3"}));
    EXPECT_EQ(revision(s), 3);

    // Evicting c removes 10.0.0.2; evicting a never-registered node creates its row.
    Node n = s.evict(c, "forged rollouts", 1030).node;
    EXPECT_TRUE(n.evicted);
    EXPECT_EQ(n.evicted_reason, "forged rollouts");
    EXPECT_EQ(n.ip, "10.0.0.2");  // kept for operators
    EXPECT_EQ(ips(s), (V{"10.0.0.1", "10.0.0.3"}));
    EXPECT_EQ(revision(s), 4);
    n = s.evict(d, "never seen", 1031).node;
    EXPECT_TRUE(n.evicted);
    EXPECT_EQ(n.ip, "");
    EXPECT_EQ(n.registered_at, 0);
    EXPECT_EQ(revision(s), 4);  // the allowed set did not change
    // Evicted nodes stay out, whatever they sign; a second eviction keeps the first reason.
    r = s.register_node(d, "10.0.0.4", 1040, 1040);
    EXPECT_EQ(r.outcome, Registration::kEvicted);
    EXPECT_EQ(r.node.evicted_reason, "never seen");
    EXPECT_EQ(s.register_node(c, "10.0.0.2", 1040, 1040).outcome, Registration::kEvicted);
    EXPECT_EQ(s.evict(c, "again", 1041).node.evicted_reason, "forged rollouts");
    EXPECT_EQ(ips(s), (V{"10.0.0.1", "10.0.0.3"}));
    EXPECT_EQ(revision(s), 4);
    EXPECT_EQ(s.node_counts().registered, 2);
    EXPECT_EQ(s.node_counts().evicted, 2);

    EXPECT_EQ(s.publish_version(3, key), 3);
    EXPECT_EQ(s.publish_version(2, std::string(64, 'f')), 3);  // an older version: key still taken
    EXPECT_EQ(s.publish_version(4), 4);                        // no key: the stored one stays
  }
  State s(db, "run-1", keeper());
  EXPECT_EQ(s.trainer_public_key(), std::string(64, 'f'));
  EXPECT_EQ(s.policy_version(), 4);
  const Allowlist list = s.allowlist(1000);
  EXPECT_EQ(list.revision, 4);
  EXPECT_EQ(list.ips, (V{"10.0.0.1", "10.0.0.3"}));
  const auto nodes = s.nodes();
  ASSERT_EQ(nodes.size(), 4u);  // by address
  EXPECT_EQ(nodes[0].address, a);
  EXPECT_EQ(nodes[0].ip, "10.0.0.3");
  EXPECT_EQ(nodes[0].registered_at, 1000.5);
  EXPECT_EQ(nodes[0].signed_at, 1020);
  EXPECT_FALSE(nodes[0].evicted);
  EXPECT_EQ(nodes[2].address, c);
  EXPECT_TRUE(nodes[2].evicted);
  EXPECT_EQ(nodes[2].evicted_reason, "forged rollouts");
  EXPECT_EQ(nodes[2].evicted_at, 1030);
  EXPECT_EQ(s.register_node(c, "10.0.0.2", 2000, 2000).outcome, Registration::kEvicted);
  // A replay of a's last registration from elsewhere is still refused after the reopen.
  EXPECT_EQ(s.register_node(a, "10.0.0.9", 1020, 2000).outcome, Registration::kReplayed);
  EXPECT_FALSE(s.node(std::string(64, '9')).has_value());
  fs::remove_all(dir);
}

TEST(State, TheValidationQueueLeasesAndVerdicts) {
  const auto dir =
      fs::temp_directory_path() / ("trellis_state_queue_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto db = dir / "orchestrator.sqlite";
  const std::string x(64, 'a'), y(64, 'b');
  const SubmissionKey a{0, x, 0}, b{0, x, 1}, c{0, y, 0}, d{1, y, 0};
  {
    State s(db, "run-1", keeper());
    for (const auto& key : {a, b, c, d}) {
      EXPECT_EQ(assign(s, key), key.submission);
      s.request(key, std::string(64, '1'), 10, 4, 100);
    }
    EXPECT_FALSE(s.start_validation(b, std::string(64, '2'), {4, 2, 16}, 100));  // not declared
    EXPECT_TRUE(s.start_validation(b, std::string(64, '1'), {4, 2, 16}, 101));   // uploaded first
    EXPECT_TRUE(s.start_validation(a, std::string(64, '1'), {4, 4, 16}, 102));
    EXPECT_TRUE(s.start_validation(c, std::string(64, '1'), {2, 2, 8}, 103));
    EXPECT_FALSE(s.start_validation(c, std::string(64, '1'), {2, 2, 8}, 104));  // not pending
    EXPECT_TRUE(s.is_validating(a));
    EXPECT_EQ(s.request(a, std::string(64, '2'), 10, 4, 105), "validating");
    EXPECT_EQ(s.latest(a)->sha256, std::string(64, '1'));
    EXPECT_EQ(s.count_by_status().at("validating"), 3);
    EXPECT_TRUE(s.signal_samples_by_step().empty());  // nothing counts before a verdict

    // Claims go oldest upload first, one holder per lease; an ended lease frees it.
    auto first = s.claim("v1", 10, 200);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->key.submission, 1);
    EXPECT_EQ(first->claimed_by, "v1");
    EXPECT_EQ(first->lease_expires, 210);
    EXPECT_EQ(first->counts.signal_samples, 2);
    EXPECT_EQ(s.claim("v2", 10, 201)->key.submission, 0);
    EXPECT_EQ(s.claim("v3", 10, 202)->key.node_address, y);
    EXPECT_FALSE(s.claim("v4", 10, 203));
    EXPECT_EQ(s.claim("v4", 10, 210)->key.submission, 1);  // v1's lease ended

    EXPECT_TRUE(s.accept_validated(a, "v2", 220));
    EXPECT_FALSE(s.accept_validated(a, "v2", 221));  // decided
    EXPECT_EQ(s.accepted(0).size(), 1u);
    EXPECT_EQ(s.signal_samples_by_step(), (std::map<int64_t, int64_t>{{0, 4}}));

    // y is counted and marked, not evicted.
    Rejection r = s.reject_validated(c, "validator v3: bad proof", "v3", "", 230);
    EXPECT_TRUE(r.rejected);
    EXPECT_EQ(r.eviction.node.rejections, 1);
    EXPECT_EQ(r.eviction.node.last_rejection, "step 0 submission 0: validator v3: bad proof");
    EXPECT_FALSE(r.eviction.node.evicted);
    EXPECT_TRUE(r.eviction.rejected.empty());
    EXPECT_FALSE(s.reject_validated(c, "again", "v3", "", 231).rejected);
    EXPECT_EQ(s.node(y)->rejections, 1);
    // x is rejected and evicted: its other validating submission goes with it.
    r = s.reject_validated(b, "validator v4: bad sampling", "v4", "evicted for b", 240);
    EXPECT_TRUE(r.rejected);
    EXPECT_TRUE(r.eviction.node.evicted);
    EXPECT_EQ(r.eviction.node.evicted_reason, "evicted for b");
    EXPECT_TRUE(r.eviction.rejected.empty());  // a was accepted already
    EXPECT_TRUE(s.start_validation(d, std::string(64, '1'), {2, 2, 8}, 250));
    const Eviction e = s.evict(y, "operator", 260);
    ASSERT_EQ(e.rejected.size(), 1u);
    EXPECT_EQ(e.rejected[0].step, 1);
    EXPECT_EQ(s.latest(d)->reason, "node " + y + " was evicted: operator");
  }
  State s(db, "run-1", keeper());
  const auto rows = s.submissions();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].status, "accepted");
  EXPECT_EQ(rows[0].validator, "v2");
  EXPECT_EQ(rows[0].uploaded_at, 102);
  EXPECT_EQ(rows[0].decided_at, 220);
  EXPECT_EQ(rows[1].status, "rejected");
  EXPECT_EQ(rows[1].reason, "validator v4: bad sampling");
  EXPECT_EQ(rows[1].claimed_by, "v1, v4");  // every claimant, in order
  EXPECT_EQ(s.submissions("rejected").size(), 3u);
  EXPECT_EQ(s.submissions("rejected", 1).size(), 1u);
  EXPECT_EQ(s.node(x)->rejections, 1);
  EXPECT_TRUE(s.node(x)->evicted);
  EXPECT_EQ(s.node(y)->last_rejection, "step 0 submission 0: validator v3: bad proof");
  fs::remove_all(dir);
}

// Each decision lands on the ledger in its own transaction: registrations (new, or from a new IP),
// files that passed the checks with their work units, validators' signed verdicts (the validator
// named a validator on its first), the orchestrator's own verdicts, evictions. A signed verdict
// that is not this verdict on this file changes nothing.
TEST(State, TheLedgerRecordsEachDecisionWithIt) {
  const auto dir =
      fs::temp_directory_path() / ("trellis_state_ledger_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto db = dir / "orchestrator.sqlite";
  const std::string x(64, 'a'), y(64, 'b'), sha1(64, '1'), sha2(64, '2');
  const SubmissionKey a{0, x, 0}, b{0, x, 1}, c{1, y, 0};
  const Identity validator = Identity::generate();
  const auto signed_verdict = [&](const SubmissionKey& k, const std::string& sha, bool accepted,
                                  const std::string& why) {
    return ledger::make_statement(
        "run-1", validator, "verdict",
        ledger::verdict_body(k.node_address, k.step, k.submission, sha, accepted, why), 5);
  };
  {
    State s(db, "run-1", keeper());
    s.register_node(x, "10.0.0.1", 1, 10);
    s.register_node(x, "10.0.0.1", 2, 11);  // a refresh: not on the ledger
    s.register_node(x, "10.0.0.2", 3, 12);
    for (const auto& key : {a, b, c}) {
      assign(s, key);
      s.request(key, key.node_address == y ? sha2 : sha1, 10, 4, 100);
    }
    EXPECT_TRUE(s.start_validation(a, sha1, {4, 4, 100}, 101));
    EXPECT_TRUE(s.start_validation(b, sha1, {4, 2, 60}, 102));
    // A signed verdict on another file, or another verdict, or signed by someone else's key.
    EXPECT_THROW(s.accept_validated(a, "v1", 110, signed_verdict(a, sha2, true, "")), Error);
    EXPECT_THROW(s.accept_validated(a, "v1", 110, signed_verdict(a, sha1, false, "x")), Error);
    ledger::Statement forged = signed_verdict(a, sha1, true, "");
    forged.author = y;
    EXPECT_THROW(s.accept_validated(a, "v1", 110, forged), Error);
    EXPECT_TRUE(s.is_validating(a));  // nothing changed
    EXPECT_TRUE(s.accept_validated(a, "v1", 111, signed_verdict(a, sha1, true, "")));
    EXPECT_TRUE(s.reject_validated(b, "validator v1: bad proof", "v1", "evicted: bad proof", 112,
                                   signed_verdict(b, sha1, false, "bad proof"))
                    .rejected);
    EXPECT_TRUE(s.accept(c, sha2, {2, 2, 30}, 113));  // no validators: the orchestrator's verdict
  }
  std::vector<std::string> kinds, authors;
  ledger::ContributionTally tally;
  const sqlite::Database reader(db, sqlite::Database::kReadOnly);
  const ledger::Verification v =
      ledger::verify(reader, keeper().address(), [&](const ledger::Entry& e, const Json& body) {
        kinds.push_back(e.statement.kind);
        authors.push_back(e.statement.author == keeper().address() ? "keeper" : "validator");
        tally.add(e, body);
      });
  ASSERT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(v.ledger_id, "run-1");
  EXPECT_EQ(kinds, (std::vector<std::string>{"pool", "registration", "registration", "submission",
                                             "submission", "role", "verdict", "verdict", "eviction",
                                             "submission", "verdict"}));
  EXPECT_EQ(authors[6], "validator");
  EXPECT_EQ(authors[7], "validator");
  EXPECT_EQ(authors[10], "keeper");
  const auto rows = tally.nodes();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].node, x);
  EXPECT_EQ(rows[0].accepted, 1);
  EXPECT_EQ(rows[0].rejected, 1);
  EXPECT_EQ(rows[0].work_units, 100);
  EXPECT_TRUE(rows[0].evicted);
  EXPECT_EQ(rows[1].work_units, 30);
  // Another key cannot take the database's ledger over.
  EXPECT_THROW(State(db, "run-1", Identity::generate()), Error);
  fs::remove_all(dir);
}

// Invites (specs/protocol.md §4): a registration naming an invite uses it once, only before it
// expires and only for the node it was sent to, starts the node's heartbeat clock and puts the
// invite on the ledger. A node that sent heartbeats and died returns only with a new invite; the
// sweep wants to invite exactly the nodes that are not live members, not evicted and hold no
// valid invite.
TEST(State, ADeadNodeReturnsOnlyWithAnInvite) {
  const auto dir =
      fs::temp_directory_path() / ("trellis_state_invites_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto db = dir / "orchestrator.sqlite";
  PoolPolicy policy;
  policy.heartbeat_s = 1;
  policy.unhealthy_after = 3;
  policy.dead_after = 6;
  const std::string x(64, 'a'), y(64, 'b'), z(64, 'c');
  const std::string n1(32, '1'), n2(32, '2'), n3(32, '3');
  {
    State s(db, "run-1", keeper(), policy);
    EXPECT_TRUE(s.wants_invite(x, 100));
    s.record_invite(x, n1, 160, 100);
    s.record_invite(y, n2, 110, 100);
    EXPECT_FALSE(s.wants_invite(x, 101));  // it holds a valid invite
    EXPECT_EQ(s.invited(101), (std::vector<std::string>{x, y}));
    EXPECT_EQ(s.register_node(y, "10.0.0.2", 1, 120, n2).outcome, Registration::kBadInvite);
    EXPECT_TRUE(s.wants_invite(y, 120));  // its invite expired: invite it again
    EXPECT_EQ(s.register_node(z, "10.0.0.3", 1, 120, n1).outcome,
              Registration::kBadInvite);  // x's invite
    const Registration r = s.register_node(x, "10.0.0.1", 1, 120, n1);
    ASSERT_EQ(r.outcome, Registration::kRegistered);
    EXPECT_EQ(r.node.heartbeat_at, 120);
    EXPECT_EQ(node_state(r.node, 121, policy), "healthy");
    EXPECT_FALSE(s.wants_invite(x, 121));  // a live member
    EXPECT_EQ(s.register_node(x, "10.0.0.1", 2, 122, n1).why, "invite " + n1 + " was used already");
    // A plain registration of a live node (its worker's) leaves its heartbeat clock alone.
    EXPECT_EQ(s.register_node(x, "10.0.0.1", 3, 125).node.heartbeat_at, 120);
    // Silent for 6 intervals: dead; a plain registration cannot bring it back.
    EXPECT_EQ(s.register_node(x, "10.0.0.1", 4, 127).outcome, Registration::kInviteRequired);
    EXPECT_TRUE(s.wants_invite(x, 127));
    s.record_invite(x, n3, 200, 127, "http://10.0.0.1:7000");
    EXPECT_EQ(s.node_endpoint(x), "");  // not joined through it yet
    const Registration back = s.register_node(x, "10.0.0.1", 5, 130, n3);
    ASSERT_EQ(back.outcome, Registration::kRegistered);
    EXPECT_EQ(node_state(back.node, 131, policy), "healthy");
    EXPECT_EQ(s.node_endpoint(x), "http://10.0.0.1:7000");
    s.evict(x, "caught", 140);
    EXPECT_FALSE(s.wants_invite(x, 300));  // an evicted address never rejoins
    s.forget_expired_invites(300);         // unused and expired: forgotten; used: kept
    s.record_invite(z, n2, 400, 300);
    EXPECT_EQ(s.invited(301), std::vector<std::string>{z});
    EXPECT_THROW(s.record_invite(x, n3, 400, 300), Error);  // x's used invite is still there
  }
  std::vector<std::string> invites;
  const sqlite::Database reader(db, sqlite::Database::kReadOnly);
  const ledger::Verification v =
      ledger::verify(reader, keeper().address(), [&](const ledger::Entry& e, const Json& body) {
        if (e.statement.kind == "invite")
          invites.push_back(body["node"].get<std::string>() + " " +
                            body["nonce"].get<std::string>() + " " +
                            body["pool"].get<std::string>());
      });
  ASSERT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(invites, (std::vector<std::string>{x + " " + n1 + " run-1", x + " " + n3 + " run-1"}));
  fs::remove_all(dir);
}

// A node that never sent a heartbeat (a worker or validator started without a node agent, which
// registers again every kRegisterAgainS) is live while its newest registration is younger than
// registration_ttl_s, and Stale after: off the allowlist, its IP's slot free, refused a heartbeat
// and a task. A plain registration brings it back (it never came through an invite). Without the
// rule, the silent node below held its place on the allowlist, and its IP, for good.
TEST(State, ANodeWithoutHeartbeatsIsStaleOnceItStopsRegistering) {
  const auto dir =
      fs::temp_directory_path() / ("trellis_state_stale_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  PoolPolicy policy;
  policy.max_nodes_per_ip = 1;
  policy.registration_ttl_s = 120;
  State s(dir / "orchestrator.sqlite", "run-1", keeper(), policy);
  const std::string x(64, 'a'), y(64, 'b');
  ASSERT_EQ(s.register_node(x, "10.0.0.1", 100, 100).outcome, Registration::kRegistered);
  EXPECT_EQ(s.register_node(y, "10.0.0.1", 150, 150).outcome, Registration::kIpFull);
  // Registering again keeps it live (the worker's PolicyFetcher does this every minute).
  ASSERT_EQ(s.register_node(x, "10.0.0.1", 200, 200).outcome, Registration::kRegistered);
  EXPECT_EQ(node_state(*s.node(x), 310, policy), "registered");
  EXPECT_EQ(s.allowlist(310).ips, std::vector<std::string>{"10.0.0.1"});
  // Silent past the lifetime: stale.
  const int64_t revision = s.allowlist(310).revision;
  EXPECT_EQ(node_state(*s.node(x), 321, policy), "stale");
  EXPECT_FALSE(node_is_live(*s.node(x), 321, policy));
  EXPECT_EQ(s.allowlist(321).ips, std::vector<std::string>{});
  EXPECT_EQ(s.allowlist(321).revision, revision + 1);
  EXPECT_EQ(s.heartbeat(x, 321), State::Beat::kDead);
  s.create_task("worker", "", "", 321);
  EXPECT_FALSE(s.task_for(x, 321));
  EXPECT_TRUE(s.wants_invite(x, 321));
  EXPECT_EQ(s.register_node(y, "10.0.0.1", 321, 321).outcome, Registration::kRegistered);
  // It returns with a plain registration, wherever its IP's slots allow.
  EXPECT_EQ(s.register_node(x, "10.0.0.1", 330, 330).outcome, Registration::kIpFull);
  ASSERT_EQ(s.register_node(x, "10.0.0.9", 331, 331).outcome, Registration::kRegistered);
  EXPECT_EQ(node_state(*s.node(x), 331, policy), "registered");
  EXPECT_EQ(s.allowlist(331).ips, (std::vector<std::string>{"10.0.0.1", "10.0.0.9"}));
  fs::remove_all(dir);
}

// A key is free, an address is not: one IP (an IPv6 /64) holds at most max_nodes_per_ip live
// nodes whatever the join rule, a node's own re-registration never counts against it, and a slot
// frees when a node is evicted or dies. A refused registration changes nothing: no row, no
// ledger entry, no invite used. Without the limit every key below would be registered.
TEST(State, OneAddressHoldsAtMostMaxNodesPerIpLiveNodes) {
  const auto dir =
      fs::temp_directory_path() / ("trellis_state_per_ip_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  PoolPolicy policy;
  policy.max_nodes_per_ip = 2;
  policy.heartbeat_s = 1;
  policy.unhealthy_after = 3;
  policy.dead_after = 6;
  State s(dir / "orchestrator.sqlite", "run-1", keeper(), policy);
  const auto key = [](char c) { return std::string(64, c); };
  const auto outcome = [&](const std::string& node, const std::string& ip, double now,
                           const std::string& invite = "") {
    return s.register_node(node, ip, static_cast<int64_t>(now), now, invite).outcome;
  };
  EXPECT_EQ(outcome(key('a'), "10.0.0.1", 100), Registration::kRegistered);
  EXPECT_EQ(outcome(key('b'), "::ffff:10.0.0.1", 100), Registration::kRegistered);
  const std::string n1(32, '1');
  s.record_invite(key('c'), n1, 200, 100);
  const Registration full = s.register_node(key('c'), "10.0.0.1", 101, 101, n1);
  EXPECT_EQ(full.outcome, Registration::kIpFull);
  EXPECT_NE(full.why.find("10.0.0.1 has 2 live nodes registered already"), std::string::npos)
      << full.why;
  EXPECT_NE(full.why.find("orchestrator.max_nodes_per_ip = 2"), std::string::npos) << full.why;
  EXPECT_EQ(full.why.find("trusted_proxies"), std::string::npos) << "not a proxy's address";
  EXPECT_FALSE(s.node(key('c')));  // nothing recorded
  EXPECT_EQ(outcome(key('a'), "10.0.0.1", 102), Registration::kRegistered) << "its own slot";
  EXPECT_EQ(outcome(key('c'), "10.0.0.2", 102, n1), Registration::kRegistered) << "invite unused";
  EXPECT_EQ(outcome(key('c'), "10.0.0.1", 103), Registration::kIpFull) << "moving in";

  // An eviction frees a slot.
  s.evict(key('b'), "caught", 104);
  EXPECT_EQ(outcome(key('c'), "10.0.0.1", 105), Registration::kRegistered);
  EXPECT_EQ(outcome(key('d'), "10.0.0.1", 105), Registration::kIpFull);
  // So does death: c joined with an invite (heartbeats at 102) and is dead 6 s later; a, which
  // never sent one, stays live.
  EXPECT_EQ(outcome(key('d'), "10.0.0.1", 109), Registration::kRegistered);
  EXPECT_EQ(outcome(key('e'), "10.0.0.1", 109), Registration::kIpFull);

  // IPv6: a subscriber's /64 is one address; the next /64 is another.
  EXPECT_EQ(outcome(key('0'), "2001:db8:1:2::1", 110), Registration::kRegistered);
  EXPECT_EQ(outcome(key('1'), "2001:db8:1:2:ffff::9", 110), Registration::kRegistered);
  const Registration v6 = s.register_node(key('2'), "2001:db8:1:2:abcd::1", 110, 110);
  EXPECT_EQ(v6.outcome, Registration::kIpFull);
  EXPECT_NE(v6.why.find("2001:db8:1:2::/64"), std::string::npos) << v6.why;
  EXPECT_EQ(outcome(key('2'), "2001:db8:1:3::1", 110), Registration::kRegistered);
  fs::remove_all(dir);
}

// A database written by the previous schema (version 1, before validators) opens migrated, with
// its submissions, nodes and meta intact; an unknown version is refused naming the file.
TEST(State, ADatabaseOfSchemaVersion1IsMigrated) {
  const std::string kA(64, 'a'), kB(64, 'b'), kH3(64, '3');  // a node and a file hash
  const auto dir = fs::temp_directory_path() / ("trellis_state_v1_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto db = dir / "orchestrator.sqlite";
  const auto run = [&](const char* sql) {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(h, sql, nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(h);
  };
  run(R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE submissions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER NOT NULL, node TEXT NOT NULL,
  submission INTEGER NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'accepted', 'rejected')),
  reason TEXT NOT NULL DEFAULT '', samples INTEGER NOT NULL DEFAULT 0,
  signal_samples INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL, decided_at REAL NOT NULL DEFAULT 0, accept_seq INTEGER);
CREATE UNIQUE INDEX submissions_one_accepted
  ON submissions (step, node, submission) WHERE status = 'accepted';
CREATE UNIQUE INDEX submissions_one_pending
  ON submissions (step, node, submission) WHERE status = 'pending';
CREATE INDEX submissions_by_step ON submissions (step, status, accept_seq);
CREATE INDEX submissions_by_decision ON submissions (status, decided_at);
CREATE TABLE nodes (
  address TEXT PRIMARY KEY, ip TEXT NOT NULL DEFAULT '', registered_at REAL NOT NULL DEFAULT 0,
  last_seen REAL NOT NULL DEFAULT 0, signed_at INTEGER NOT NULL DEFAULT 0,
  evicted INTEGER NOT NULL DEFAULT 0 CHECK (evicted IN (0, 1)),
  evicted_reason TEXT NOT NULL DEFAULT '', evicted_at REAL NOT NULL DEFAULT 0);
INSERT INTO meta VALUES ('schema_version', '1'), ('run_id', 'old-run'), ('url_secret', 'ab12'),
  ('policy_version', '3'), ('allowlist_revision', '2');
INSERT INTO submissions VALUES
  (1, 0, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 0, 'h1', 10, 'accepted', '', 4, 4, 16, 100, 110, 1),
  (2, 0, 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 0, 'h2', 10, 'rejected', 'bad file', 0, 0, 0, 101, 111, NULL),
  (3, 1, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 0, '3333333333333333333333333333333333333333333333333333333333333333', 10, 'pending', '', 0, 0, 0, 102, 0, NULL);
INSERT INTO nodes (address, ip, registered_at, evicted, evicted_reason)
  VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', '10.0.0.1', 50, 0, ''), ('bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', '', 0, 1, 'forged');
)sql");
  {
    State s(db, "ignored", keeper());
    EXPECT_EQ(s.run_id(), "old-run");
    EXPECT_EQ(s.url_secret(), "ab12");
    EXPECT_EQ(s.policy_version(), 3);
    // Within the registration's lifetime (node A never sent a heartbeat): the same set.
    EXPECT_EQ(s.allowlist(100).revision, 2);
    const auto rows = s.submissions();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].status, "accepted");
    EXPECT_EQ(rows[0].uploaded_at, 110);
    EXPECT_EQ(rows[1].reason, "bad file");
    EXPECT_EQ(rows[2].status, "pending");
    EXPECT_EQ(s.accepted(0).size(), 1u);
    EXPECT_EQ(s.node(kB)->evicted_reason, "forged");
    EXPECT_EQ(s.node(kA)->rejections, 0);
    // The new statuses work, and ids go on from the old ones.
    EXPECT_TRUE(s.start_validation({1, kA, 0}, kH3, {2, 2, 8}, 200));
    EXPECT_EQ(s.assign(2, kA, 2, 1000, 201).key.submission, 0);
    EXPECT_EQ(s.request({2, kA, 0}, "h4", 10, 4, 201), "pending");
    EXPECT_EQ(s.submissions("", 2)[0].id, 4);
    EXPECT_EQ(s.request({0, kA, 0}, "h5", 10, 4, 202), "accepted");
  }
  State again(db, "ignored", keeper());  // opens as version 3 now
  EXPECT_EQ(again.count_by_status().at("validating"), 1);
  run("UPDATE meta SET value = '9' WHERE key = 'schema_version'");
  try {
    State s(db, "ignored", keeper());
    ADD_FAILURE() << "an unknown schema version was opened";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(db.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("schema version 9"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// Work handed out, its quota and what becomes of it: numbers per (step, node), the open work a
// node asks again for, the admission snapshot (what counts toward each step, and until when),
// steps that fill dropping their open work unjudged, samples by status and the validators' pace,
// and validators claiming the lowest step first.
TEST(State, AssignmentsHoldQuotaUntilTheirStepFills) {
  const auto dir = fs::temp_directory_path() / ("trellis_state_work_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string x(64, 'a'), y(64, 'b'), z(64, 'c');
  State s(dir / "orchestrator.sqlite", "run-1", keeper());
  const auto xa = s.assign(0, x, 2, 1000, 100);
  EXPECT_EQ(xa.status, "assigned");
  EXPECT_EQ(xa.key.submission, 0);
  EXPECT_EQ(xa.groups, 2);
  EXPECT_EQ(xa.work_expires, 1000);
  EXPECT_EQ(s.assign(0, x, 1, 1000, 101).key.submission, 1);  // numbers go on per (step, node)
  EXPECT_EQ(s.assign(0, y, 3, 150, 102).key.submission, 0);
  EXPECT_EQ(s.assign(1, x, 2, 1000, 103).key.submission, 0);
  EXPECT_EQ(s.assign(1, z, 2, 1000, 104).key.submission, 0);
  // The newest open work whose lease runs: y's ends at 150.
  EXPECT_EQ(s.open_assignment(x, 200)->key.step, 1);
  EXPECT_EQ(s.open_assignment(y, 149)->key.step, 0);
  EXPECT_FALSE(s.open_assignment(y, 150));

  // x's first file arrives (pending, then validating) and y's work lapses.
  EXPECT_EQ(s.request({0, x, 0}, std::string(64, '1'), 10, 4, 110), "pending");
  ASSERT_TRUE(s.start_validation({0, x, 0}, std::string(64, '1'), {8, 4, 32}, 111));
  AdmissionSnapshot snap = s.admission_snapshot(4, 8, 400);
  EXPECT_EQ(snap.counter, 0);
  EXPECT_EQ(snap.policy_version, 0);
  EXPECT_EQ(snap.steps.at(0).validating_signal, 4);
  EXPECT_EQ(snap.steps.at(0).accepted_signal, 0);
  EXPECT_EQ(snap.steps.at(0).open_groups, 1);  // x's second; y's lapsed at 150
  EXPECT_EQ(snap.steps.at(1).open_groups, 4);
  EXPECT_EQ(snap.validating_samples, 8);
  EXPECT_EQ(snap.open_groups, 5);
  EXPECT_DOUBLE_EQ(snap.signal_ratio, 0.5);

  // The step fills: its other work is dropped unjudged, whatever stage it was at.
  ASSERT_EQ(s.request({0, y, 0}, std::string(64, '2'), 10, 4, 120), "pending");
  EXPECT_FALSE(s.open_assignment(y, 150));  // asking to upload extends no lease
  EXPECT_FALSE(s.start_validation({0, x, 1}, std::string(64, '3'), {4, 4, 16},
                                  121));  // no upload URL asked for
  ASSERT_TRUE(s.accept_validated({0, x, 0}, "v", 130));
  EXPECT_TRUE(s.close_full_steps(8, 131).empty());  // 4 of 8 signal samples accepted
  EXPECT_EQ(s.latest({0, x, 1})->status, "assigned");
  ASSERT_EQ(s.request({0, x, 1}, std::string(64, '3'), 10, 4, 132), "pending");
  ASSERT_TRUE(s.start_validation({0, x, 1}, std::string(64, '3'), {4, 4, 16}, 133));
  ASSERT_TRUE(s.accept_validated({0, x, 1}, "v", 140));
  const auto dropped = s.close_full_steps(8, 141);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].key.node_address, y);
  EXPECT_EQ(dropped[0].status, "pending");  // as it was
  EXPECT_EQ(s.latest({0, y, 0})->status, "dropped");
  EXPECT_NE(s.latest({0, y, 0})->reason.find("step 0 closed"), std::string::npos);
  EXPECT_EQ(s.latest({1, x, 0})->status, "assigned");  // other steps keep their work
  EXPECT_TRUE(s.close_full_steps(8, 142).empty());
  // y's file was generated after all: it asks to upload and is told, and it counts as generated.
  EXPECT_EQ(s.request({0, y, 0}, std::string(64, '4'), 10, 4, 150), "dropped");
  EXPECT_EQ(s.node(y), std::nullopt);  // never charged to the node

  const auto samples = s.samples_by_status();
  EXPECT_EQ(samples.at("accepted"), 12);
  EXPECT_EQ(samples.at("dropped"), 12);  // 3 groups of 4
  EXPECT_EQ(samples.at("assigned"), 0);
  EXPECT_EQ(s.count_by_status().at("dropped"), 1);
  EXPECT_EQ(s.samples_judged_since(135), 4);
  EXPECT_EQ(s.samples_judged_since(100), 12);
  snap = s.admission_snapshot(4, 8, 400);
  EXPECT_EQ(snap.counter, 1);
  EXPECT_EQ(snap.steps.count(0), 0u);

  // Validators take the lowest step first, though its file came later.
  ASSERT_EQ(s.request({1, z, 0}, std::string(64, '5'), 10, 4, 160), "pending");
  ASSERT_EQ(s.request({1, x, 0}, std::string(64, '6'), 10, 4, 160), "pending");
  ASSERT_TRUE(s.start_validation({1, z, 0}, std::string(64, '5'), {8, 8, 32}, 161));
  EXPECT_EQ(s.assign(2, y, 2, 1000, 162).key.submission, 0);
  ASSERT_EQ(s.request({2, y, 0}, std::string(64, '7'), 10, 4, 163), "pending");
  ASSERT_TRUE(s.start_validation({2, y, 0}, std::string(64, '7'), {8, 8, 32}, 164));
  ASSERT_TRUE(s.start_validation({1, x, 0}, std::string(64, '6'), {8, 8, 32}, 165));
  EXPECT_EQ(s.claim("v", 10, 200)->key.node_address, z);
  EXPECT_EQ(s.claim("v", 10, 200)->key.node_address, x);
  EXPECT_EQ(s.claim("v", 10, 200)->key.step, 2);
  fs::remove_all(dir);
}

// A database of schema version 2 (validators, no work assignments) opens migrated: its rows keep
// every column, count as work of any size (groups 0), and the new statuses can be written.
TEST(State, ADatabaseOfSchemaVersion2IsMigrated) {
  const auto dir = fs::temp_directory_path() / ("trellis_state_v2_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto db = dir / "orchestrator.sqlite";
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(h, R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE submissions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER NOT NULL, node TEXT NOT NULL,
  submission INTEGER NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'validating', 'accepted', 'rejected')),
  reason TEXT NOT NULL DEFAULT '', samples INTEGER NOT NULL DEFAULT 0,
  signal_samples INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL, decided_at REAL NOT NULL DEFAULT 0, accept_seq INTEGER,
  uploaded_at REAL NOT NULL DEFAULT 0, validator TEXT NOT NULL DEFAULT '',
  claimed_by TEXT NOT NULL DEFAULT '', lease_expires REAL NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX submissions_one_open
  ON submissions (step, node, submission) WHERE status IN ('pending', 'validating', 'accepted');
CREATE INDEX submissions_by_step ON submissions (step, status, accept_seq);
CREATE TABLE nodes (
  address TEXT PRIMARY KEY, ip TEXT NOT NULL DEFAULT '', registered_at REAL NOT NULL DEFAULT 0,
  last_seen REAL NOT NULL DEFAULT 0, signed_at INTEGER NOT NULL DEFAULT 0,
  evicted INTEGER NOT NULL DEFAULT 0, evicted_reason TEXT NOT NULL DEFAULT '',
  evicted_at REAL NOT NULL DEFAULT 0, rejections INTEGER NOT NULL DEFAULT 0,
  last_rejection TEXT NOT NULL DEFAULT '');
INSERT INTO meta VALUES ('schema_version', '2'), ('run_id', 'old-run'), ('url_secret', 'ab12'),
  ('policy_version', '1'), ('allowlist_revision', '0');
INSERT INTO submissions VALUES
  (1, 0, 'aaaa', 0, 'h1', 10, 'accepted', '', 4, 4, 16, 100, 110, 1, 105, 'v', 'v', 200),
  (2, 0, 'aaaa', 1, 'h2', 10, 'validating', '', 4, 2, 16, 101, 0, NULL, 106, '', 'v', 300),
  (3, 1, 'bbbb', 0, 'h3', 10, 'pending', '', 0, 0, 0, 102, 0, NULL, 0, '', '', 0);
)sql",
                         nullptr, nullptr, &err),
            SQLITE_OK)
      << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(h);
  {
    State s(db, "ignored", keeper());
    EXPECT_EQ(s.run_id(), "old-run");
    const auto rows = s.submissions();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].validator, "v");
    EXPECT_EQ(rows[0].uploaded_at, 105);
    EXPECT_EQ(rows[1].status, "validating");
    EXPECT_EQ(rows[1].lease_expires, 300);
    EXPECT_EQ(rows[1].groups, 0);
    EXPECT_EQ(rows[2].work_expires, 0);
    // The old pending request is still uploadable; the numbers handed out next follow it.
    EXPECT_EQ(s.request({1, "bbbb", 0}, "h4", 10, 4, 200), "pending");
    EXPECT_EQ(s.assign(0, "aaaa", 2, 1000, 201).key.submission, 2);
    EXPECT_EQ(s.close_full_steps(4, 202).size(), 2u);  // step 0 holds 4 accepted signal samples
    EXPECT_EQ(s.latest({0, "aaaa", 1})->status, "dropped");
  }
  State again(db, "ignored", keeper());
  EXPECT_EQ(again.count_by_status().at("dropped"), 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::orchestrator
