// Invites: made and signed by the orchestrator's key, accepted by the node they name once, from a
// pool it serves, before they expire; any change to any field breaks the signature; malformed
// invites are refused naming the field.
#include "orchestrator/invite.h"

#include <gtest/gtest.h>

#include "error_of.h"

namespace trellis::orchestrator {
namespace {

TEST(Invite, TheNamedNodeAcceptsItOnceFromAPoolItServes) {
  const Identity orchestrator = Identity::generate(), node = Identity::generate(),
                 stranger = Identity::generate();
  const Invite i =
      make_invite(orchestrator, "run-1", "math", node.address(), "http://10.0.0.1:8400", 1000, 60);
  EXPECT_EQ(i.expires, 1060);
  EXPECT_EQ(i.nonce.size(), 32u);
  const std::vector<std::string> pools = {orchestrator.address()};
  EXPECT_EQ(invite_problem(i, node.address(), 1000, pools, {}), "");
  // The same invite through JSON (as it travels) is the same invite.
  const Invite back = parse_invite(to_json(i), "invite");
  EXPECT_EQ(invite_problem(back, node.address(), 1059, pools, {}), "");
  EXPECT_NE(invite_problem(i, stranger.address(), 1000, pools, {}).find("is for node"),
            std::string::npos);
  EXPECT_NE(invite_problem(i, node.address(), 1000, {stranger.address()}, {}).find("not a pool"),
            std::string::npos);
  EXPECT_NE(invite_problem(i, node.address(), 1061, pools, {}).find("expired"), std::string::npos);
  EXPECT_NE(invite_problem(i, node.address(), 1000, pools, {i.nonce}).find("a replay"),
            std::string::npos);
  // An invite signed by someone else in the orchestrator's name.
  Invite forged = make_invite(stranger, "run-1", "math", node.address(), "http://evil:1", 1000, 60);
  forged.issuer = orchestrator.address();
  EXPECT_NE(invite_problem(forged, node.address(), 1000, pools, {}).find("signature"),
            std::string::npos);
}

TEST(Invite, ChangingAnyFieldBreaksTheSignature) {
  const Identity orchestrator = Identity::generate(), node = Identity::generate();
  const Invite i =
      make_invite(orchestrator, "run-1", "math", node.address(), "http://10.0.0.1:8400", 1000, 60);
  const std::vector<std::string> pools = {orchestrator.address()};
  for (const char* field : {"pool", "domain", "nonce", "orchestrator_url"}) {
    Json j = to_json(i);
    std::string v = j[field];
    v.back() = v.back() == '0' ? '1' : '0';  // one character, the length kept
    j[field] = v;
    EXPECT_NE(
        invite_problem(parse_invite(j, "t"), node.address(), 1000, pools, {}).find("signature"),
        std::string::npos)
        << field;
  }
  Json later = to_json(i);
  later["expires"] = 9999;
  EXPECT_NE(
      invite_problem(parse_invite(later, "t"), node.address(), 1000, pools, {}).find("signature"),
      std::string::npos);
}

TEST(Invite, MalformedInvitesNameTheField) {
  Json j = to_json(make_invite(Identity::generate(), "run-1", "math", std::string(64, 'a'),
                               "http://10.0.0.1:8400", 1000, 60));
  Json bad = j;
  bad["orchestrator_url"] = "file:///etc/passwd";
  EXPECT_NE(test::error_of([&] { parse_invite(bad, "invite"); }).find("orchestrator_url"),
            std::string::npos);
  bad = j;
  bad["domain"] = "math\ninjected";
  EXPECT_NE(test::error_of([&] { parse_invite(bad, "invite"); }).find("'domain'"),
            std::string::npos);
  bad = j;
  bad.erase("nonce");
  EXPECT_NE(test::error_of([&] { parse_invite(bad, "invite"); }).find("nonce"), std::string::npos);
  bad = j;
  bad["pool"] = std::string(300, 'p');
  EXPECT_NE(test::error_of([&] { parse_invite(bad, "invite"); }).find("longer than"),
            std::string::npos);
  EXPECT_FALSE(test::error_of([&] { parse_invite(Json::array(), "invite"); }).empty());
}

}  // namespace
}  // namespace trellis::orchestrator
