// The reverse_text environment (after Ring-1T): write a text backwards, character by character.
//
// Characters are Unicode code points: generated texts are ASCII (so a character is a byte and
// unambiguous), and dataset texts may be any valid UTF-8. The reward is partial credit by the
// longest common subsequence: LCS(answer, expected) / max(|answer|, |expected|) over code points
// (lcs.h), so a missing character and an extra one cost the same, and only the exact reversal
// scores 1. Leading and trailing whitespace is not compared (the answer tag is trimmed).
#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"
#include "env/verifiers/lcs.h"
#include "env/verifiers/words.h"

namespace trellis::env {
namespace {

constexpr size_t kMaxTextCodePoints = 4096;

// Difficulty d: 2d - 1 words (1 at d=1, 19 at d=10); capitals from d=4; punctuation and
// numbers from d=7; random letter strings (no word to recognize) from d=9.
int word_count(int difficulty) { return 2 * difficulty - 1; }

// Code points of `text`; a byte that is not part of valid UTF-8 becomes 0x110000 + byte, a value
// no code point has, so it never matches a valid character yet still counts as one.
std::vector<char32_t> code_points(std::string_view text, bool* valid = nullptr) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  if (valid) *valid = true;
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int length = b < 0x80           ? 1
                       : (b >> 5) == 0x6  ? 2
                       : (b >> 4) == 0xe  ? 3
                       : (b >> 3) == 0x1e ? 4
                                          : 0;
    char32_t c = length == 1 ? b : length == 2 ? b & 0x1f : length == 3 ? b & 0x0f : b & 0x07;
    bool ok = length > 0 && i + length <= text.size();
    for (int k = 1; ok && k < length; ++k) {
      const auto cont = static_cast<unsigned char>(text[i + k]);
      ok = (cont & 0xc0) == 0x80;
      c = (c << 6) | (cont & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8 either.
    static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && c >= kSmallest[length] && c <= 0x10ffff && (c < 0xd800 || c > 0xdfff);
    if (ok) {
      out.push_back(c);
      i += length;
    } else {
      if (valid) *valid = false;
      out.push_back(0x110000 + b);
      ++i;
    }
  }
  return out;
}

std::string random_letters(RandomStream& rng) {
  std::string s(static_cast<size_t>(rng.uniform_int(3, 8)), ' ');
  for (auto& c : s) c = static_cast<char>('a' + rng.uniform_int(0, 25));
  return s;
}

std::string random_text(RandomStream& rng, int difficulty) {
  const auto words = common_words();
  std::string text;
  for (int i = 0; i < word_count(difficulty); ++i) {
    std::string word = difficulty >= 9 && rng.bernoulli(0.3)
                           ? random_letters(rng)
                           : std::string(words[rng.uniform_int(0, words.size() - 1)]);
    if (difficulty >= 7 && rng.bernoulli(0.15)) word = std::to_string(rng.uniform_int(0, 9999));
    if (difficulty >= 4 && rng.bernoulli(0.3)) word[0] = static_cast<char>(std::toupper(word[0]));
    if (difficulty >= 7 && rng.bernoulli(0.25)) word += ",.;:!?"[rng.uniform_int(0, 5)];
    text += (i > 0 ? " " : "") + word;
  }
  return text;
}

class ReverseTextEnvironment final : public Environment {
 public:
  std::string name() const override { return "reverse_text"; }

  std::string description() const override {
    return "write a text backwards (partial credit by LCS ratio); difficulty 1..10: 1..19 words, "
           "capitals from d=4, punctuation and numbers from d=7, random letters from d=9";
  }

  std::string system_prompt() const override {
    return "Think step by step, then give the reversed text, exactly, inside <answer>...</answer>.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "reverse_text.generate");
    // The difficulty picks the stream, so one seed gives unrelated tasks at each difficulty.
    RandomStream rng(seed, static_cast<uint32_t>(difficulty));
    const std::string text = random_text(rng, difficulty);
    const std::string reversed(text.rbegin(), text.rend());  // ASCII: bytes are characters
    Task task = generated_task(*this, seed, difficulty);
    task.prompt = fmt::format(
        "Reverse the following text character by character, so that its last character comes "
        "first (spaces and punctuation included):\n\n{}",
        text);
    task.verification_info = {{"text", text}, {"reversed", reversed}};
    task.solution = fmt::format("<answer>{}</answer>", reversed);
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Json& info = task.verification_info;
    if (!info.is_object()) fail(where, "verification_info must be an object");
    const auto text = json_required<std::string>(info, "text", where);
    const auto reversed = json_required<std::string>(info, "reversed", where);
    bool valid = true;
    auto forward = code_points(text, &valid);
    if (!valid) fail(where, "verification_info.text is not valid UTF-8");
    if (trim(text).empty()) fail(where, "verification_info.text is empty");
    if (forward.size() > kMaxTextCodePoints) {
      fail(where, "verification_info.text has {} characters; at most {} are allowed",
           forward.size(), kMaxTextCodePoints);
    }
    std::reverse(forward.begin(), forward.end());
    if (code_points(reversed) != forward) {
      fail(where, "verification_info.reversed is not verification_info.text reversed");
    }
  }

  Score score(const Task& task, std::string_view completion) const override {
    const auto answer = last_tagged(completion);
    if (!answer) return {0, "no <answer>...</answer> block"};
    const auto expected =
        code_points(trim(task.verification_info["reversed"].get_ref<const std::string&>()));
    // Bound the O(n m) comparison: an answer over twice the text plus slack is not an attempt.
    const size_t most = 2 * expected.size() + 64;
    if (answer->size() > 4 * most) return {0, "answer is far longer than the text"};
    const auto given = code_points(*answer);
    if (given.size() > most) return {0, "answer is far longer than the text"};
    if (given == expected) return {1, "exact reversal"};
    const size_t common = lcs_length<char32_t>(given, expected);
    const double ratio =
        static_cast<double>(common) / static_cast<double>(std::max(given.size(), expected.size()));
    return {ratio, fmt::format("{} of {} characters in order, {} given (LCS ratio {:.3f})", common,
                               expected.size(), given.size(), ratio)};
  }
};

}  // namespace

std::unique_ptr<Environment> make_reverse_text_environment() {
  return std::make_unique<ReverseTextEnvironment>();
}

}  // namespace trellis::env
