// The knights_knaves environment: islanders who are knights (always tell the truth) or knaves
// (always lie) make statements; name each one's kind (a Ring-1T logic family).
//
// verification_info:
//   {"names": ["Alice", "Bob"],
//    "statements": [{"speaker": "Alice", "claim": CLAIM}, ...],
//    "solution": {"Alice": "knight", "Bob": "knave"}}
// where CLAIM is one of
//   {"type": "knight" | "knave", "person": NAME}          NAME is a knight / a knave
//   {"type": "same" | "different", "people": [NAME, NAME]}  they are of the same / different kinds
//   {"type": "at_least" | "exactly", "count": K}          at least / exactly K of all are knights
//   {"type": "if", "if": CLAIM, "then": CLAIM}            material implication
//   {"type": "and" | "or", "claims": [CLAIM, CLAIM, ...]}
//   {"type": "says", "person": NAME, "claim": CLAIM}      NAME would say CLAIM: true iff NAME's
//                                                          being a knight matches CLAIM's truth
// A statement is consistent with an assignment when the claim's truth equals the speaker's being
// a knight. validate() checks by brute force over every assignment that exactly one is consistent
// and that it is the stored solution; the reward is 1 iff the answer names that assignment.
//
// The answer inside <answer></answer> names every islander once with a kind: "Alice is a knight,
// Bob is a knave" (case-insensitive; "Alice and Bob are knights" and "Alice: knight" also parse).
// Its words must be names, "knight(s)", "knave(s)", "is", "are", "a", "an" or "and"; everything
// that is not a letter separates words.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"

namespace trellis::env {
namespace {

constexpr int kMaxPeople = 12;  // 2^12 assignments to brute-force in validate()
constexpr int kMaxStatements = 64;
constexpr int kMaxClaimDepth = 4;
constexpr int kMaxClaimNodes = 1024;  // bounds validate() at 2^12 x 1024 evaluations
constexpr size_t kMaxAnswerChars = 4096;

// Islanders per difficulty 1..10.
constexpr std::array<int, 11> kPeople = {0, 2, 3, 3, 4, 4, 5, 5, 6, 7, 8};

constexpr std::array<const char*, 20> kNames = {
    "Alice", "Bob",   "Carol", "Dave",  "Eve",   "Frank", "Grace",   "Heidi", "Ivan",  "Judy",
    "Kevin", "Laura", "Mike",  "Nancy", "Oscar", "Peggy", "Quentin", "Rita",  "Steve", "Tina"};

enum class Kind { kKnight, kKnave, kSame, kDifferent, kAtLeast, kExactly, kIf, kAnd, kOr, kSays };

struct Claim {
  Kind kind = Kind::kKnight;
  std::vector<int> people;   // knight/knave/says: one; same/different: two
  int count = 0;             // at_least/exactly
  std::vector<Claim> parts;  // if: {condition, consequence}; and/or: 2+; says: the claim
};

struct Statement {
  int speaker = 0;
  Claim claim;
};

// An assignment: bit i set when islander i is a knight.
using Assignment = uint32_t;

struct Puzzle {
  std::vector<std::string> names;
  std::vector<Statement> statements;
  Assignment solution = 0;
};

bool is_knight(Assignment a, int person) { return (a >> person) & 1u; }

bool holds(const Claim& claim, Assignment a) {
  switch (claim.kind) {
    case Kind::kKnight:
      return is_knight(a, claim.people[0]);
    case Kind::kKnave:
      return !is_knight(a, claim.people[0]);
    case Kind::kSame:
      return is_knight(a, claim.people[0]) == is_knight(a, claim.people[1]);
    case Kind::kDifferent:
      return is_knight(a, claim.people[0]) != is_knight(a, claim.people[1]);
    case Kind::kAtLeast:
      return std::popcount(a) >= claim.count;
    case Kind::kExactly:
      return std::popcount(a) == claim.count;
    case Kind::kIf:
      return !holds(claim.parts[0], a) || holds(claim.parts[1], a);
    case Kind::kAnd:
      return std::all_of(claim.parts.begin(), claim.parts.end(),
                         [&](const Claim& c) { return holds(c, a); });
    case Kind::kOr:
      return std::any_of(claim.parts.begin(), claim.parts.end(),
                         [&](const Claim& c) { return holds(c, a); });
    case Kind::kSays:
      return is_knight(a, claim.people[0]) == holds(claim.parts[0], a);
  }
  return false;
}

bool consistent(const Statement& s, Assignment a) {
  return holds(s.claim, a) == is_knight(a, s.speaker);
}

// How many of the 2^n assignments fit every statement, counting no further than `limit`.
int count_consistent(const std::vector<Statement>& statements, int n, int limit,
                     Assignment* last = nullptr) {
  int found = 0;
  for (Assignment a = 0; a < (Assignment{1} << n) && found < limit; ++a) {
    if (std::all_of(statements.begin(), statements.end(),
                    [&](const Statement& s) { return consistent(s, a); })) {
      ++found;
      if (last != nullptr) *last = a;
    }
  }
  return found;
}

// --- JSON form -----------------------------------------------------------------------------------

constexpr std::array<std::pair<Kind, const char*>, 10> kKindNames = {
    {{Kind::kKnight, "knight"},
     {Kind::kKnave, "knave"},
     {Kind::kSame, "same"},
     {Kind::kDifferent, "different"},
     {Kind::kAtLeast, "at_least"},
     {Kind::kExactly, "exactly"},
     {Kind::kIf, "if"},
     {Kind::kAnd, "and"},
     {Kind::kOr, "or"},
     {Kind::kSays, "says"}}};

const char* kind_name(Kind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "?";
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  return out;
}

bool reserved_word(const std::string& word) {
  static const std::array<const char*, 9> kWords = {"is",     "are",     "a",     "an",    "and",
                                                    "knight", "knights", "knave", "knaves"};
  return std::any_of(kWords.begin(), kWords.end(), [&](const char* w) { return word == w; });
}

class PuzzleReader {
 public:
  PuzzleReader(const std::vector<std::string>& names, const std::string& where)
      : names_(names), where_(where) {}

  int person(const Json& j, const std::string& field) const {
    if (j.is_string()) {
      const auto it = std::find(names_.begin(), names_.end(), j.get<std::string>());
      if (it != names_.end()) return static_cast<int>(it - names_.begin());
    }
    fail(where_, "{} must be one of the names, got {}", field, j.dump());
  }

  Claim claim(const Json& j, const std::string& field, int depth) {
    if (depth > kMaxClaimDepth)
      fail(where_, "{}: claims nest deeper than {}", field, kMaxClaimDepth);
    if (++nodes_ > kMaxClaimNodes)
      fail(where_, "{}: more than {} claims in all", field, kMaxClaimNodes);
    if (!j.is_object()) fail(where_, "{} must be an object", field);
    const auto type = json_required<std::string>(j, "type", where_ + ": " + field);
    Claim c;
    const auto kind = std::find_if(kKindNames.begin(), kKindNames.end(),
                                   [&](const auto& k) { return type == k.second; });
    if (kind == kKindNames.end())
      fail(where_, "{}.type '{}' is not a known claim type", field, type);
    c.kind = kind->first;
    const int n = static_cast<int>(names_.size());
    auto required = [&](const char* key) -> const Json& {
      if (!j.contains(key)) fail(where_, "{} ({}) is missing '{}'", field, type, key);
      return j.at(key);
    };
    switch (c.kind) {
      case Kind::kKnight:
      case Kind::kKnave:
        c.people = {person(required("person"), field + ".person")};
        break;
      case Kind::kSame:
      case Kind::kDifferent: {
        const Json& people = required("people");
        if (!people.is_array() || people.size() != 2) {
          fail(where_, "{}.people must be an array of two names", field);
        }
        c.people = {person(people[0], field + ".people[0]"),
                    person(people[1], field + ".people[1]")};
        break;
      }
      case Kind::kAtLeast:
      case Kind::kExactly: {
        const Json& count = required("count");
        if (!count.is_number_integer() || count.get<int64_t>() < 0 || count.get<int64_t>() > n) {
          fail(where_, "{}.count must be an integer in [0, {}]", field, n);
        }
        c.count = count.get<int>();
        break;
      }
      case Kind::kIf:
        c.parts.push_back(claim(required("if"), field + ".if", depth + 1));
        c.parts.push_back(claim(required("then"), field + ".then", depth + 1));
        break;
      case Kind::kAnd:
      case Kind::kOr: {
        const Json& claims = required("claims");
        if (!claims.is_array() || claims.size() < 2) {
          fail(where_, "{}.claims must be an array of at least two claims", field);
        }
        for (size_t i = 0; i < claims.size(); ++i) {
          c.parts.push_back(claim(claims[i], fmt::format("{}.claims[{}]", field, i), depth + 1));
        }
        break;
      }
      case Kind::kSays:
        c.people = {person(required("person"), field + ".person")};
        c.parts.push_back(claim(required("claim"), field + ".claim", depth + 1));
        break;
    }
    return c;
  }

 private:
  const std::vector<std::string>& names_;
  std::string where_;
  int nodes_ = 0;
};

// The puzzle of a task's verification_info; Error naming `where` and the field. Checks the form
// only; validate() also checks that the solution is the one consistent assignment.
Puzzle parse_puzzle(const Json& info, const std::string& where) {
  if (!info.is_object()) fail(where, "verification_info must be an object");
  Puzzle p;
  p.names = json_required<std::vector<std::string>>(info, "names", where);
  if (p.names.empty() || p.names.size() > static_cast<size_t>(kMaxPeople)) {
    fail(where, "verification_info.names must list 1 to {} islanders, got {}", kMaxPeople,
         p.names.size());
  }
  for (size_t i = 0; i < p.names.size(); ++i) {
    const auto& name = p.names[i];
    const bool letters =
        !name.empty() && name.size() <= 32 && std::all_of(name.begin(), name.end(), [](char ch) {
          return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        });
    if (!letters) fail(where, "verification_info.names[{}] must be 1 to 32 ASCII letters", i);
    if (reserved_word(lower(name))) {
      fail(where, "verification_info.names[{}] '{}' is a word of the answer format", i, name);
    }
    for (size_t k = 0; k < i; ++k) {
      if (lower(p.names[k]) == lower(name)) {
        fail(where, "verification_info.names lists '{}' twice (names are case-insensitive)", name);
      }
    }
  }

  const Json& statements = info.contains("statements") ? info.at("statements") : Json();
  if (!statements.is_array() || statements.empty() ||
      statements.size() > static_cast<size_t>(kMaxStatements)) {
    fail(where, "verification_info.statements must be an array of 1 to {} statements",
         kMaxStatements);
  }
  PuzzleReader reader(p.names, where);
  for (size_t i = 0; i < statements.size(); ++i) {
    const std::string field = fmt::format("verification_info.statements[{}]", i);
    const Json& s = statements[i];
    if (!s.is_object() || !s.contains("speaker") || !s.contains("claim")) {
      fail(where, "{} must be an object with 'speaker' and 'claim'", field);
    }
    p.statements.push_back({reader.person(s.at("speaker"), field + ".speaker"),
                            reader.claim(s.at("claim"), field + ".claim", 1)});
  }

  const Json& solution = info.contains("solution") ? info.at("solution") : Json();
  if (!solution.is_object() || solution.size() != p.names.size()) {
    fail(where,
         "verification_info.solution must map each of the {} names to \"knight\" or \"knave\"",
         p.names.size());
  }
  for (size_t i = 0; i < p.names.size(); ++i) {
    const auto it = solution.find(p.names[i]);
    if (it == solution.end() || !it->is_string() || (*it != "knight" && *it != "knave")) {
      fail(where, "verification_info.solution[\"{}\"] must be \"knight\" or \"knave\"", p.names[i]);
    }
    if (*it == "knight") p.solution |= Assignment{1} << i;
  }
  return p;
}

Json claim_json(const Claim& c, const std::vector<std::string>& names) {
  Json j = {{"type", kind_name(c.kind)}};
  switch (c.kind) {
    case Kind::kKnight:
    case Kind::kKnave:
      j["person"] = names[c.people[0]];
      break;
    case Kind::kSame:
    case Kind::kDifferent:
      j["people"] = {names[c.people[0]], names[c.people[1]]};
      break;
    case Kind::kAtLeast:
    case Kind::kExactly:
      j["count"] = c.count;
      break;
    case Kind::kIf:
      j["if"] = claim_json(c.parts[0], names);
      j["then"] = claim_json(c.parts[1], names);
      break;
    case Kind::kAnd:
    case Kind::kOr:
      j["claims"] = Json::array();
      for (const auto& part : c.parts) j["claims"].push_back(claim_json(part, names));
      break;
    case Kind::kSays:
      j["person"] = names[c.people[0]];
      j["claim"] = claim_json(c.parts[0], names);
      break;
  }
  return j;
}

// --- English -------------------------------------------------------------------------------------

// A claim as the speaker says it ("I" for the speaker). Compound parts of compound claims are
// parenthesised so that nesting stays unambiguous.
std::string render(const Claim& c, int speaker, const std::vector<std::string>& names) {
  auto who = [&](int p) { return p == speaker ? std::string("I") : names[p]; };
  auto part = [&](const Claim& sub) {
    const bool compound = sub.kind == Kind::kIf || sub.kind == Kind::kAnd ||
                          sub.kind == Kind::kOr || sub.kind == Kind::kSays;
    const std::string text = render(sub, speaker, names);
    return compound ? "(" + text + ")" : text;
  };
  auto pair = [&]() {
    const int a = c.people[0], b = c.people[1];
    if (a == speaker) return names[b] + " and I";
    if (b == speaker) return names[a] + " and I";
    return names[a] + " and " + names[b];
  };
  switch (c.kind) {
    case Kind::kKnight:
    case Kind::kKnave: {
      const char* noun = c.kind == Kind::kKnight ? "knight" : "knave";
      if (c.people[0] == speaker) return fmt::format("I am a {}", noun);
      return fmt::format("{} is a {}", names[c.people[0]], noun);
    }
    case Kind::kSame:
      return pair() + " are of the same kind";
    case Kind::kDifferent:
      return pair() + " are of different kinds";
    case Kind::kAtLeast:
      return c.count == 1 ? std::string("at least one of us is a knight")
                          : fmt::format("at least {} of us are knights", c.count);
    case Kind::kExactly:
      if (c.count == 0) return "none of us are knights";
      return c.count == 1 ? std::string("exactly one of us is a knight")
                          : fmt::format("exactly {} of us are knights", c.count);
    case Kind::kIf:
      return fmt::format("if {}, then {}", part(c.parts[0]), part(c.parts[1]));
    case Kind::kAnd:
    case Kind::kOr: {
      std::string out;
      for (size_t i = 0; i < c.parts.size(); ++i) {
        if (i > 0)
          out += i + 1 == c.parts.size() ? (c.kind == Kind::kAnd ? " and " : " or ") : ", ";
        out += part(c.parts[i]);
      }
      return out;
    }
    case Kind::kSays:
      return fmt::format("{} would say that {}", who(c.people[0]), part(c.parts[0]));
  }
  return "";
}

std::string sentence(const Statement& s, const std::vector<std::string>& names) {
  std::string text = render(s.claim, s.speaker, names);
  if (!text.empty() && text[0] >= 'a' && text[0] <= 'z')
    text[0] = static_cast<char>(text[0] - 'a' + 'A');
  return text + ".";
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

std::string assignment_text(Assignment a, const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ", ";
    out += names[i] + (is_knight(a, static_cast<int>(i)) ? " is a knight" : " is a knave");
  }
  return out;
}

// --- Generation ----------------------------------------------------------------------------------

// A simple claim about one islander, naming anyone but `excluded`.
Claim random_atom(RandomStream& rng, int n, int excluded) {
  int p;
  do {
    p = static_cast<int>(rng.uniform_int(0, n - 1));
  } while (p == excluded);
  return {rng.bernoulli(0.5) ? Kind::kKnight : Kind::kKnave, {p}, 0, {}};
}

// A random claim for `speaker`, from a grammar that widens with difficulty: kinds of one islander
// and pairs at 1, counts from 3, implications from 5, and/or from 6, "X would say" from 8.
Claim random_claim(RandomStream& rng, int n, int speaker, int difficulty) {
  std::vector<Kind> kinds = {Kind::kKnight, Kind::kKnave, Kind::kSame, Kind::kDifferent};
  if (difficulty >= 3) kinds.insert(kinds.end(), {Kind::kAtLeast, Kind::kExactly});
  if (difficulty >= 5) kinds.push_back(Kind::kIf);
  if (difficulty >= 6) kinds.insert(kinds.end(), {Kind::kAnd, Kind::kOr});
  if (difficulty >= 8) kinds.push_back(Kind::kSays);
  Claim c;
  c.kind = kinds[rng.uniform_int(0, static_cast<int64_t>(kinds.size()) - 1)];
  switch (c.kind) {
    case Kind::kKnight:
    case Kind::kKnave:  // about someone else: "I am a knight" says nothing, "I am a knave" can't be
      c.people = random_atom(rng, n, speaker).people;
      break;
    case Kind::kSame:
    case Kind::kDifferent: {
      const int a = static_cast<int>(rng.uniform_int(0, n - 1));
      c.people = {a, random_atom(rng, n, a).people[0]};
      break;
    }
    case Kind::kAtLeast:
      c.count = static_cast<int>(rng.uniform_int(1, n));
      break;
    case Kind::kExactly:
      c.count = static_cast<int>(rng.uniform_int(0, n));
      break;
    case Kind::kIf:
    case Kind::kAnd:
    case Kind::kOr: {  // two atoms about two different islanders (the speaker may be one)
      const Claim first = random_atom(rng, n, -1);
      c.parts = {first, random_atom(rng, n, first.people[0])};
      break;
    }
    case Kind::kSays: {  // another islander's report about a third (or the speaker)
      c.people = random_atom(rng, n, speaker).people;
      c.parts = {random_atom(rng, n, c.people[0])};
      break;
    }
  }
  return c;
}

// A statement `speaker` would make under `truth`: a random claim whose truth value matches the
// speaker's kind (knights say true things, knaves false ones).
Statement random_statement(RandomStream& rng, int n, int speaker, int difficulty,
                           Assignment truth) {
  while (true) {
    Claim c = random_claim(rng, n, speaker, difficulty);
    if (holds(c, truth) == is_knight(truth, speaker)) return {speaker, std::move(c)};
  }
}

// Everyone speaks once, then further statements that rule out assignments are added until only
// the hidden one is consistent. Rare dead ends (too many statements) start over.
Puzzle random_puzzle(RandomStream& rng, int n, int difficulty) {
  std::vector<std::string> pool(kNames.begin(), kNames.end());
  rng.shuffle(pool.begin(), pool.end());
  Puzzle p;
  p.names.assign(pool.begin(), pool.begin() + n);
  const size_t max_statements = 3 * static_cast<size_t>(n) + 4;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    p.solution = 0;
    for (int i = 0; i < n; ++i) {
      if (rng.bernoulli(0.5)) p.solution |= Assignment{1} << i;
    }
    std::vector<int> speakers(n);
    for (int i = 0; i < n; ++i) speakers[i] = i;
    rng.shuffle(speakers.begin(), speakers.end());
    p.statements.clear();
    for (const int s : speakers)
      p.statements.push_back(random_statement(rng, n, s, difficulty, p.solution));
    int left = count_consistent(p.statements, n, 1 << n);
    while (left > 1 && p.statements.size() < max_statements) {
      // Prefer a statement that rules something out; after a few tries take what comes.
      for (int tries = 0; tries < 20; ++tries) {
        const int speaker = static_cast<int>(rng.uniform_int(0, n - 1));
        p.statements.push_back(random_statement(rng, n, speaker, difficulty, p.solution));
        const int now = count_consistent(p.statements, n, 1 << n);
        if (now < left || tries == 19) {
          left = now;
          break;
        }
        p.statements.pop_back();
      }
    }
    if (left == 1) return p;
  }
  throw std::logic_error("knights_knaves: no unique puzzle after 1000 attempts");
}

// --- Scoring -------------------------------------------------------------------------------------

// The assignment an answer names, or why it names none.
struct ParsedAnswer {
  Assignment assignment = 0;
  std::string problem;  // empty when the answer parsed
};

ParsedAnswer parse_answer(std::string_view text, const std::vector<std::string>& names) {
  const int n = static_cast<int>(names.size());
  std::vector<int> role(n, -1);  // -1 unnamed, 0 knave, 1 knight
  std::vector<int> pending;      // names waiting for "is a knight" / "are knaves"
  auto named = [&](int p) {
    return role[p] != -1 || std::find(pending.begin(), pending.end(), p) != pending.end();
  };
  size_t i = 0;
  while (i < text.size()) {
    auto is_letter = [&](size_t k) {
      const char ch = text[k];
      return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    };
    if (!is_letter(i)) {
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < text.size() && is_letter(i)) ++i;
    const std::string word = lower(text.substr(begin, i - begin));
    if (word == "knight" || word == "knights" || word == "knave" || word == "knaves") {
      if (pending.empty()) return {0, fmt::format("'{}' does not follow a name", word)};
      for (const int p : pending) role[p] = word.starts_with("knight") ? 1 : 0;
      pending.clear();
      continue;
    }
    if (reserved_word(word)) continue;
    const auto it = std::find_if(names.begin(), names.end(),
                                 [&](const std::string& name) { return lower(name) == word; });
    if (it == names.end()) {
      return {0, fmt::format("'{}' is not an islander's name or a word of the answer format",
                             text.substr(begin, std::min<size_t>(i - begin, 40)))};
    }
    const int p = static_cast<int>(it - names.begin());
    if (named(p)) return {0, fmt::format("{} is named more than once", names[p])};
    pending.push_back(p);
  }
  if (!pending.empty()) return {0, fmt::format("{} is given no kind", names[pending.front()])};
  Assignment a = 0;
  for (int p = 0; p < n; ++p) {
    if (role[p] == -1) return {0, fmt::format("{} is not assigned a kind", names[p])};
    if (role[p] == 1) a |= Assignment{1} << p;
  }
  return {a, ""};
}

Score score_answer(const Puzzle& puzzle, std::string_view completion) {
  const auto answer = last_tagged(completion);
  if (!answer) return {0, "no <answer>...</answer> block"};
  if (answer->empty()) return {0, "the answer is empty"};
  if (answer->size() > kMaxAnswerChars) {
    return {0, fmt::format("answer too long ({} characters)", answer->size())};
  }
  const ParsedAnswer parsed = parse_answer(*answer, puzzle.names);
  if (!parsed.problem.empty()) return {0, parsed.problem};
  if (parsed.assignment == puzzle.solution)
    return {1, "the assignment is the unique consistent one"};
  for (const auto& s : puzzle.statements) {
    if (consistent(s, parsed.assignment)) continue;
    const bool knight = is_knight(parsed.assignment, s.speaker);
    return {0, fmt::format("{}'s statement \"{}\" is {}, but {} is assigned {}",
                           puzzle.names[s.speaker], sentence(s, puzzle.names),
                           knight ? "false" : "true", puzzle.names[s.speaker],
                           knight ? "knight" : "knave")};
  }
  return {0, "the assignment fits the statements but is not the stored solution"};
}

class KnightsKnavesEnvironment final : public Environment {
 public:
  std::string name() const override { return "knights_knaves"; }
  std::string description() const override {
    return "Knights and knaves: find who always tells the truth from islanders' statements; "
           "difficulty sets the islanders (2 at 1 to 8 at 10) and widens the statement grammar "
           "(counts from 3, if-then from 5, and/or from 6, nested 'would say' from 8)";
  }
  std::string system_prompt() const override {
    return "You solve knights-and-knaves puzzles. Knights always tell the truth; knaves always "
           "lie. Think it through, then give your answer inside <answer></answer> tags, naming "
           "every islander exactly once, for example: <answer>Alice is a knight, Bob is a "
           "knave</answer>";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "knights_knaves.generate");
    RandomStream rng(seed, /*stream=*/difficulty);  // unrelated tasks across difficulties
    const int n = kPeople[difficulty];
    const Puzzle p = random_puzzle(rng, n, difficulty);

    Task task = generated_task(*this, seed, difficulty);
    Json statements = Json::array();
    Json solution = Json::object();
    std::string lines;
    for (const auto& s : p.statements) {
      statements.push_back(
          {{"speaker", p.names[s.speaker]}, {"claim", claim_json(s.claim, p.names)}});
      lines += fmt::format("{} says: \"{}\"\n", p.names[s.speaker], sentence(s, p.names));
    }
    for (int i = 0; i < n; ++i)
      solution[p.names[i]] = is_knight(p.solution, i) ? "knight" : "knave";
    task.verification_info = {
        {"names", p.names}, {"statements", statements}, {"solution", solution}};
    task.prompt = fmt::format(
        "On an island, every inhabitant is either a knight, who always tells the truth, or a "
        "knave, who always lies. You meet {} inhabitants: {}. When one of them says \"us\", it "
        "means all {} of them.\n\n{}\nWho is a knight and who is a knave?",
        n, name_list(p.names), n, lines);
    task.solution = "Exactly one assignment is consistent with every statement.\n<answer>" +
                    assignment_text(p.solution, p.names) + "</answer>";
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Puzzle p = parse_puzzle(task.verification_info, where);
    const int n = static_cast<int>(p.names.size());
    Assignment only = 0;
    const int found = count_consistent(p.statements, n, 2, &only);
    if (found == 0) fail(where, "verification_info.statements: no assignment is consistent");
    if (found > 1) fail(where, "verification_info.statements allow more than one assignment");
    if (only != p.solution) {
      fail(where, "verification_info.solution is not the consistent assignment ({})",
           assignment_text(only, p.names));
    }
  }

  Score score(const Task& task, std::string_view completion) const override {
    try {
      return score_answer(parse_puzzle(task.verification_info, task.task_id), completion);
    } catch (const std::exception& e) {
      return {0, fmt::format("invalid task: {}", e.what())};
    }
  }
};

}  // namespace

std::unique_ptr<Environment> make_knights_knaves_environment() {
  return std::make_unique<KnightsKnavesEnvironment>();
}

}  // namespace trellis::env
