// The knights_knaves environment: generated puzzles against an independent brute force over the
// JSON statements, and the verifier against right, wrong, malformed and adversarial answers.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "env/registry.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

using test::error_of;
using test::expect_zero_scores;
using test::for_each_generated;

using Kinds = std::map<std::string, bool>;  // name -> is a knight

// Independent of the environment: the truth of a JSON claim, read straight off the JSON.
bool truth(const Json& c, const Kinds& k) {
  const std::string type = c["type"];
  if (type == "knight") return k.at(c["person"]);
  if (type == "knave") return !k.at(c["person"]);
  if (type == "same") return k.at(c["people"][0]) == k.at(c["people"][1]);
  if (type == "different") return k.at(c["people"][0]) != k.at(c["people"][1]);
  int knights = 0;
  for (const auto& [name, knight] : k) knights += knight;
  if (type == "at_least") return knights >= c["count"].get<int>();
  if (type == "exactly") return knights == c["count"].get<int>();
  if (type == "if") return !truth(c["if"], k) || truth(c["then"], k);
  if (type == "and" || type == "or") {
    bool all = true, any = false;
    for (const auto& part : c["claims"]) {
      const bool t = truth(part, k);
      all = all && t;
      any = any || t;
    }
    return type == "and" ? all : any;
  }
  if (type == "says") return k.at(c["person"]) == truth(c["claim"], k);
  ADD_FAILURE() << "unknown claim type " << type;
  return false;
}

// Every assignment under which each speaker's claim is true exactly when the speaker is a knight.
std::vector<Kinds> consistent_assignments(const Json& info) {
  const auto names = info["names"].get<std::vector<std::string>>();
  std::vector<Kinds> found;
  for (uint32_t bits = 0; bits < (1u << names.size()); ++bits) {
    Kinds k;
    for (size_t i = 0; i < names.size(); ++i) k[names[i]] = (bits >> i) & 1u;
    bool ok = true;
    for (const auto& s : info["statements"]) ok = ok && truth(s["claim"], k) == k.at(s["speaker"]);
    if (ok) found.push_back(k);
  }
  return found;
}

std::string answer_for(const Kinds& k) {
  std::string out = "<answer>";
  for (const auto& [name, knight] : k) {
    out += name + (knight ? " is a knight, " : " is a knave, ");
  }
  return out + "</answer>";
}

// The classic: A says "B is a knave"; B says "A and I are both knaves". B cannot be a knight
// (he would be calling himself a knave), so B lies, so A is a knight and tells the truth.
Task classic() {
  Task t;
  t.task_id = "classic";
  t.env = "knights_knaves";
  t.verification_info = parse_json(R"({
      "names": ["Alice", "Bob"],
      "statements": [
        {"speaker": "Alice", "claim": {"type": "knave", "person": "Bob"}},
        {"speaker": "Bob", "claim": {"type": "and", "claims": [
          {"type": "knave", "person": "Alice"}, {"type": "knave", "person": "Bob"}]}}],
      "solution": {"Alice": "knight", "Bob": "knave"}})",
                                   "classic");
  return t;
}

TEST(KnightsKnaves, GeneratedPuzzlesHaveOneConsistentAssignmentAndSolutionsScoreOne) {
  const auto env = make_environment("knights_knaves");
  for_each_generated(*env, 25, [&](const Task& t) {
    const auto found = consistent_assignments(t.verification_info);
    ASSERT_EQ(found.size(), 1u);
    for (const auto& [name, knight] : found[0]) {
      EXPECT_EQ(t.verification_info["solution"][name], knight ? "knight" : "knave");
      EXPECT_NE(t.prompt.find(name), std::string::npos);
    }
    EXPECT_EQ(env->score(t, answer_for(found[0])).reward, 1.0);
    // Every other assignment is wrong, and the reason names a statement it breaks.
    Kinds wrong = found[0];
    wrong.begin()->second = !wrong.begin()->second;
    const Score w = env->score(t, answer_for(wrong));
    EXPECT_EQ(w.reward, 0.0);
    EXPECT_NE(w.reason.find("'s statement \""), std::string::npos) << w.reason;
  });
}

TEST(KnightsKnaves, DifficultyGrowsThePuzzleAndIsDeterministic) {
  const auto env = make_environment("knights_knaves");
  const std::vector<size_t> people = {2, 3, 3, 4, 4, 5, 5, 6, 7, 8};
  for (int d = 1; d <= 10; ++d) {
    EXPECT_EQ(env->generate(9, d).verification_info["names"].size(), people[d - 1]);
  }
  // Compound claims appear only at higher difficulty.
  auto uses = [&](int d, const std::string& type) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      const std::string text = env->generate(seed, d).verification_info.dump();
      if (text.find("\"type\":\"" + type + "\"") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_FALSE(uses(2, "exactly"));
  EXPECT_FALSE(uses(2, "if"));
  EXPECT_TRUE(uses(10, "if"));
  EXPECT_TRUE(uses(10, "says"));
  EXPECT_EQ(task_to_json(env->generate(4, 6)), task_to_json(env->generate(4, 6)));
  EXPECT_NE(env->generate(4, 6).verification_info, env->generate(5, 6).verification_info);
}

TEST(KnightsKnaves, ScoresTheClassicPuzzle) {
  const auto env = make_environment("knights_knaves");
  const Task t = classic();
  env->validate(t, "t");
  EXPECT_EQ(env->score(t, "<answer>Alice is a knight, Bob is a knave</answer>").reward, 1.0);
  EXPECT_EQ(env->score(t, "<answer>bob is a KNAVE; ALICE is a knight.</answer>").reward, 1.0);
  EXPECT_EQ(env->score(t, "<answer>Alice: knight\nBob: knave</answer>").reward, 1.0);
  const Task three = [] {
    Task t = classic();
    t.verification_info["names"].push_back("Carol");
    t.verification_info["statements"].push_back(
        {{"speaker", "Carol"}, {"claim", {{"type", "knight"}, {"person", "Alice"}}}});
    t.verification_info["solution"]["Carol"] = "knight";
    return t;
  }();
  env->validate(three, "t");
  EXPECT_EQ(
      env->score(three, "<answer>Alice and Carol are knights, Bob is a knave</answer>").reward,
      1.0);

  Score s = env->score(t, "<answer>Alice is a knave, Bob is a knave</answer>");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "Alice's statement \"Bob is a knave.\" is true, but Alice is assigned knave");
  s = env->score(t, "<answer>Alice is a knight, Bob is a knight</answer>");
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason,
            "Alice's statement \"Bob is a knave.\" is false, but Alice is assigned knight");
}

TEST(KnightsKnaves, MalformedAnswersScoreZeroWithoutThrowing) {
  const auto env = make_environment("knights_knaves");
  const Task t = classic();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Alice is a knight, Bob is a knave", "no <answer>"},
      {"<answer></answer>", "empty"},
      {"<answer>Alice is a knight</answer>", "Bob is not assigned a kind"},
      {"<answer>Alice is a knight, Bob is a knave, Zed is a knave</answer>", "'Zed' is not"},
      {"<answer>Alice is a knight, Alice is a knave, Bob is a knave</answer>",
       "Alice is named more than once"},
      {"<answer>Alice is a knight, Bob is a knave, Alice is a knight</answer>",
       "Alice is named more than once"},
      {"<answer>Alice is a knight, Bob</answer>", "Bob is given no kind"},
      {"<answer>knight knave</answer>", "'knight' does not follow a name"},
      {"<answer>Alice is a knight, Bob is not a knight</answer>", "'not' is not"},
      {"<answer>\xff\xfe garbage</answer>", "'garbage' is not"},
      {"<answer>" + std::string(1 << 20, 'A') + "</answer>", "too long"},
  };
  expect_zero_scores(*env, t, cases);
  // The last answer counts.
  const std::string right = "<answer>Alice is a knight, Bob is a knave</answer>";
  const std::string wrong = "<answer>Alice is a knave, Bob is a knight</answer>";
  EXPECT_EQ(env->score(t, wrong + " hmm, no: " + right).reward, 1.0);
  EXPECT_EQ(env->score(t, right + " hmm, no: " + wrong).reward, 0.0);
  // A task that does not parse scores 0 instead of throwing.
  Task broken = t;
  broken.verification_info["statements"][0]["claim"]["type"] = "maybe";
  EXPECT_EQ(env->score(broken, right).reward, 0.0);
}

TEST(KnightsKnaves, ValidateRerunsTheBruteForce) {
  const auto env = make_environment("knights_knaves");
  auto check = [&](const std::function<void(Json&)>& edit) {
    Task t = classic();
    edit(t.verification_info);
    return error_of([&] { env->validate(t, "kk.jsonl:4"); });
  };
  EXPECT_EQ(check([](Json&) {}), "");
  // Drop Bob's statement: both (knight, knave) and (knave, knight) fit.
  std::string e = check([](Json& j) { j["statements"].erase(1); });
  EXPECT_NE(e.find("more than one assignment"), std::string::npos) << e;
  EXPECT_NE(e.find("kk.jsonl:4"), std::string::npos);
  e = check([](Json& j) { j["solution"]["Alice"] = "knave"; });
  EXPECT_NE(e.find("not the consistent assignment (Alice is a knight, Bob is a knave)"),
            std::string::npos)
      << e;
  e = check([](Json& j) {
    j["statements"].push_back(
        {{"speaker", "Alice"}, {"claim", {{"type", "exactly"}, {"count", 0}}}});
  });
  EXPECT_NE(e.find("no assignment is consistent"), std::string::npos) << e;
  e = check([](Json& j) { j["statements"][0]["claim"]["person"] = "Zed"; });
  EXPECT_NE(e.find("statements[0].claim.person must be one of the names"), std::string::npos) << e;
  e = check([](Json& j) { j["statements"][1]["claim"]["claims"][0]["type"] = "maybe"; });
  EXPECT_NE(e.find("'maybe' is not a known claim type"), std::string::npos) << e;
  e = check([](Json& j) { j["statements"][0]["claim"] = {{"type", "at_least"}, {"count", 3}}; });
  EXPECT_NE(e.find("count must be an integer in [0, 2]"), std::string::npos) << e;
  e = check([](Json& j) { j["names"] = {"Alice", "alice"}; });
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
  e = check([](Json& j) { j["names"] = {"Alice", "Knight"}; });
  EXPECT_NE(e.find("a word of the answer format"), std::string::npos) << e;
  e = check([](Json& j) { j["names"] = {"Alice", "Bob Smith"}; });
  EXPECT_NE(e.find("ASCII letters"), std::string::npos) << e;
  e = check([](Json& j) { j["solution"].erase("Bob"); });
  EXPECT_NE(e.find("verification_info.solution"), std::string::npos) << e;
  e = check([](Json& j) { j.erase("statements"); });
  EXPECT_NE(e.find("verification_info.statements"), std::string::npos) << e;
  e = check([](Json& j) {
    Json deep = {{"type", "knight"}, {"person", "Bob"}};
    for (int i = 0; i < 5; ++i) deep = {{"type", "says"}, {"person", "Alice"}, {"claim", deep}};
    j["statements"][0]["claim"] = deep;
  });
  EXPECT_NE(e.find("nest deeper"), std::string::npos) << e;
}

}  // namespace
}  // namespace trellis::env
