// sort: generated lists are sorted (checked here independently), partial credit equals an
// independently computed LCS ratio over items, the usual list spellings are read, and huge or
// malformed answers score 0.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "common/rng.h"
#include "env/environments/environments.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

size_t naive_lcs(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::vector<size_t>> t(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      t[i][j] = a[i - 1] == b[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
    }
  }
  return t[a.size()][b.size()];
}

std::vector<std::string> texts(const Json& items) {
  std::vector<std::string> out;
  for (const auto& x : items) out.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  return out;
}

std::string joined(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string tagged(const std::string& answer) { return "<answer>" + answer + "</answer>"; }

Task task_with(Json items, const std::string& order, Json sorted) {
  Task t;
  t.env = "sort";
  t.verification_info = {{"items", items}, {"order", order}, {"sorted", sorted}};
  return t;
}

TEST(Sort, GeneratedListsAreSortedAndTheirSolutionsScoreOne) {
  const auto env = make_sort_environment();
  for (int d = kMinDifficulty; d <= kMaxDifficulty; ++d) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      const Task task = env->generate(seed, d);
      ASSERT_NO_THROW(env->validate(task, "generated"));
      const Json& info = task.verification_info;
      const bool descending = info["order"] == "descending";
      // A permutation of the items...
      auto items = texts(info["items"]);
      auto sorted = texts(info["sorted"]);
      EXPECT_TRUE(std::is_permutation(items.begin(), items.end(), sorted.begin(), sorted.end()));
      // ...in order, compared here by number or by string, independently of the environment.
      for (size_t i = 1; i < sorted.size(); ++i) {
        const Json& a = info["sorted"][i - 1];
        const Json& b = info["sorted"][i];
        if (a.is_string()) {
          EXPECT_TRUE(descending ? a.get<std::string>() >= b.get<std::string>()
                                 : a.get<std::string>() <= b.get<std::string>());
        } else {
          EXPECT_TRUE(descending ? a.get<int64_t>() >= b.get<int64_t>()
                                 : a.get<int64_t>() <= b.get<int64_t>());
        }
      }
      ASSERT_TRUE(task.solution);
      EXPECT_EQ(env->score(task, *task.solution).reward, 1.0) << *task.solution;
      EXPECT_EQ(env->score(task, tagged(joined(sorted))).reward, 1.0);
    }
  }
}

TEST(Sort, PartialCreditIsTheLcsRatioOverItems) {
  const auto env = make_sort_environment();
  RandomStream rng(8);
  for (int trial = 0; trial < 400; ++trial) {
    const Task task = env->generate(rng.next_u64(), static_cast<int>(rng.uniform_int(1, 10)));
    const auto expected = texts(task.verification_info["sorted"]);
    std::vector<std::string> answer = expected;
    switch (rng.uniform_int(0, 3)) {
      case 0:
        rng.shuffle(answer.begin(), answer.end());
        break;  // the list unsorted
      case 1:
        answer.erase(answer.begin() + rng.uniform_int(0, answer.size() - 1));
        break;
      case 2:
        answer.insert(answer.begin() + rng.uniform_int(0, answer.size()), "999999");
        break;
      default:
        std::swap(answer.front(), answer.back());
        break;
    }
    const Score s = env->score(task, tagged(joined(answer)));
    const double want = static_cast<double>(naive_lcs(answer, expected)) /
                        static_cast<double>(std::max(answer.size(), expected.size()));
    EXPECT_DOUBLE_EQ(s.reward, want) << joined(answer) << " vs " << joined(expected);
    EXPECT_EQ(s.reward == 1.0, answer == expected);
  }
}

TEST(Sort, ReadsTheUsualListSpellings) {
  const auto env = make_sort_environment();
  const Task numbers = task_with({5, -3, 12}, "ascending", {-3, 5, 12});
  for (const std::string answer : {"-3, 5, 12", "-3,5,12", "[-3, 5, 12]", "-3 5 12", "-3\n5\n12",
                                   "-3, +5, 012", "-3, 5, 12,", "\"-3\", \"5\", \"12\""}) {
    EXPECT_EQ(env->score(numbers, tagged(answer)).reward, 1.0) << answer;
  }
  const Task words = task_with({"pear", "apple", "fig"}, "descending", {"pear", "fig", "apple"});
  for (const std::string answer :
       {"pear, fig, apple", "['pear', 'fig', 'apple']", "pear fig apple"}) {
    EXPECT_EQ(env->score(words, tagged(answer)).reward, 1.0) << answer;
  }
  EXPECT_DOUBLE_EQ(env->score(words, tagged("apple, fig, pear")).reward, 1.0 / 3);  // wrong order
  EXPECT_DOUBLE_EQ(env->score(words, tagged("Pear, fig, apple")).reward, 2.0 / 3);  // case matters
}

TEST(Sort, HugeAndMalformedAnswersScoreZero) {
  const auto env = make_sort_environment();
  const Task t = task_with({5, -3, 12}, "ascending", {-3, 5, 12});
  auto check = [&](const std::string& completion, const std::string& reason) {
    const Score s = env->score(t, completion);
    EXPECT_EQ(s.reward, 0.0) << completion.substr(0, 80);
    EXPECT_NE(s.reason.find(reason), std::string::npos) << s.reason;
    EXPECT_EQ(s.reason.find('\n'), std::string::npos);
  };
  check("-3, 5, 12", "no <answer>");
  check("<answer>-3, 5, 12", "no <answer>");
  check("", "no <answer>");
  check(tagged(""), "0 of 3 items");
  check(tagged("banana, 4"), "0 of 3 items");
  check(tagged(std::string(1 << 20, '7')), "far longer");
  // 2 * 3 + 64 = 70 items is the most considered.
  check(tagged(joined(std::vector<std::string>(71, "5"))), "far more items");
  check(tagged(std::string(1000, ',')), "0 of 3 items");
  // 99999999999999999999999 is no integer of the list (and does not overflow anything).
  check(tagged("99999999999999999999999"), "0 of 3 items");
  // Padding with junk costs: 3 right items among 6.
  EXPECT_DOUBLE_EQ(env->score(t, tagged("-3, 5, 12, 1, 2, 3")).reward, 0.5);
  EXPECT_EQ(env->score(t, tagged("12, 5, -3") + tagged("-3, 5, 12")).reward, 1.0);
}

TEST(Sort, DifficultyGrowsTheListAndItsVariety) {
  const auto env = make_sort_environment();
  std::set<std::string> kinds;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    EXPECT_EQ(env->generate(seed, 1).verification_info["items"].size(), 3u);
    EXPECT_EQ(env->generate(seed, 1).verification_info["order"], "ascending");
    const Task hard = env->generate(seed, 10);
    EXPECT_EQ(hard.verification_info["items"].size(), 30u);
    const Json& first = hard.verification_info["items"][0];
    kinds.insert(hard.verification_info["order"].get<std::string>() + "/" +
                 (first.is_string()          ? "words"
                  : first.get<int64_t>() < 0 ? "negative"
                                             : "number"));
  }
  EXPECT_TRUE(kinds.count("ascending/words") && kinds.count("descending/words")) << kinds.size();
  EXPECT_TRUE(kinds.count("ascending/negative") || kinds.count("descending/negative"));
  EXPECT_THROW(env->generate(1, 0), Error);
}

TEST(Sort, IsDeterministicPerSeedAndVariesAcrossSeeds) {
  const auto env = make_sort_environment();
  EXPECT_EQ(task_to_json(env->generate(77, 6)), task_to_json(env->generate(77, 6)));
  std::set<std::string> prompts;
  for (uint64_t seed = 0; seed < 20; ++seed) prompts.insert(env->generate(seed, 6).prompt);
  EXPECT_EQ(prompts.size(), 20u);
}

TEST(Sort, ValidateNamesTheBadField) {
  const auto env = make_sort_environment();
  auto error_of = [&](Json info) {
    return test::validation_error(*env, std::move(info), "sort.jsonl:4");
  };
  auto info = [](Json items, Json order, Json sorted) {
    return Json{{"items", items}, {"order", order}, {"sorted", sorted}};
  };
  EXPECT_EQ(error_of(info({3, 1, 2}, "ascending", {1, 2, 3})), "");
  EXPECT_EQ(error_of(info({"b", "a"}, "descending", {"b", "a"})), "");
  EXPECT_NE(error_of(Json::array()).find("sort.jsonl:4"), std::string::npos);
  EXPECT_NE(error_of({{"order", "ascending"}, {"sorted", {1}}}).find("items"), std::string::npos);
  EXPECT_NE(error_of(info(Json::array(), "ascending", Json::array())).find("items"),
            std::string::npos);
  EXPECT_NE(error_of(info({1, "a"}, "ascending", {1, "a"})).find("items"), std::string::npos);
  EXPECT_NE(error_of(info({"a", 1}, "ascending", {1, "a"})).find("items"), std::string::npos);
  EXPECT_NE(error_of(info({1.5, 2}, "ascending", {1.5, 2})).find("items"), std::string::npos);
  EXPECT_NE(error_of(info({"a,b", "c"}, "ascending", {"a,b", "c"})).find("commas"),
            std::string::npos);
  EXPECT_NE(error_of(info({3, 1}, "upward", {1, 3})).find("order"), std::string::npos);
  EXPECT_NE(error_of(info({3, 1}, "ascending", {3, 1})).find("sorted"), std::string::npos);
  EXPECT_NE(error_of({{"items", {3, 1}}, {"order", "ascending"}}).find("sorted"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::env
