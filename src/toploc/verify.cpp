#include "toploc/verify.h"

#include <algorithm>
#include <limits>

#include <fmt/ranges.h>

#include "common/error.h"
#include "toploc/topk.h"

namespace trellis::toploc {

Thresholds Thresholds::named(std::string_view name, const std::string& where) {
  if (name == "strict") return strict();
  if (name == "loose") return loose();
  fail(where, "unknown TOPLOC thresholds '{}' (expected strict or loose)", name);
}

namespace {

ChunkStats stats_of(const ChunkProof& proof, std::span<const uint16_t> chunk,
                    const std::string& where, size_t row_width, size_t first_row) {
  const size_t k = proof.coeffs.size();
  const TopK top = top_k(chunk, k, where, row_width, first_row);
  ChunkStats stats;
  std::vector<uint32_t> mant_errs;
  mant_errs.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    const uint32_t pv = proof.at(top.indices[i]);
    const uint32_t v = top.values[i];
    if ((pv & 0x7F80) != (v & 0x7F80)) {
      ++stats.exp_mismatches;
    } else {
      const int d = static_cast<int>(pv & 0x7F) - static_cast<int>(v & 0x7F);
      mant_errs.push_back(static_cast<uint32_t>(d < 0 ? -d : d));
    }
  }
  if (mant_errs.empty()) {
    stats.mant_err_mean = stats.mant_err_median = std::numeric_limits<double>::infinity();
    return stats;
  }
  uint64_t sum = 0;
  for (uint32_t e : mant_errs) sum += e;
  stats.mant_err_mean = static_cast<double>(sum) / static_cast<double>(mant_errs.size());
  const size_t mid = mant_errs.size() / 2;
  std::nth_element(mant_errs.begin(), mant_errs.begin() + static_cast<std::ptrdiff_t>(mid),
                   mant_errs.end());
  stats.mant_err_median = mant_errs[mid];
  return stats;
}

}  // namespace

ChunkStats chunk_stats(const ChunkProof& proof, std::span<const uint16_t> chunk) {
  return stats_of(proof, chunk, "validator rows", 0, 0);
}

ChunkVerdict judge_chunk(size_t chunk, const ChunkStats& stats, const Thresholds& thresholds) {
  ChunkVerdict v{chunk, true, stats, ""};
  std::vector<std::string> why;
  if (stats.exp_mismatches > thresholds.exp_mismatches) {
    why.push_back(fmt::format("{} exponent mismatches > {}", stats.exp_mismatches,
                              thresholds.exp_mismatches));
  }
  const bool none_matched = stats.mant_err_mean == std::numeric_limits<double>::infinity();
  if (none_matched) {
    why.push_back("no exponent matched, mantissa error is infinite");
  } else {
    if (stats.mant_err_mean > thresholds.mant_err_mean) {
      why.push_back(fmt::format("mantissa error mean {:.2f} > {}", stats.mant_err_mean,
                                thresholds.mant_err_mean));
    }
    if (stats.mant_err_median > thresholds.mant_err_median) {
      why.push_back(fmt::format("mantissa error median {} > {}", stats.mant_err_median,
                                thresholds.mant_err_median));
    }
  }
  if (!why.empty()) {
    v.passed = false;
    v.reason = fmt::format("chunk {}: {}", chunk, fmt::join(why, "; "));
  }
  return v;
}

Verdict verify_proof(std::string_view proof, std::span<const uint16_t> rows, size_t hidden,
                     const Thresholds& thresholds, const ProofConfig& config) {
  if (hidden == 0) fail("toploc verify", "hidden size must be at least 1");
  if (rows.size() % hidden != 0) {
    fail("toploc verify", "{} values are not a whole number of rows of {}", rows.size(), hidden);
  }
  const size_t n_rows = rows.size() / hidden;
  const size_t expected = chunk_count(n_rows, config.chunk_rows);
  Verdict verdict;
  std::vector<ChunkProof> chunks;
  try {
    chunks = parse_proof(proof, config, "proof");
  } catch (const Error& e) {
    verdict.reason = e.what();
    return verdict;
  }
  if (chunks.size() != expected) {
    verdict.reason =
        chunks.empty()
            ? fmt::format("empty proof for {} rows (expected {} chunk proofs)", n_rows, expected)
            : fmt::format("proof has {} chunk proofs but the {} rows make {} chunks of {}",
                          chunks.size(), n_rows, expected, config.chunk_rows);
    return verdict;
  }
  std::vector<std::string> failures;
  for (size_t c = 0; c < expected; ++c) {
    const size_t first = c * config.chunk_rows;
    const size_t n = std::min(config.chunk_rows, n_rows - first);
    const auto chunk = rows.subspan(first * hidden, n * hidden);
    ChunkVerdict v;
    try {
      v = judge_chunk(c, stats_of(chunks[c], chunk, "validator rows", hidden, first), thresholds);
    } catch (const Error& e) {
      // The validator's own rows hold NaN/Inf (or are fewer than k values): nothing to compare.
      v = ChunkVerdict{c, false, {}, fmt::format("chunk {}: {}", c, e.what())};
    }
    if (!v.passed) failures.push_back(v.reason);
    verdict.chunks.push_back(std::move(v));
  }
  verdict.accepted = failures.empty();
  if (!failures.empty()) {
    constexpr size_t kShown = 3;
    verdict.reason = fmt::format(
        "{} of {} chunks failed: {}", failures.size(), expected,
        fmt::join(failures.begin(), failures.begin() + std::min(kShown, failures.size()), "; "));
    if (failures.size() > kShown) verdict.reason += "; ...";
  }
  return verdict;
}

}  // namespace trellis::toploc
