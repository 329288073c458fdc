// The sort environment (after Ring-1T): sort a list of integers or words, ascending or descending.
//
// Words sort by byte order, which for the generator's lowercase ASCII words is alphabetical.
// The answer is a comma-separated list (a list in brackets, quoted items, or, when there is no
// comma, a whitespace-separated list are accepted too). The reward is partial credit by the
// longest common subsequence over items: LCS(answer, expected) / max(|answer|, |expected|)
// (lcs.h), so only the exact sorted list scores 1, and missing and extra items both cost.
#include <algorithm>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/rng.h"
#include "env/answer_extraction.h"
#include "env/environments/environments.h"
#include "env/verifiers/lcs.h"
#include "env/verifiers/words.h"

namespace trellis::env {
namespace {

constexpr size_t kMaxItems = 1000;
constexpr size_t kMaxWordBytes = 64;
constexpr int64_t kMaxMagnitude = 1'000'000'000'000'000;

// Difficulty d: 3d items (3 at d=1, 30 at d=10); integers in [0, 99] up to d=2, then integers or
// words; integers up to 999 (d<=5), then negative ones in [-9999, 9999] (d<=8) and
// [-99999, 99999]; descending order possible from d=5.
int item_count(int difficulty) { return 3 * difficulty; }
int64_t largest_magnitude(int difficulty) {
  return difficulty <= 2 ? 99 : difficulty <= 5 ? 999 : difficulty <= 8 ? 9999 : 99999;
}
bool allows_negative(int difficulty) { return difficulty >= 6; }
bool allows_words(int difficulty) { return difficulty >= 3; }
bool allows_descending(int difficulty) { return difficulty >= 5; }

// The canonical text of an integer item ("+007" -> "7", "-0" -> "0"); other text unchanged.
std::string canonical_item(std::string_view item) {
  std::string_view digits = item;
  const bool negative = digits.starts_with('-');
  if (negative || digits.starts_with('+')) digits.remove_prefix(1);
  if (digits.empty() || digits.size() > 19 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::string(item);
  }
  const auto first = digits.find_first_not_of('0');
  if (first == std::string_view::npos) return "0";
  return (negative ? "-" : "") + std::string(digits.substr(first));
}

// The items of an answer: split on commas (on whitespace when there is no comma and items hold
// none), each trimmed and unquoted, empty ones dropped, integers in canonical form.
std::vector<std::string> answer_items(std::string_view text, bool split_on_whitespace) {
  text = trim(text);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = trim(text.substr(1, text.size() - 2));
  }
  const bool commas = text.find(',') != std::string_view::npos;
  auto is_separator = [&](char c) {
    return commas ? c == ',' : split_on_whitespace && std::isspace(static_cast<unsigned char>(c));
  };
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && !is_separator(text[i])) continue;
    std::string_view item = trim(text.substr(start, i - start));
    if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') &&
        item.back() == item.front()) {
      item = item.substr(1, item.size() - 2);
    }
    if (!item.empty()) items.push_back(canonical_item(item));
    start = i + 1;
  }
  return items;
}

// Item texts as the answer would write them.
std::vector<std::string> item_texts(const Json& items) {
  std::vector<std::string> out;
  for (const auto& x : items) out.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  return out;
}

Json sorted_items(Json items, bool descending) {
  // Json's operator< orders numbers by value and strings by bytes.
  std::vector<Json> v(items.begin(), items.end());
  std::stable_sort(v.begin(), v.end());
  if (descending) std::reverse(v.begin(), v.end());
  return Json(v);
}

class SortEnvironment final : public Environment {
 public:
  std::string name() const override { return "sort"; }

  std::string description() const override {
    return "sort a list of integers or words (partial credit by LCS ratio); difficulty 1..10: "
           "3..30 items, words from d=3, descending from d=5, negative integers from d=6";
  }

  std::string system_prompt() const override {
    return "Think step by step, then give the sorted list, comma-separated (e.g. 1, 2, 3), inside "
           "<answer>...</answer>.";
  }

  Task generate(uint64_t seed, int difficulty) const override {
    check_difficulty(difficulty, "sort.generate");
    // The difficulty picks the stream, so one seed gives unrelated tasks at each difficulty.
    RandomStream rng(seed, static_cast<uint32_t>(difficulty));
    const int n = item_count(difficulty);
    const bool words = allows_words(difficulty) && rng.bernoulli(0.5);
    const bool descending = allows_descending(difficulty) && rng.bernoulli(0.5);
    Json items = Json::array();
    if (words) {
      // Distinct words: the first n of a shuffled copy of the list.
      const auto all = common_words();
      std::vector<std::string_view> pool(all.begin(), all.end());
      rng.shuffle(pool.begin(), pool.end());
      for (int i = 0; i < n; ++i) items.push_back(std::string(pool[i]));
    } else {
      const int64_t m = largest_magnitude(difficulty);
      for (int i = 0; i < n; ++i)
        items.push_back(rng.uniform_int(allows_negative(difficulty) ? -m : 0, m));
    }
    const std::string order = descending ? "descending" : "ascending";
    const Json sorted = sorted_items(items, descending);

    Task task = generated_task(*this, seed, difficulty);
    const std::string how =
        words ? (descending ? "reverse alphabetical order (z to a)" : "alphabetical order (a to z)")
              : (descending ? "descending order (largest first)"
                            : "ascending order (smallest first)");
    task.prompt = fmt::format("Sort these {} in {}: {}", words ? "words" : "numbers", how,
                              fmt::join(item_texts(items), ", "));
    task.verification_info = {{"items", items}, {"order", order}, {"sorted", sorted}};
    task.solution = fmt::format("<answer>{}</answer>", fmt::join(item_texts(sorted), ", "));
    return task;
  }

  void validate(const Task& task, const std::string& where) const override {
    const Json& info = task.verification_info;
    if (!info.is_object()) fail(where, "verification_info must be an object");
    if (!info.contains("items") || !info["items"].is_array()) {
      fail(where, "verification_info.items must be an array");
    }
    const Json& items = info["items"];
    if (items.empty() || items.size() > kMaxItems) {
      fail(where, "verification_info.items must hold 1 to {} items, not {}", kMaxItems,
           items.size());
    }
    const bool words = items.front().is_string();
    for (const auto& x : items) {
      if (words) {
        // An item must survive the answer format: no commas, quotes or brackets, no edge spaces.
        const std::string s = x.is_string() ? x.get<std::string>() : std::string();
        if (!x.is_string() || s.empty() || s.size() > kMaxWordBytes ||
            s.find_first_of(",\"'[]") != std::string::npos || trim(s) != s ||
            canonical_item(s) != s) {
          fail(where,
               "verification_info.items must be all integers or all words (1 to {} bytes, no "
               "commas, quotes, brackets or edge spaces, not integer-like); found {}",
               kMaxWordBytes, x.dump());
        }
      } else if (!json_integer_in(x, -kMaxMagnitude, kMaxMagnitude)) {
        fail(where,
             "verification_info.items must be all integers of magnitude at most {} or all "
             "words; found {}",
             kMaxMagnitude, x.dump());
      }
    }
    const auto order = json_required<std::string>(info, "order", where);
    if (order != "ascending" && order != "descending") {
      fail(where, "verification_info.order must be 'ascending' or 'descending', not '{}'", order);
    }
    if (!info.contains("sorted") || info["sorted"] != sorted_items(items, order == "descending")) {
      fail(where, "verification_info.sorted is not verification_info.items sorted {}", order);
    }
  }

  Score score(const Task& task, std::string_view completion) const override {
    const auto answer = last_tagged(completion);
    if (!answer) return {0, "no <answer>...</answer> block"};
    const std::vector<std::string> expected = item_texts(task.verification_info["sorted"]);
    size_t expected_bytes = 0;
    bool items_have_spaces = false;
    for (const auto& item : expected) {
      expected_bytes += item.size() + 2;
      items_have_spaces = items_have_spaces || item.find(' ') != std::string::npos;
    }
    // Bound the O(n m) comparison: far more text or items than the list is not an attempt.
    if (answer->size() > 8 * expected_bytes + 1024)
      return {0, "answer is far longer than the list"};
    const std::vector<std::string> given = answer_items(*answer, !items_have_spaces);
    if (given.size() > 2 * expected.size() + 64)
      return {0, "answer has far more items than the list"};
    if (given == expected) return {1, "exactly the sorted list"};
    const size_t common = lcs_length<std::string>(given, expected);
    const double ratio =
        static_cast<double>(common) / static_cast<double>(std::max(given.size(), expected.size()));
    return {ratio, fmt::format("{} of {} items in sorted order, {} given (LCS ratio {:.3f})",
                               common, expected.size(), given.size(), ratio)};
  }
};

}  // namespace

std::unique_ptr<Environment> make_sort_environment() { return std::make_unique<SortEnvironment>(); }

}  // namespace trellis::env
