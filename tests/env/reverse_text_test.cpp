// reverse_text: generated reversals are exact, partial credit equals an independently computed
// LCS ratio, only the exact reversal scores 1, UTF-8 texts reverse by code point, and huge or
// malformed answers score 0 without expensive work.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

// The textbook LCS table, independent of the verifier's two-row version.
size_t naive_lcs(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> t(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      t[i][j] = a[i - 1] == b[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
    }
  }
  return t[a.size()][b.size()];
}

Task task_with(const std::string& text, const std::string& reversed) {
  Task t;
  t.env = "reverse_text";
  t.verification_info = {{"text", text}, {"reversed", reversed}};
  return t;
}

std::string tagged(const std::string& answer) { return "<answer>" + answer + "</answer>"; }

TEST(ReverseText, GeneratedTasksAreExactReversalsAndTheirSolutionsScoreOne) {
  const auto env = make_reverse_text_environment();
  for (int d = kMinDifficulty; d <= kMaxDifficulty; ++d) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      const Task task = env->generate(seed, d);
      ASSERT_NO_THROW(env->validate(task, "generated"));
      const auto text = task.verification_info["text"].get<std::string>();
      EXPECT_EQ(task.verification_info["reversed"].get<std::string>(),
                std::string(text.rbegin(), text.rend()));
      for (const char c : text) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << text;  // printable ASCII
      EXPECT_NE(task.prompt.find(text), std::string::npos);
      ASSERT_TRUE(task.solution);
      EXPECT_EQ(env->score(task, *task.solution).reward, 1.0) << *task.solution;
    }
  }
}

TEST(ReverseText, PartialCreditIsTheLcsRatio) {
  const auto env = make_reverse_text_environment();
  RandomStream rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const Task task = env->generate(rng.next_u64(), static_cast<int>(rng.uniform_int(1, 10)));
    const auto expected = task.verification_info["reversed"].get<std::string>();
    // Perturb the right answer: delete, insert and replace characters.
    std::string answer = expected;
    const int edits = static_cast<int>(rng.uniform_int(0, 6));
    for (int e = 0; e < edits; ++e) {
      const auto at = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(answer.size())));
      const char c = static_cast<char>('a' + rng.uniform_int(0, 25));
      switch (rng.uniform_int(0, 2)) {
        case 0:
          if (at < answer.size()) answer.erase(at, 1);
          break;
        case 1:
          answer.insert(at, 1, c);
          break;
        default:
          if (at < answer.size()) answer[at] = c;
          break;
      }
    }
    answer = std::string(trim(answer));  // the answer tag is trimmed; so is the expectation here
    const Score s = env->score(task, "Let me think.\n" + tagged(answer));
    const double want = static_cast<double>(naive_lcs(answer, expected)) /
                        static_cast<double>(std::max(answer.size(), expected.size()));
    EXPECT_DOUBLE_EQ(s.reward, want) << answer << " vs " << expected;
    EXPECT_EQ(s.reward == 1.0, answer == expected) << answer;
    EXPECT_EQ(s.reason.find('\n'), std::string::npos);
  }
}

TEST(ReverseText, KnownPartialScores) {
  const auto env = make_reverse_text_environment();
  const Task t = task_with("hello world", "dlrow olleh");
  EXPECT_EQ(env->score(t, tagged("dlrow olleh")).reward, 1.0);
  // The text unreversed: LCS("hello world", "dlrow olleh") is 3 ("l o l" and others).
  EXPECT_DOUBLE_EQ(env->score(t, tagged("hello world")).reward,
                   naive_lcs("hello world", "dlrow olleh") / 11.0);
  EXPECT_DOUBLE_EQ(env->score(t, tagged("dlrow")).reward, 5.0 / 11);
  EXPECT_DOUBLE_EQ(env->score(t, tagged("dlrow olleh dlrow olleh")).reward, 11.0 / 23);
  EXPECT_DOUBLE_EQ(env->score(t, tagged("DLROW OLLEH")).reward, 1.0 / 11);  // case matters
  EXPECT_EQ(env->score(t, tagged("")).reward, 0.0);
}

TEST(ReverseText, ReversesUtf8ByCodePoint) {
  const auto env = make_reverse_text_environment();
  // "héllo wörld ✓" reversed character by character.
  const Task t =
      task_with("h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93", "\xE2\x9C\x93 dlr\xC3\xB6w oll\xC3\xA9h");
  EXPECT_NO_THROW(env->validate(t, "utf8"));
  EXPECT_EQ(env->score(t, tagged("\xE2\x9C\x93 dlr\xC3\xB6w oll\xC3\xA9h")).reward, 1.0);
  // 13 characters; one wrong (ö -> o) leaves 12 in order.
  EXPECT_DOUBLE_EQ(env->score(t, tagged("\xE2\x9C\x93 dlrow oll\xC3\xA9h")).reward, 12.0 / 13);
  // Reversing bytes breaks the characters; it is neither a valid task nor a good answer.
  const std::string text = "h\xC3\xA9llo";
  const std::string byte_reversed(text.rbegin(), text.rend());
  EXPECT_THROW(env->validate(task_with(text, byte_reversed), "bytes"), Error);
  const Score s = env->score(task_with(text, "oll\xC3\xA9h"), tagged(byte_reversed));
  EXPECT_LT(s.reward, 1.0);
  EXPECT_GT(s.reward, 0.0);
}

TEST(ReverseText, HugeAndMalformedAnswersScoreZero) {
  const auto env = make_reverse_text_environment();
  const Task t = task_with("hello world", "dlrow olleh");
  auto check = [&](const std::string& completion, const std::string& reason) {
    const Score s = env->score(t, completion);
    EXPECT_EQ(s.reward, 0.0) << completion.substr(0, 80);
    EXPECT_NE(s.reason.find(reason), std::string::npos) << s.reason;
  };
  check("dlrow olleh", "no <answer>");
  check("<answer>dlrow olleh", "no <answer>");
  check("", "no <answer>");
  check(tagged(""), "0 of 11 characters");
  check(tagged("zzzz"), "0 of 11 characters");
  // 11 * 2 + 64 = 86 characters is the most considered: the right answer padded past it is out.
  check(tagged("dlrow olleh" + std::string(76, 'x')), "far longer");
  check(tagged(std::string(1 << 20, 'd')), "far longer");
  check(tagged(std::string(1 << 20, '\xff')), "far longer");
  EXPECT_GT(env->score(t, tagged("dlrow olleh" + std::string(75, 'x'))).reward, 0.0);
  // Invalid UTF-8 in the answer counts as characters that match nothing.
  EXPECT_DOUBLE_EQ(env->score(t, tagged("dlrow\xff olleh")).reward, 11.0 / 12);
  // The last answer counts.
  EXPECT_EQ(env->score(t, tagged("hello world") + "\n" + tagged("dlrow olleh")).reward, 1.0);
}

TEST(ReverseText, DifficultyGrowsTheText) {
  const auto env = make_reverse_text_environment();
  auto words = [&](int d, uint64_t seed) {
    const auto text = env->generate(seed, d).verification_info["text"].get<std::string>();
    return std::count(text.begin(), text.end(), ' ') + 1;
  };
  for (uint64_t seed = 0; seed < 10; ++seed) {
    EXPECT_EQ(words(1, seed), 1);
    EXPECT_EQ(words(5, seed), 9);
    EXPECT_EQ(words(10, seed), 19);
  }
  EXPECT_THROW(env->generate(1, 11), Error);
}

TEST(ReverseText, IsDeterministicPerSeedAndVariesAcrossSeeds) {
  const auto env = make_reverse_text_environment();
  EXPECT_EQ(task_to_json(env->generate(5, 4)), task_to_json(env->generate(5, 4)));
  std::set<std::string> prompts;
  for (uint64_t seed = 0; seed < 20; ++seed) prompts.insert(env->generate(seed, 4).prompt);
  EXPECT_EQ(prompts.size(), 20u);
}

TEST(ReverseText, ValidateNamesTheBadField) {
  const auto env = make_reverse_text_environment();
  auto error_of = [&](Json info) {
    return test::validation_error(*env, std::move(info), "rev.jsonl:2");
  };
  EXPECT_EQ(error_of({{"text", "abc"}, {"reversed", "cba"}}), "");
  EXPECT_NE(error_of(Json::array()).find("rev.jsonl:2"), std::string::npos);
  EXPECT_NE(error_of({{"reversed", "cba"}}).find("text"), std::string::npos);
  EXPECT_NE(error_of({{"text", "abc"}}).find("reversed"), std::string::npos);
  EXPECT_NE(error_of({{"text", "abc"}, {"reversed", "abc"}}).find("not verification_info.text"),
            std::string::npos);
  EXPECT_NE(error_of({{"text", "  "}, {"reversed", "  "}}).find("empty"), std::string::npos);
  EXPECT_NE(error_of({{"text", "a\xff"},
                      {"reversed",
                       "\xff"
                       "a"}})
                .find("UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of({{"text", std::string(5000, 'a')}, {"reversed", std::string(5000, 'a')}})
                .find("at most 4096"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::env
