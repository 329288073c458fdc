// TOPLOC proofs: what an inference worker commits to while it decodes (specs/toploc.md §1-2).
//
// The committed rows (final hidden states, bf16, one per decode step) are cut into chunks of
// `chunk_rows` consecutive rows (the last may be shorter). Each chunk becomes one ChunkProof: the
// polynomial over F_65497 through its top-k entries (x = index mod m, y = bf16 bits), where m is
// the largest modulus ≤ 65497 that keeps the k indices distinct. On the wire a chunk proof is
// big-endian u16 m followed by k big-endian u16 coefficients (2 + 2k bytes, 258 for k = 128),
// byte-compatible with the public reference (toploc 0.1.6), and a sequence's proof is the
// concatenation of its chunk proofs. Parsing is fail-closed: proofs come from untrusted workers.
//
// All functions are pure and thread-safe; building one chunk is O(n) for the top-k plus O(k^2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::toploc {

struct ProofConfig {
  size_t k = 128;          // top-k entries committed per chunk
  size_t chunk_rows = 32;  // rows per chunk
};

// One chunk's commitment: P(index mod modulus) = bf16 bits mod p for each committed index.
struct ChunkProof {
  uint32_t modulus = 0;          // 1..65497
  std::vector<uint16_t> coeffs;  // c_0..c_{k-1}, ascending degree, each < 65497

  // P(index mod modulus), a 16-bit value read back as a bf16 bit pattern.
  uint32_t at(uint64_t index) const;
  bool operator==(const ChunkProof&) const = default;
};

// Largest m <= 65497 for which the indices are pairwise distinct mod m. Error if there is none
// (only possible with more than 65497 indices, or repeated ones).
uint32_t injective_modulus(std::span<const uint32_t> indices);

// The proof of one chunk, flattened row-major (element (r, h) at index r * H + h). Error if the
// chunk has fewer than k values or holds a NaN/Inf (see topk.h).
ChunkProof prove_chunk(std::span<const uint16_t> chunk, size_t k);

inline size_t chunk_proof_bytes(size_t k) { return 2 + 2 * k; }
// Number of chunks (and chunk proofs) for `rows` rows: ceil(rows / chunk_rows).
size_t chunk_count(size_t rows, size_t chunk_rows);

std::string encode_chunk_proof(const ChunkProof& proof);
// Fail-closed: Error naming `where` unless `bytes` is exactly 2 + 2k bytes with 1 <= m <= 65497
// and every coefficient < 65497.
ChunkProof parse_chunk_proof(std::string_view bytes, size_t k, const std::string& where);

// A sequence's proof: `rows` is (number of rows) x `hidden` bf16 bit patterns, row-major; the
// result is chunk_count(rows) concatenated chunk proofs (empty for no rows). Error if hidden = 0,
// the span is not a whole number of rows, a chunk has fewer than k values, or a value is NaN/Inf.
std::string build_proof(std::span<const uint16_t> rows, size_t hidden,
                        const ProofConfig& config = {});
// The largest sequence proof parse_proof reads: 65,536 chunk proofs of k = 128 (2M rows at 32 rows
// a chunk) and some. Checked before anything is allocated for the chunks.
inline constexpr size_t kMaxProofBytes = size_t{17} << 20;

// Splits and parses a sequence's proof; fail-closed like parse_chunk_proof, and Error unless the
// length is a whole number of chunk proofs and at most kMaxProofBytes.
std::vector<ChunkProof> parse_proof(std::string_view bytes, const ProofConfig& config,
                                    const std::string& where);

}  // namespace trellis::toploc
