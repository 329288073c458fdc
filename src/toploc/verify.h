// TOPLOC verification: a validator's judgement of a worker's proof against the rows it recomputed
// itself with one prefill (specs/toploc.md §3).
//
// Per chunk, the validator takes its own top-k (indices idx', values v'), evaluates the worker's
// polynomial at idx' mod m and compares the result pv with v' as bf16 bit patterns: an exponent
// mismatch when bits 0x7F80 differ, otherwise a mantissa error |(pv & 0x7F) - (v' & 0x7F)|. An
// index the worker did not commit evaluates to noise, so disagreeing top-k sets show up as
// exponent mismatches; other weights or precision show up as mantissa errors. A chunk passes when
// no statistic exceeds its threshold; a sequence when every chunk passes and the proof has exactly
// one chunk proof per chunk of the validator's rows. Malformed proofs are rejections with a
// reason, never exceptions: the worker is untrusted, the verdict is what the caller records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "toploc/proof.h"

namespace trellis::toploc {

// A chunk is rejected when a statistic is strictly greater than its threshold.
struct Thresholds {
  uint32_t exp_mismatches = 38;
  double mant_err_mean = 10;
  double mant_err_median = 8;

  static constexpr Thresholds strict() { return {38, 10, 8}; }  // the TOPLOC paper's experiments
  static constexpr Thresholds loose() { return {60, 40, 40}; }  // INTELLECT-2's deployment
  // "strict" or "loose"; Error naming `where` otherwise.
  static Thresholds named(std::string_view name, const std::string& where);
};

struct ChunkStats {
  uint32_t exp_mismatches = 0;
  double mant_err_mean = 0;    // +infinity when no exponent matched
  double mant_err_median = 0;  // upper median sorted[n/2]; +infinity when no exponent matched
};

// The statistics of one chunk (row-major bf16 bits, element (r, h) at r * H + h) against its
// proof, whose coefficient count is k. Error if the chunk has fewer than k values or holds a
// NaN/Inf: the validator's own rows cannot be committed to (see topk.h).
ChunkStats chunk_stats(const ChunkProof& proof, std::span<const uint16_t> chunk);

struct ChunkVerdict {
  size_t chunk = 0;
  bool passed = false;
  ChunkStats stats;
  std::string reason;  // empty when passed, e.g. "chunk 3: 57 exponent mismatches > 38"
};

// Every violated threshold, joined with "; ", or "" when the chunk passes.
ChunkVerdict judge_chunk(size_t chunk, const ChunkStats& stats, const Thresholds& thresholds);

struct Verdict {
  bool accepted = false;
  std::string reason;                // empty when accepted; otherwise names the chunks at fault
  std::vector<ChunkVerdict> chunks;  // one per chunk when the proof parsed and had the right count
};

// Verifies a sequence's proof against the validator's rows ((number of rows) x `hidden` bf16 bits,
// row-major) chunked as `config` says. Rejects (never throws for) a malformed proof, a proof whose
// chunk count differs from chunk_count(rows), and a chunk whose rows hold NaN/Inf. Error only for
// the caller's own mistakes: hidden = 0, or a span that is not a whole number of rows.
Verdict verify_proof(std::string_view proof, std::span<const uint16_t> rows, size_t hidden,
                     const Thresholds& thresholds, const ProofConfig& config = {});

}  // namespace trellis::toploc
