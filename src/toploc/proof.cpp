#include "toploc/proof.h"

#include <algorithm>

#include "common/error.h"
#include "toploc/polynomial.h"
#include "toploc/topk.h"

namespace trellis::toploc {

uint32_t ChunkProof::at(uint64_t index) const {
  return evaluate(coeffs, modulus == 0 ? index : index % modulus);
}

uint32_t injective_modulus(std::span<const uint32_t> indices) {
  std::vector<uint32_t> residues(indices.size());
  for (uint32_t m = kPrime; m >= 1; --m) {
    for (size_t i = 0; i < indices.size(); ++i) residues[i] = indices[i] % m;
    std::sort(residues.begin(), residues.end());
    if (std::adjacent_find(residues.begin(), residues.end()) == residues.end()) return m;
  }
  fail("toploc proof", "no modulus <= {} keeps {} indices distinct", kPrime, indices.size());
}

namespace {

ChunkProof prove(std::span<const uint16_t> chunk, size_t k, const std::string& where,
                 size_t row_width, size_t first_row) {
  const TopK top = top_k(chunk, k, where, row_width, first_row);
  ChunkProof proof;
  proof.modulus = injective_modulus(top.indices);
  std::vector<uint32_t> x(k), y(k);
  for (size_t i = 0; i < k; ++i) {
    x[i] = top.indices[i] % proof.modulus;
    y[i] = top.values[i];  // reduced mod p by interpolate
  }
  proof.coeffs = interpolate(x, y);
  return proof;
}

}  // namespace

ChunkProof prove_chunk(std::span<const uint16_t> chunk, size_t k) {
  return prove(chunk, k, "toploc proof", 0, 0);
}

size_t chunk_count(size_t rows, size_t chunk_rows) {
  if (chunk_rows == 0) fail("toploc proof", "chunk_rows must be at least 1");
  return (rows + chunk_rows - 1) / chunk_rows;
}

std::string encode_chunk_proof(const ChunkProof& proof) {
  std::string out;
  out.reserve(chunk_proof_bytes(proof.coeffs.size()));
  auto put = [&](uint32_t v) {
    out.push_back(static_cast<char>((v >> 8) & 0xFF));
    out.push_back(static_cast<char>(v & 0xFF));
  };
  put(proof.modulus);
  for (uint16_t c : proof.coeffs) put(c);
  return out;
}

ChunkProof parse_chunk_proof(std::string_view bytes, size_t k, const std::string& where) {
  if (bytes.size() != chunk_proof_bytes(k)) {
    fail(where, "chunk proof is {} bytes, expected {} (k = {})", bytes.size(), chunk_proof_bytes(k),
         k);
  }
  auto get = [&](size_t i) -> uint32_t {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[2 * i])) << 8 |
           static_cast<unsigned char>(bytes[2 * i + 1]);
  };
  ChunkProof proof;
  proof.modulus = get(0);
  if (proof.modulus < 1 || proof.modulus > kPrime) {
    fail(where, "modulus {} is outside 1..{}", proof.modulus, kPrime);
  }
  proof.coeffs.resize(k);
  for (size_t i = 0; i < k; ++i) {
    const uint32_t c = get(i + 1);
    if (c >= kPrime) fail(where, "coefficient {} is {}, not below {}", i, c, kPrime);
    proof.coeffs[i] = static_cast<uint16_t>(c);
  }
  return proof;
}

std::string build_proof(std::span<const uint16_t> rows, size_t hidden, const ProofConfig& config) {
  if (hidden == 0) fail("toploc proof", "hidden size must be at least 1");
  if (rows.size() % hidden != 0) {
    fail("toploc proof", "{} values are not a whole number of rows of {}", rows.size(), hidden);
  }
  const size_t n_rows = rows.size() / hidden;
  const size_t chunks = chunk_count(n_rows, config.chunk_rows);
  std::string out;
  out.reserve(chunks * chunk_proof_bytes(config.k));
  for (size_t c = 0; c < chunks; ++c) {
    const size_t first = c * config.chunk_rows;
    const size_t n = std::min(config.chunk_rows, n_rows - first);
    out += encode_chunk_proof(prove(rows.subspan(first * hidden, n * hidden), config.k,
                                    fmt::format("toploc proof, chunk {}", c), hidden, first));
  }
  return out;
}

std::vector<ChunkProof> parse_proof(std::string_view bytes, const ProofConfig& config,
                                    const std::string& where) {
  const size_t size = chunk_proof_bytes(config.k);
  if (bytes.size() > kMaxProofBytes) {
    fail(where, "proof is {} bytes, more than the limit of {}", bytes.size(), kMaxProofBytes);
  }
  if (bytes.size() % size != 0) {
    fail(where, "proof is {} bytes, not a whole number of {}-byte chunk proofs (k = {})",
         bytes.size(), size, config.k);
  }
  std::vector<ChunkProof> out;
  out.reserve(bytes.size() / size);
  for (size_t c = 0; c * size < bytes.size(); ++c) {
    out.push_back(parse_chunk_proof(bytes.substr(c * size, size), config.k,
                                    fmt::format("{}, chunk {}", where, c)));
  }
  return out;
}

}  // namespace trellis::toploc
