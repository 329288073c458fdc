#include "orchestrator/invite.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hashing.h"

namespace trellis::orchestrator {
namespace {

// Printable ASCII without newlines, at most `max` bytes: every field is one line of the message.
std::string line_field(const Json& j, const char* key, size_t max, const std::string& where) {
  const auto v = json_required<std::string>(j, key, where);
  if (v.size() > max) fail(where, "field '{}' is longer than {} bytes", key, max);
  for (char c : v) {
    if (c < 0x20 || c > 0x7e)
      fail(where, "field '{}' holds a character that is not printable ASCII", key);
  }
  return v;
}

}  // namespace

std::string invite_message(const Invite& i) {
  return fmt::format("trellis-invite-v1\n{}\n{}\n{}\n{}\n{}\n{}\n{}", i.pool, i.domain, i.node,
                     i.nonce, i.expires, i.orchestrator_url, i.issuer);
}

Invite make_invite(const Identity& issuer, const std::string& pool, const std::string& domain,
                   const std::string& node, const std::string& orchestrator_url, int64_t now,
                   int64_t ttl_s) {
  Invite i{pool, domain, node, random_hex(16), now + ttl_s, orchestrator_url, issuer.address(), ""};
  (void)parse_invite(to_json(i), "invite");  // a malformed invite is our bug: never sign one
  i.signature = issuer.sign_hex(invite_message(i));
  return i;
}

Json to_json(const Invite& i) {
  return {{"pool", i.pool},     {"domain", i.domain},      {"node", i.node},
          {"nonce", i.nonce},   {"expires", i.expires},    {"orchestrator_url", i.orchestrator_url},
          {"issuer", i.issuer}, {"signature", i.signature}};
}

Invite parse_invite(const Json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "an invite must be a JSON object");
  Invite i;
  i.pool = line_field(j, "pool", 256, where);
  i.domain = line_field(j, "domain", 128, where);
  i.node = line_field(j, "node", 64, where);
  i.nonce = line_field(j, "nonce", 32, where);
  i.expires = json_required<int64_t>(j, "expires", where);
  i.orchestrator_url = line_field(j, "orchestrator_url", 256, where);
  if (!i.orchestrator_url.starts_with("http://") && !i.orchestrator_url.starts_with("https://")) {
    fail(where, "field 'orchestrator_url' must be an http:// or https:// URL");
  }
  i.issuer = line_field(j, "issuer", 64, where);
  i.signature = j.contains("signature") ? line_field(j, "signature", 128, where) : "";
  return i;
}

std::string invite_problem(const Invite& i, const std::string& node, int64_t now,
                           const std::vector<std::string>& trusted_issuers,
                           const std::vector<std::string>& used_nonces) {
  if (i.node != node) return fmt::format("the invite is for node {}, not {}", i.node, node);
  if (std::find(trusted_issuers.begin(), trusted_issuers.end(), i.issuer) ==
      trusted_issuers.end()) {
    return fmt::format(
        "the invite comes from {}, which is not a pool this node serves "
        "(node.pools)",
        i.issuer);
  }
  if (!verify_signature(i.issuer, invite_message(i), i.signature)) {
    return fmt::format("the invite's signature is not {}'s", i.issuer);
  }
  if (i.expires < now) return fmt::format("the invite expired at {} (now {})", i.expires, now);
  if (std::find(used_nonces.begin(), used_nonces.end(), i.nonce) != used_nonces.end()) {
    return fmt::format("invite {} was accepted before (a replay)", i.nonce);
  }
  return "";
}

}  // namespace trellis::orchestrator
