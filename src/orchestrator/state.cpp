#include "orchestrator/state.h"

#include <sodium.h>

#include <algorithm>

#include "common/error.h"
#include "common/hashing.h"
#include "common/ip_address.h"
#include "common/sqlite.h"
#include "ledger/entry.h"

namespace trellis::orchestrator {
namespace {

constexpr const char* kSchemaVersion = "4";

// The submissions table; {} is its name (a migration builds it beside the old one).
constexpr const char* kSubmissionsTable = R"sql(
CREATE TABLE IF NOT EXISTS {} (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  step INTEGER NOT NULL,
  node TEXT NOT NULL,
  submission INTEGER NOT NULL,
  sha256 TEXT NOT NULL,
  size INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('assigned', 'pending', 'validating', 'accepted', 'rejected',
                                         'dropped')),
  reason TEXT NOT NULL DEFAULT '',
  samples INTEGER NOT NULL DEFAULT 0,
  signal_samples INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL,
  decided_at REAL NOT NULL DEFAULT 0,
  accept_seq INTEGER,
  uploaded_at REAL NOT NULL DEFAULT 0,
  validator TEXT NOT NULL DEFAULT '',
  claimed_by TEXT NOT NULL DEFAULT '',
  lease_expires REAL NOT NULL DEFAULT 0,
  groups INTEGER NOT NULL DEFAULT 0,
  work_expires REAL NOT NULL DEFAULT 0
);
)sql";

constexpr const char* kNodesTable = R"sql(
CREATE TABLE IF NOT EXISTS nodes (
  address TEXT PRIMARY KEY,
  ip TEXT NOT NULL DEFAULT '',
  registered_at REAL NOT NULL DEFAULT 0,
  last_seen REAL NOT NULL DEFAULT 0,
  signed_at INTEGER NOT NULL DEFAULT 0,
  evicted INTEGER NOT NULL DEFAULT 0 CHECK (evicted IN (0, 1)),
  evicted_reason TEXT NOT NULL DEFAULT '',
  evicted_at REAL NOT NULL DEFAULT 0,
  rejections INTEGER NOT NULL DEFAULT 0,
  last_rejection TEXT NOT NULL DEFAULT '',
  heartbeat_at REAL NOT NULL DEFAULT 0
);
)sql";

// Tasks came with schema 4 and only add a table: created when absent, whatever the version.
constexpr const char* kTasksTable = R"sql(
CREATE TABLE IF NOT EXISTS tasks (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  role TEXT NOT NULL CHECK (role IN ('worker', 'validator', 'relay')),
  config TEXT NOT NULL,
  node TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL,
  assigned_at REAL NOT NULL DEFAULT 0
);
)sql";

// Invites came with schema 4's protocol work and only add a table, like tasks.
constexpr const char* kInvitesTable = R"sql(
CREATE TABLE IF NOT EXISTS invites (
  nonce TEXT PRIMARY KEY,
  node TEXT NOT NULL,
  endpoint TEXT NOT NULL DEFAULT '',
  sent_at REAL NOT NULL,
  expires REAL NOT NULL,
  used_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS invites_by_node ON invites (node, expires);
CREATE INDEX IF NOT EXISTS invites_by_expiry ON invites (expires);
)sql";

// What the dashboard shows beside the decisions (schema 4, tables only, created when absent): each
// trained step's metrics as the trainer reported them, and each invited node's discovery metadata
// (hardware, software version) as the invite sweep read it.
constexpr const char* kReportTables = R"sql(
CREATE TABLE IF NOT EXISTS step_metrics (
  step INTEGER PRIMARY KEY,
  metrics TEXT NOT NULL,
  reported_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS node_metadata (
  address TEXT PRIMARY KEY,
  metadata TEXT NOT NULL,
  updated_at REAL NOT NULL
);
)sql";

constexpr const char* kIndexes = R"sql(
CREATE UNIQUE INDEX IF NOT EXISTS submissions_one_open
  ON submissions (step, node, submission)
  WHERE status IN ('assigned', 'pending', 'validating', 'accepted');
CREATE INDEX IF NOT EXISTS submissions_by_node ON submissions (node, status);
CREATE INDEX IF NOT EXISTS submissions_by_step ON submissions (step, status, accept_seq);
CREATE INDEX IF NOT EXISTS submissions_by_decision ON submissions (status, decided_at);
CREATE INDEX IF NOT EXISTS submissions_queue ON submissions (status, uploaded_at);
)sql";

// Older schemas are migrated by rebuilding the submissions table (its status CHECK changed) into
// submissions_v3 and renaming it. Version 1 had no validating status, upload time, validator or
// lease, and no rejection counts on nodes (an accepted file's upload time is its decision time);
// version 2 had no assigned or dropped status, groups or assignment expiry (0: rows handed out by
// workers themselves, never counted as assignments).
constexpr const char* kMigrateFromV1 = R"sql(
INSERT INTO submissions_v3 (id, step, node, submission, sha256, size, status, reason, samples,
  signal_samples, completion_tokens, created_at, decided_at, accept_seq, uploaded_at)
SELECT id, step, node, submission, sha256, size, status, reason, samples, signal_samples,
  completion_tokens, created_at, decided_at, accept_seq,
  CASE WHEN status = 'accepted' THEN decided_at ELSE 0 END
FROM submissions;
ALTER TABLE nodes ADD COLUMN rejections INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN last_rejection TEXT NOT NULL DEFAULT '';
)sql";

constexpr const char* kMigrateFromV2 = R"sql(
INSERT INTO submissions_v3 (id, step, node, submission, sha256, size, status, reason, samples,
  signal_samples, completion_tokens, created_at, decided_at, accept_seq, uploaded_at, validator,
  claimed_by, lease_expires)
SELECT id, step, node, submission, sha256, size, status, reason, samples, signal_samples,
  completion_tokens, created_at, decided_at, accept_seq, uploaded_at, validator, claimed_by,
  lease_expires
FROM submissions;
)sql";

// The nodes that count as present (node_is_live), with the times before which a heartbeat means
// Dead and a registration Stale bound to its two `?` (State::bind_live): registered from an IP,
// not evicted, and with a recent heartbeat or, without heartbeats, a recent registration.
constexpr const char* kLiveNodes =
    "evicted = 0 AND ip != '' AND (heartbeat_at > ? OR (heartbeat_at <= 0 AND last_seen > ?))";

constexpr const char* kNodeColumns =
    "address, ip, registered_at, last_seen, signed_at, evicted, evicted_reason, evicted_at, "
    "rejections, last_rejection, heartbeat_at";

constexpr const char* kColumns =
    "id, step, node, submission, sha256, size, status, reason, samples, signal_samples, "
    "completion_tokens, created_at, decided_at, uploaded_at, validator, claimed_by, "
    "lease_expires, groups, work_expires";

using Stmt = sqlite::Statement;

Submission read_submission(Stmt& q) {  // a query of kColumns
  Submission s;
  s.id = q.i64(0);
  s.key = {q.i64(1), q.text(2), q.i64(3)};
  s.sha256 = q.text(4);
  s.size = q.i64(5);
  s.status = q.text(6);
  s.reason = q.text(7);
  s.counts = {q.i64(8), q.i64(9), q.i64(10)};
  s.created_at = q.f64(11);
  s.decided_at = q.f64(12);
  s.uploaded_at = q.f64(13);
  s.validator = q.text(14);
  s.claimed_by = q.text(15);
  s.lease_expires = q.f64(16);
  s.groups = q.i64(17);
  s.work_expires = q.f64(18);
  return s;
}

// Every remaining row of a query of kColumns.
std::vector<Submission> read_submissions(Stmt& q) {
  std::vector<Submission> out;
  while (q.step()) out.push_back(read_submission(q));
  return out;
}

Node read_node(Stmt& q) {  // a query of kNodeColumns
  Node n;
  n.address = q.text(0);
  n.ip = q.text(1);
  n.registered_at = q.f64(2);
  n.last_seen = q.f64(3);
  n.signed_at = q.i64(4);
  n.evicted = q.i64(5) != 0;
  n.evicted_reason = q.text(6);
  n.evicted_at = q.f64(7);
  n.rejections = q.i64(8);
  n.last_rejection = q.text(9);
  n.heartbeat_at = q.f64(10);
  return n;
}

std::string random_secret() {
  if (sodium_init() < 0) throw Error("libsodium failed to initialize", "orchestrator state");
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof bytes);
  return to_hex({reinterpret_cast<const char*>(bytes), sizeof bytes});
}

}  // namespace

State::State(const std::filesystem::path& path, const std::string& run_id, Identity keeper,
             PoolPolicy policy)
    : db_(path, sqlite::Database::kReadWrite), path_(path.string()), policy_(std::move(policy)) {
  exec("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)");
  sqlite::Transaction tx(db_);
  const std::string version = meta("schema_version");
  if (version.empty()) {
    exec(fmt::format(fmt::runtime(kSubmissionsTable), "submissions").c_str());
    exec(kNodesTable);
    exec(kIndexes);
    set_meta("schema_version", kSchemaVersion);
  } else if (version == "1" || version == "2" || version == "3") {
    migrate(version);
  } else if (version != kSchemaVersion) {
    fail(path_, "the database has schema version {}, this trellis reads versions 1 to {}", version,
         kSchemaVersion);
  }
  run_id_ = meta("run_id");
  if (run_id_.empty()) {
    run_id_ = run_id;
    set_meta("run_id", run_id_);
  }
  url_secret_ = meta("url_secret");
  if (url_secret_.empty()) {
    url_secret_ = random_secret();
    set_meta("url_secret", url_secret_);
  }
  if (meta("policy_version").empty()) set_meta("policy_version", "0");
  if (meta("allowlist_revision").empty()) set_meta("allowlist_revision", "0");
  exec(kTasksTable);
  exec(kInvitesTable);
  exec(kReportTables);
  ledger_ = std::make_unique<ledger::Ledger>(db_, std::move(keeper), run_id_, policy_.to_json());
  tx.commit();
}

State::~State() = default;

void State::migrate(const std::string& from_version) {
  if (from_version != "3") {  // the submissions table of version 3
    exec(fmt::format(fmt::runtime(kSubmissionsTable), "submissions_v3").c_str());
    exec(from_version == "1" ? kMigrateFromV1 : kMigrateFromV2);
    exec("DROP TABLE submissions; ALTER TABLE submissions_v3 RENAME TO submissions;");
    exec(kIndexes);
  }
  exec("ALTER TABLE nodes ADD COLUMN heartbeat_at REAL NOT NULL DEFAULT 0");  // version 4
  // The set its revision stands for (no node had heartbeats before: the clock does not matter).
  std::string ips;
  for (const std::string& ip : allowed_ips(0)) ips += ip + "\n";
  set_meta("allowlist_ips", ips);
  set_meta("schema_version", kSchemaVersion);
}

std::string node_state(const Node& node, double now, const PoolPolicy& policy) {
  if (node.evicted) return "evicted";
  if (node.heartbeat_at <= 0)
    return now - node.last_seen > policy.registration_ttl_s ? "stale" : "registered";
  const double missed = (now - node.heartbeat_at) / policy.heartbeat_s;
  if (missed >= static_cast<double>(policy.dead_after)) return "dead";
  if (missed >= static_cast<double>(policy.unhealthy_after)) return "unhealthy";
  return "healthy";
}

bool node_is_live(const Node& node, double now, const PoolPolicy& policy) {
  const std::string state = node_state(node, now, policy);
  return state != "evicted" && state != "dead" && state != "stale";
}

const std::vector<std::string>& submission_statuses() {
  static const std::vector<std::string> kStatuses = {"assigned", "pending",  "validating",
                                                     "accepted", "rejected", "dropped"};
  return kStatuses;
}

std::string eviction_message(const Node& node) {
  return fmt::format("node {} was evicted: {}", node.address, node.evicted_reason);
}

void State::exec(const char* sql) { db_.exec(sql); }

std::string State::meta(const std::string& key) {
  Stmt q(db_, "SELECT value FROM meta WHERE key = ?");
  q.bind(key);
  return q.step() ? q.text(0) : "";
}

void State::set_meta(const std::string& key, const std::string& value) {
  Stmt q(db_,
         "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = "
         "excluded.value");
  q.bind(key).bind(value).step();
}

int64_t State::policy_version() {
  std::lock_guard lock(mu_);
  return std::stoll(meta("policy_version"));
}

int64_t State::publish_version(int64_t version, const std::string& public_key) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  const int64_t newest = std::max<int64_t>(version, std::stoll(meta("policy_version")));
  set_meta("policy_version", std::to_string(newest));
  if (!public_key.empty()) set_meta("trainer_public_key", public_key);
  tx.commit();
  return newest;
}

std::string State::trainer_public_key() {
  std::lock_guard lock(mu_);
  return meta("trainer_public_key");
}

double State::dead_before(double now) const {
  return now - policy_.heartbeat_s * static_cast<double>(policy_.dead_after);
}

sqlite::Statement& State::bind_live(sqlite::Statement& q, double now) const {
  return q.bind(dead_before(now)).bind(now - policy_.registration_ttl_s);
}

std::vector<std::string> State::allowed_ips(double now) {
  Stmt q(db_, fmt::format("SELECT DISTINCT ip FROM nodes WHERE {} ORDER BY ip", kLiveNodes));
  bind_live(q, now);
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

void State::bump_allowlist_if_changed(double now) {
  std::string ips;
  for (const std::string& ip : allowed_ips(now)) ips += ip + "\n";
  if (ips != meta("allowlist_ips")) {
    set_meta("allowlist_ips", ips);
    set_meta("allowlist_revision", std::to_string(std::stoll(meta("allowlist_revision")) + 1));
  }
}

std::optional<Node> State::find_node(const std::string& address) {
  Stmt q(db_, fmt::format("SELECT {} FROM nodes WHERE address = ?", kNodeColumns));
  q.bind(address);
  if (!q.step()) return std::nullopt;
  return read_node(q);
}

Registration State::register_node(const std::string& address, const std::string& ip,
                                  int64_t signed_at, double now, const std::string& invite) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  const std::optional<Node> before = find_node(address);
  if (before && before->evicted) return {Registration::kEvicted, *before};
  if (std::string why = admission_problem_locked(address); !why.empty()) {
    return {Registration::kNotAdmitted, before.value_or(Node{address}), std::move(why)};
  }
  if (before && before->registered_at > 0 &&
      (signed_at < before->signed_at || (signed_at == before->signed_at && ip != before->ip))) {
    return {Registration::kReplayed, *before};
  }
  if (std::string why = ip_problem_locked(address, ip, now); !why.empty()) {
    return {Registration::kIpFull, before.value_or(Node{address}), std::move(why)};
  }
  if (!invite.empty()) {
    if (std::string why = use_invite_locked(address, invite, now); !why.empty())
      return {Registration::kBadInvite, before.value_or(Node{address}), std::move(why)};
  } else if (before && before->heartbeat_at > 0 && node_state(*before, now, policy_) == "dead") {
    return {Registration::kInviteRequired, *before,
            fmt::format("node {} is Dead (no heartbeat for {:.0f} s): it returns only with a new "
                        "invite, which the orchestrator sends to nodes it finds in discovery "
                        "(run `trellis node`)",
                        address, now - before->heartbeat_at)};
  }
  // Only an invited registration starts (or restarts) a node's heartbeat clock: a plain one of a
  // node that sends heartbeats refreshes its IP, not its liveness (its agent's heartbeats do).
  Stmt q(
      db_,
      "INSERT INTO nodes (address, ip, registered_at, last_seen, signed_at, heartbeat_at) VALUES "
      "(?, ?, ?, ?, ?, ?) ON CONFLICT (address) DO UPDATE SET ip = excluded.ip, last_seen = "
      "excluded.last_seen, signed_at = excluded.signed_at, registered_at = CASE WHEN "
      "registered_at > 0 THEN registered_at ELSE excluded.registered_at END, heartbeat_at = "
      "CASE WHEN excluded.heartbeat_at > 0 THEN excluded.heartbeat_at ELSE heartbeat_at END");
  q.bind(address).bind(ip).bind(now).bind(now).bind(signed_at).bind(invite.empty() ? 0.0 : now);
  q.step();
  bump_allowlist_if_changed(now);
  if (!before || before->registered_at == 0 || before->ip != ip) {
    ledger_->record("registration", {{"node", address}, {"ip", ip}});
  }
  if (!invite.empty()) {
    ledger_->record("invite", {{"node", address}, {"pool", run_id_}, {"nonce", invite}});
  }
  Registration out{Registration::kRegistered, *find_node(address)};
  tx.commit();
  return out;
}

std::string State::ip_problem_locked(const std::string& address, const std::string& ip,
                                     double now) {
  if (policy_.max_nodes_per_ip <= 0) return "";
  Stmt q(db_, fmt::format("SELECT ip FROM nodes WHERE {} AND address != ?", kLiveNodes));
  bind_live(q, now).bind(address);
  const std::string block = subscriber_block(ip);
  int64_t live = 0;
  while (q.step()) live += subscriber_block(q.text(0)) == block;
  if (live < policy_.max_nodes_per_ip) return "";
  // Every node at a loopback address: most likely a reverse proxy the config does not trust.
  const bool loopback = is_loopback_address(ip);
  return fmt::format(
      "{} has {} live nodes registered already, the most one address may have "
      "(orchestrator.max_nodes_per_ip = {}): a slot frees when one of them is evicted or dies "
      "(no heartbeats){}",
      block, live, policy_.max_nodes_per_ip,
      loopback ? "; behind a reverse proxy on this machine, list it in "
                 "orchestrator.trusted_proxies so that nodes count by their own addresses"
               : "");
}

std::string State::use_invite_locked(const std::string& address, const std::string& nonce,
                                     double now) {
  Stmt q(db_, "SELECT expires, used_at FROM invites WHERE nonce = ? AND node = ?");
  q.bind(nonce).bind(address);
  if (!q.step())
    return fmt::format("no invite with nonce {} was sent to node {}", nonce.substr(0, 64), address);
  if (q.f64(1) > 0) return fmt::format("invite {} was used already", nonce);
  if (q.f64(0) < now) return fmt::format("invite {} has expired", nonce);
  Stmt use(db_, "UPDATE invites SET used_at = ? WHERE nonce = ?");
  use.bind(now).bind(nonce).step();
  return "";
}

void State::record_invite(const std::string& address, const std::string& nonce, double expires,
                          double now, const std::string& endpoint) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "INSERT INTO invites (nonce, node, endpoint, sent_at, expires) VALUES (?, ?, ?, ?, ?)");
  q.bind(nonce).bind(address).bind(endpoint).bind(now).bind(expires).step();
}

void State::record_node_metadata(const std::string& address, const std::string& metadata,
                                 double now) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "INSERT INTO node_metadata (address, metadata, updated_at) VALUES (?, ?, ?) "
         "ON CONFLICT (address) DO UPDATE SET metadata = excluded.metadata, "
         "updated_at = excluded.updated_at");
  q.bind(address).bind(metadata).bind(now).step();
}

void State::record_step_metrics(int64_t step, const std::string& metrics, double now) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "INSERT INTO step_metrics (step, metrics, reported_at) VALUES (?, ?, ?) "
         "ON CONFLICT (step) DO UPDATE SET metrics = excluded.metrics, "
         "reported_at = excluded.reported_at");
  q.bind(step).bind(metrics).bind(now).step();
}

std::string State::node_endpoint(const std::string& address) {
  std::lock_guard lock(mu_);
  Stmt q(
      db_,
      "SELECT endpoint FROM invites WHERE node = ? AND used_at > 0 ORDER BY used_at DESC LIMIT 1");
  q.bind(address);
  return q.step() ? q.text(0) : "";
}

void State::forget_expired_invites(double now) {
  std::lock_guard lock(mu_);
  Stmt q(db_, "DELETE FROM invites WHERE expires < ? AND used_at = 0");
  q.bind(now).step();
}

bool State::wants_invite(const std::string& address, double now) {
  std::lock_guard lock(mu_);
  const std::optional<Node> n = find_node(address);
  if (n && n->evicted) return false;  // an evicted address never rejoins
  if (n && n->registered_at > 0 && node_is_live(*n, now, policy_)) return false;
  Stmt open(db_, "SELECT 1 FROM invites WHERE node = ? AND used_at = 0 AND expires >= ? LIMIT 1");
  open.bind(address).bind(now);
  return !open.step();
}

std::vector<std::string> State::invited(double now) {
  std::lock_guard lock(mu_);
  Stmt q(db_, "SELECT DISTINCT node FROM invites WHERE used_at = 0 AND expires >= ? ORDER BY node");
  q.bind(now);
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

std::string State::admission_problem(const std::string& address) {
  std::lock_guard lock(mu_);
  return admission_problem_locked(address);
}

std::string State::admission_problem_locked(const std::string& address) {
  if (policy_.join == "stake") {
    const int64_t stake = ledger_->stake_of(address);
    if (stake >= policy_.stake) return "";
    return fmt::format(
        "node {} holds a stake of {} work units; this pool admits nodes with {} "
        "(the pool owner deposits stake: trellis orchestrator stake {} {})",
        address, stake, policy_.stake, address, policy_.stake - stake);
  }
  if (policy_.join == "approval" && !ledger_->approved(address)) {
    return fmt::format(
        "node {} is not approved: this pool admits the addresses its owner "
        "approves (trellis orchestrator approve {})",
        address, address);
  }
  return "";
}

int64_t State::deposit_stake(const std::string& address, int64_t amount) {
  if (amount <= 0) fail("stake", "a deposit must be positive, got {}", amount);
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  ledger_->record("stake", {{"node", address}, {"amount", amount}});
  const int64_t stake = ledger_->stake_of(address);
  tx.commit();
  return stake;
}

bool State::approve(const std::string& address) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  if (ledger_->approved(address)) return false;
  ledger_->record("approval", {{"node", address}});
  tx.commit();
  return true;
}

std::pair<int64_t, std::string> State::ledger_head() {
  std::lock_guard lock(mu_);
  return ledger_->head();
}

int64_t State::stake_of(const std::string& address) {
  std::lock_guard lock(mu_);
  return ledger_->stake_of(address);
}

Eviction State::evict(const std::string& address, const std::string& reason, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Eviction out = evict_locked(address, reason, now);
  tx.commit();
  return out;
}

Eviction State::evict_locked(const std::string& address, const std::string& reason, double now) {
  Stmt q(db_,
         "INSERT INTO nodes (address, evicted, evicted_reason, evicted_at) VALUES (?, 1, ?, ?) ON "
         "CONFLICT (address) DO UPDATE SET evicted = 1, evicted_reason = excluded.evicted_reason, "
         "evicted_at = excluded.evicted_at WHERE evicted = 0");
  q.bind(address).bind(reason).bind(now).step();
  if (db_.changes() == 1) ledger_->record("eviction", {{"node", address}, {"reason", reason}});
  bump_allowlist_if_changed(now);
  Eviction out;
  out.node = *find_node(address);
  Stmt find(db_,
            "SELECT step, submission FROM submissions WHERE node = ? AND status = 'validating' "
            "ORDER BY id");
  find.bind(address);
  while (find.step()) out.rejected.push_back({find.i64(0), address, find.i64(1)});
  // Its open work goes too, so that its share of each step's quota is handed out again.
  Stmt drop(db_,
            "UPDATE submissions SET status = 'rejected', reason = ?, decided_at = ? WHERE node = ? "
            "AND status IN ('assigned', 'pending', 'validating')");
  drop.bind(eviction_message(out.node)).bind(now).bind(address).step();
  return out;
}

std::optional<Node> State::node(const std::string& address) {
  std::lock_guard lock(mu_);
  return find_node(address);
}

std::vector<Node> State::nodes() {
  std::lock_guard lock(mu_);
  Stmt q(db_, fmt::format("SELECT {} FROM nodes ORDER BY address", kNodeColumns));
  std::vector<Node> out;
  while (q.step()) out.push_back(read_node(q));
  return out;
}

const std::vector<std::string>& task_roles() {
  static const std::vector<std::string> kRoles = {"worker", "validator", "relay"};
  return kRoles;
}

namespace {

Task read_task(Stmt& q) {  // id, role, config, node, created_at, assigned_at
  return {q.i64(0), q.text(1), q.text(2), q.text(3), q.f64(4), q.f64(5)};
}

}  // namespace

int64_t State::create_task(const std::string& role, const std::string& config,
                           const std::string& node, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt q(db_,
         "INSERT INTO tasks (role, config, node, created_at, assigned_at) VALUES (?, ?, ?, ?, ?)");
  q.bind(role).bind(config).bind(node).bind(now).bind(node.empty() ? 0.0 : now).step();
  const int64_t id = db_.last_insert_rowid();
  tx.commit();
  return id;
}

std::optional<Task> State::task_for(const std::string& address, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  constexpr const char* kColumns = "id, role, config, node, created_at, assigned_at";
  Stmt mine(db_, fmt::format("SELECT {} FROM tasks WHERE node = ? ORDER BY id LIMIT 1", kColumns));
  mine.bind(address);
  if (mine.step()) return read_task(mine);
  const std::optional<Node> me = find_node(address);
  if (!me || !node_is_live(*me, now, policy_)) return std::nullopt;
  // Free: never taken, or held by a node that is gone (evicted, or dead: it sent heartbeats and
  // stopped). A node that never sent one holds nothing (it never asked for a task).
  Stmt free(db_, fmt::format("SELECT {} FROM tasks WHERE node = '' OR node IN (SELECT address FROM "
                             "nodes WHERE evicted = 1 OR (heartbeat_at > 0 AND heartbeat_at <= ?)) "
                             "ORDER BY id LIMIT 1",
                             kColumns));
  free.bind(dead_before(now));
  if (!free.step()) return std::nullopt;
  Task t = read_task(free);
  t.node = address;
  t.assigned_at = now;
  Stmt take(db_, "UPDATE tasks SET node = ?, assigned_at = ? WHERE id = ?");
  take.bind(address).bind(now).bind(t.id).step();
  tx.commit();
  return t;
}

std::vector<Task> State::tasks() {
  std::lock_guard lock(mu_);
  Stmt q(db_, "SELECT id, role, config, node, created_at, assigned_at FROM tasks ORDER BY id");
  std::vector<Task> out;
  while (q.step()) out.push_back(read_task(q));
  return out;
}

NodeCounts State::node_counts() {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT COALESCE(SUM(evicted = 0 AND registered_at > 0), 0), COALESCE(SUM(evicted), 0) "
         "FROM nodes");
  q.step();
  return {q.i64(0), q.i64(1)};
}

Allowlist State::allowlist(double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  bump_allowlist_if_changed(now);  // deaths happen by the clock, not by a request
  Allowlist out{std::stoll(meta("allowlist_revision")), allowed_ips(now)};
  tx.commit();
  return out;
}

State::Beat State::heartbeat(const std::string& address, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  const std::optional<Node> n = find_node(address);
  if (!n || n->registered_at <= 0) return Beat::kNotRegistered;
  if (n->evicted) return Beat::kEvicted;
  if (!node_is_live(*n, now, policy_)) return Beat::kDead;
  Stmt q(db_, "UPDATE nodes SET heartbeat_at = ?, last_seen = ? WHERE address = ?");
  q.bind(now).bind(now).bind(address).step();
  tx.commit();
  return Beat::kRecorded;
}

std::optional<Submission> State::open_assignment(const std::string& node_address, double now) {
  std::lock_guard lock(mu_);
  Stmt q(db_, fmt::format("SELECT {} FROM submissions WHERE node = ? AND status IN ('assigned', "
                          "'pending') AND work_expires > ? ORDER BY id DESC LIMIT 1",
                          kColumns));
  q.bind(node_address).bind(now);
  if (!q.step()) return std::nullopt;
  return read_submission(q);
}

Submission State::assign(int64_t step, const std::string& node_address, int64_t groups,
                         double expires, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt next(db_,
            "SELECT COALESCE(MAX(submission) + 1, 0) FROM submissions WHERE step = ? AND node = ?");
  next.bind(step).bind(node_address).step();
  const int64_t submission = next.i64(0);
  Stmt insert(db_,
              "INSERT INTO submissions (step, node, submission, sha256, size, status, created_at, "
              "groups, work_expires) VALUES (?, ?, ?, '', 0, 'assigned', ?, ?, ?)");
  insert.bind(step).bind(node_address).bind(submission).bind(now).bind(groups).bind(expires);
  insert.step();
  Stmt row(db_, fmt::format("SELECT {} FROM submissions WHERE id = ?", kColumns));
  row.bind(db_.last_insert_rowid()).step();
  Submission out = read_submission(row);
  tx.commit();
  return out;
}

AdmissionSnapshot State::admission_snapshot(int64_t steps, int64_t batch_size, double now) {
  const auto signal = signal_samples_by_step();
  std::lock_guard lock(mu_);
  AdmissionSnapshot out;
  out.counter = step_counter(signal, steps, batch_size);
  out.policy_version = std::stoll(meta("policy_version"));
  Stmt tallies(db_,
               "SELECT step, SUM(CASE WHEN status = 'accepted' THEN signal_samples ELSE 0 END), "
               "SUM(CASE WHEN status = 'validating' THEN signal_samples ELSE 0 END), "
               "SUM(CASE WHEN status = 'validating' THEN samples ELSE 0 END), "
               "SUM(CASE WHEN status IN ('assigned', 'pending') AND work_expires > ?1 THEN groups "
               "ELSE 0 END) FROM submissions WHERE step >= ?2 AND status IN ('assigned', "
               "'pending', 'validating', 'accepted') GROUP BY step");
  tallies.bind(now).bind(out.counter);
  while (tallies.step()) {
    out.steps[tallies.i64(0)] = {tallies.i64(1), tallies.i64(2), tallies.i64(4)};
    out.validating_samples += tallies.i64(3);
    out.open_groups += tallies.i64(4);
  }
  // Validating files of steps below the counter are closed as their steps fill; none are left.
  Stmt recent(db_,
              "SELECT COALESCE(SUM(signal_samples), 0), COALESCE(SUM(samples), 0) FROM (SELECT "
              "signal_samples, samples FROM submissions WHERE status IN ('validating', "
              "'accepted') ORDER BY uploaded_at DESC LIMIT 32)");
  recent.step();
  if (recent.i64(1) > 0)
    out.signal_ratio = static_cast<double>(recent.i64(0)) / static_cast<double>(recent.i64(1));
  return out;
}

std::string State::request(const SubmissionKey& key, const std::string& sha256, int64_t size,
                           int64_t group_size, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt find(db_,
            "SELECT id, status FROM submissions WHERE step = ? AND node = ? AND submission = ? "
            "ORDER BY id DESC LIMIT 1");
  find.bind(key.step).bind(key.node_address).bind(key.submission);
  if (!find.step()) return "";
  const int64_t id = find.i64(0);
  const std::string status = find.text(1);
  if (status == "assigned" || status == "pending") {
    Stmt update(db_,
                "UPDATE submissions SET status = 'pending', sha256 = ?, size = ?, samples = groups "
                "* ?, created_at = ? WHERE id = ?");
    update.bind(sha256).bind(size).bind(group_size).bind(now).bind(id).step();
  } else if (status == "dropped") {  // generated after all: counted as such
    Stmt update(db_, "UPDATE submissions SET samples = MAX(samples, groups * ?) WHERE id = ?");
    update.bind(group_size).bind(id).step();
  } else {
    return status;
  }
  tx.commit();
  return status == "dropped" ? status : "pending";
}

std::optional<Submission> State::latest(const SubmissionKey& key) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         fmt::format("SELECT {} FROM submissions WHERE step = ? AND node = ? AND submission = ? "
                     "ORDER BY id DESC LIMIT 1",
                     kColumns));
  q.bind(key.step).bind(key.node_address).bind(key.submission);
  if (!q.step()) return std::nullopt;
  return read_submission(q);
}

bool State::has_status(const SubmissionKey& key, const char* status) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT 1 FROM submissions WHERE step = ? AND node = ? AND submission = ? AND status = ?");
  q.bind(key.step).bind(key.node_address).bind(key.submission).bind(std::string(status));
  return q.step();
}

bool State::is_accepted(const SubmissionKey& key) { return has_status(key, "accepted"); }

bool State::is_validating(const SubmissionKey& key) { return has_status(key, "validating"); }

bool State::accept(const SubmissionKey& key, const std::string& sha256, const FileCounts& counts,
                   double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt q(db_,
         "UPDATE submissions SET status = 'accepted', samples = ?, signal_samples = ?, "
         "completion_tokens = ?, uploaded_at = ?, decided_at = ?, accept_seq = (SELECT "
         "COALESCE(MAX(accept_seq), 0) + 1 FROM submissions) WHERE step = ? AND node = ? AND "
         "submission = ? AND status = 'pending' AND sha256 = ?");
  q.bind(counts.samples).bind(counts.signal_samples).bind(counts.completion_tokens);
  q.bind(now).bind(now).bind(key.step).bind(key.node_address).bind(key.submission).bind(sha256);
  q.step();
  const bool changed = db_.changes() == 1;
  if (changed) {
    ledger_->record("submission",
                    ledger::submission_body(key.node_address, key.step, key.submission, sha256,
                                            counts.samples, counts.completion_tokens));
    ledger_->record("verdict", ledger::verdict_body(key.node_address, key.step, key.submission,
                                                    sha256, true, ""));
  }
  tx.commit();
  return changed;
}

bool State::start_validation(const SubmissionKey& key, const std::string& sha256,
                             const FileCounts& counts, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt q(db_,
         "UPDATE submissions SET status = 'validating', samples = ?, signal_samples = ?, "
         "completion_tokens = ?, uploaded_at = ? WHERE step = ? AND node = ? AND submission = ? "
         "AND status = 'pending' AND sha256 = ?");
  q.bind(counts.samples).bind(counts.signal_samples).bind(counts.completion_tokens).bind(now);
  q.bind(key.step).bind(key.node_address).bind(key.submission).bind(sha256);
  q.step();
  const bool changed = db_.changes() == 1;
  if (changed) {
    ledger_->record("submission",
                    ledger::submission_body(key.node_address, key.step, key.submission, sha256,
                                            counts.samples, counts.completion_tokens));
  }
  tx.commit();
  return changed;
}

bool State::reject(const SubmissionKey& key, const std::string& reason, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt q(db_,
         "UPDATE submissions SET status = 'rejected', reason = ?, decided_at = ? WHERE step = ? "
         "AND node = ? AND submission = ? AND status = 'pending'");
  q.bind(reason).bind(now).bind(key.step).bind(key.node_address).bind(key.submission);
  q.step();
  const bool changed = db_.changes() == 1;
  tx.commit();
  return changed;
}

std::optional<Submission> State::claim(const std::string& validator, double lease_s, double now) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt q(db_, fmt::format(
                  "SELECT {} FROM submissions WHERE status = 'validating' AND lease_expires <= ? "
                  "ORDER BY step, uploaded_at, id LIMIT 1",
                  kColumns));
  q.bind(now);
  if (!q.step()) return std::nullopt;
  Submission s = read_submission(q);
  // Every claimant in order: a lease that ran out without a verdict stays on the record.
  s.claimed_by = s.claimed_by.empty() ? validator : s.claimed_by + ", " + validator;
  s.lease_expires = now + lease_s;
  Stmt lease(db_, "UPDATE submissions SET claimed_by = ?, lease_expires = ? WHERE id = ?");
  lease.bind(s.claimed_by).bind(s.lease_expires).bind(s.id).step();
  tx.commit();
  return s;
}

namespace {

// The validating row of `key` (callers hold the state's lock).
std::optional<Submission> validating_row(const sqlite::Database& db, const SubmissionKey& key) {
  Stmt q(db, fmt::format("SELECT {} FROM submissions WHERE step = ? AND node = ? AND submission "
                         "= ? AND status = 'validating'",
                         kColumns));
  q.bind(key.step).bind(key.node_address).bind(key.submission);
  if (!q.step()) return std::nullopt;
  return read_submission(q);
}

}  // namespace

void State::record_verdict(const Submission& row, bool accepted, const std::string& reason,
                           const std::optional<ledger::Statement>& signed_verdict) {
  Json body = ledger::verdict_body(row.key.node_address, row.key.step, row.key.submission,
                                   row.sha256, accepted, reason);
  if (!signed_verdict) {
    ledger_->record("verdict", body);
    return;
  }
  // The same verdict on the same file; the reason is the validator's own words.
  Json said = signed_verdict->kind == "verdict" ? ledger::checked_body(*signed_verdict) : Json();
  if (said.is_object()) said["reason"] = reason;
  if (said != body) {
    fail("ledger", "the validator's signed statement is not this verdict: it says {} {}",
         signed_verdict->kind, signed_verdict->body.substr(0, 1000));
  }
  if (ledger_->role_of(signed_verdict->author) != "validator") {
    ledger_->record("role", {{"address", signed_verdict->author}, {"role", "validator"}});
  }
  ledger_->append(*signed_verdict);
}

bool State::accept_validated(const SubmissionKey& key, const std::string& validator, double now,
                             const std::optional<ledger::Statement>& signed_verdict) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  const std::optional<Submission> row = validating_row(db_, key);
  if (!row) return false;
  Stmt q(db_,
         "UPDATE submissions SET status = 'accepted', validator = ?, decided_at = ?, accept_seq = "
         "(SELECT COALESCE(MAX(accept_seq), 0) + 1 FROM submissions) WHERE id = ?");
  q.bind(validator).bind(now).bind(row->id).step();
  record_verdict(*row, true, "", signed_verdict);
  tx.commit();
  return true;
}

Rejection State::reject_validated(const SubmissionKey& key, const std::string& reason,
                                  const std::string& validator, const std::string& evict_reason,
                                  double now,
                                  const std::optional<ledger::Statement>& signed_verdict) {
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  const std::optional<Submission> row = validating_row(db_, key);
  if (!row) return {};
  Stmt q(db_,
         "UPDATE submissions SET status = 'rejected', reason = ?, validator = ?, decided_at = ? "
         "WHERE id = ?");
  q.bind(reason).bind(validator).bind(now).bind(row->id).step();
  record_verdict(*row, false, reason, signed_verdict);
  if (const int64_t stake = ledger_->stake_of(key.node_address); stake > 0) {
    const int64_t taken = policy_.slash == 0 ? stake : std::min(policy_.slash, stake);
    ledger_->record(
        "slash",
        {{"node", key.node_address},
         {"amount", taken},
         {"reason", fmt::format("step {} submission {}: {}", key.step, key.submission, reason)}});
  }
  Stmt count(db_,
             "INSERT INTO nodes (address, rejections, last_rejection) VALUES (?, 1, ?) ON CONFLICT "
             "(address) DO UPDATE SET rejections = rejections + 1, last_rejection = "
             "excluded.last_rejection");
  count.bind(key.node_address)
      .bind(fmt::format("step {} submission {}: {}", key.step, key.submission, reason))
      .step();
  Rejection out;
  out.rejected = true;
  if (evict_reason.empty()) {
    out.eviction.node = *find_node(key.node_address);
  } else {
    out.eviction = evict_locked(key.node_address, evict_reason, now);
  }
  tx.commit();
  return out;
}

std::vector<Submission> State::close_full_steps(int64_t batch_size, double now) {
  constexpr const char* kOpenInFullSteps =
      "status IN ('assigned', 'pending', 'validating') AND step IN (SELECT step FROM submissions "
      "WHERE status = 'accepted' GROUP BY step HAVING SUM(signal_samples) >= ?)";
  std::lock_guard lock(mu_);
  sqlite::Transaction tx(db_);
  Stmt find(db_, fmt::format("SELECT {} FROM submissions WHERE {} ORDER BY id", kColumns,
                             kOpenInFullSteps));
  find.bind(batch_size);
  std::vector<Submission> out = read_submissions(find);
  Stmt drop(db_,
            fmt::format("UPDATE submissions SET status = 'dropped', reason = 'step ' || step || ' "
                        "closed: its accepted files hold the ' || ?1 || ' signal samples it "
                        "needs, so this one was not judged (surplus, not the node''s fault)', "
                        "decided_at = ?2 WHERE {}",
                        kOpenInFullSteps));
  drop.bind(batch_size).bind(now).bind(batch_size).step();
  tx.commit();
  return out;
}

std::vector<Submission> State::submissions(const std::string& status, std::optional<int64_t> step) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         fmt::format("SELECT {} FROM submissions WHERE (?1 = '' OR status = ?1) AND (?2 < 0 OR "
                     "step = ?2) ORDER BY id",
                     kColumns));
  q.bind(status).bind(step.value_or(-1));
  return read_submissions(q);
}

std::vector<Submission> State::submissions_page(const std::string& status, int64_t before_id,
                                                int64_t limit) {
  std::lock_guard lock(mu_);
  Stmt q(db_, fmt::format("SELECT {} FROM submissions WHERE (?1 = '' OR status = ?1) AND id < ?2 "
                          "ORDER BY id DESC LIMIT ?3",
                          kColumns));
  q.bind(status).bind(before_id).bind(limit);
  return read_submissions(q);
}

std::optional<Submission> State::submission(int64_t id) {
  std::lock_guard lock(mu_);
  Stmt q(db_, fmt::format("SELECT {} FROM submissions WHERE id = ?", kColumns));
  q.bind(id);
  if (!q.step()) return std::nullopt;
  return read_submission(q);
}

std::vector<ValidatorActivity> State::validator_activity(double since, double now) {
  std::lock_guard lock(mu_);
  std::map<std::string, ValidatorActivity> by_name;
  Stmt decided(db_,
               "SELECT validator, SUM(status = 'accepted'), SUM(status = 'rejected'), "
               "SUM(samples), SUM(CASE WHEN decided_at >= ? THEN samples ELSE 0 END), "
               "MAX(decided_at) FROM submissions WHERE validator != '' AND status IN ('accepted', "
               "'rejected') GROUP BY validator");
  decided.bind(since);
  while (decided.step()) {
    ValidatorActivity& v = by_name[decided.text(0)];
    v.accepted = decided.i64(1);
    v.rejected = decided.i64(2);
    v.samples = decided.i64(3);
    v.recent_samples = decided.i64(4);
    v.last_decided_at = decided.f64(5);
  }
  // claimed_by lists every validator that claimed the file: the lease is the last one's.
  Stmt leased(
      db_, "SELECT claimed_by FROM submissions WHERE status = 'validating' AND lease_expires > ?");
  leased.bind(now);
  while (leased.step()) {
    const std::string claimed = leased.text(0);
    const size_t comma = claimed.rfind(", ");
    ++by_name[comma == std::string::npos ? claimed : claimed.substr(comma + 2)].holding;
  }
  std::vector<ValidatorActivity> out;
  for (auto& [name, v] : by_name) {
    v.name = name;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<StepMetrics> State::step_metrics(int64_t limit) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT step, reported_at, metrics FROM (SELECT * FROM step_metrics ORDER BY step DESC "
         "LIMIT ?) ORDER BY step");
  q.bind(limit);
  std::vector<StepMetrics> out;
  while (q.step()) out.push_back({q.i64(0), q.f64(1), q.text(2)});
  return out;
}

std::map<std::string, std::string> State::node_metadata() {
  std::lock_guard lock(mu_);
  Stmt q(db_, "SELECT address, metadata FROM node_metadata");
  std::map<std::string, std::string> out;
  while (q.step()) out[q.text(0)] = q.text(1);
  return out;
}

std::vector<Submission> State::accepted(int64_t step) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         fmt::format("SELECT {} FROM submissions WHERE step = ? AND status = 'accepted' ORDER BY "
                     "accept_seq",
                     kColumns));
  q.bind(step);
  return read_submissions(q);
}

std::map<int64_t, int64_t> State::signal_samples_by_step() {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT step, SUM(signal_samples) FROM submissions WHERE status = 'accepted' GROUP BY "
         "step");
  std::map<int64_t, int64_t> out;
  while (q.step()) out[q.i64(0)] = q.i64(1);
  return out;
}

namespace {

// Every status, each present with 0 until counted.
std::map<std::string, int64_t> per_status(const sqlite::Database& db, const char* sql) {
  std::map<std::string, int64_t> out;
  for (const std::string& status : submission_statuses()) out[status] = 0;
  Stmt q(db, sql);
  while (q.step()) out[q.text(0)] = q.i64(1);
  return out;
}

}  // namespace

std::map<std::string, int64_t> State::count_by_status() {
  std::lock_guard lock(mu_);
  return per_status(db_, "SELECT status, COUNT(*) FROM submissions GROUP BY status");
}

std::map<std::string, int64_t> State::samples_by_status() {
  std::lock_guard lock(mu_);
  return per_status(db_, "SELECT status, SUM(samples) FROM submissions GROUP BY status");
}

int64_t State::samples_judged_since(double since) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT COALESCE(SUM(samples), 0) FROM submissions WHERE validator != '' AND decided_at "
         ">= ? AND status IN ('accepted', 'rejected')");
  q.bind(since);
  q.step();
  return q.i64(0);
}

FileCounts State::accepted_totals() {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT COALESCE(SUM(samples), 0), COALESCE(SUM(signal_samples), 0), "
         "COALESCE(SUM(completion_tokens), 0) FROM submissions WHERE status = 'accepted'");
  q.step();
  return {q.i64(0), q.i64(1), q.i64(2)};
}

int64_t State::completion_tokens_since(double since) {
  std::lock_guard lock(mu_);
  Stmt q(db_,
         "SELECT COALESCE(SUM(completion_tokens), 0) FROM submissions WHERE status = 'accepted' "
         "AND decided_at >= ?");
  q.bind(since);
  q.step();
  return q.i64(0);
}

}  // namespace trellis::orchestrator
