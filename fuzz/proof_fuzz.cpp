// libFuzzer target for TOPLOC proofs (bytes an untrusted worker uploads): the first two bytes
// choose k and chunk_rows, the rest is the proof. A proof either fails to parse with a
// trellis::Error or parses into chunk proofs that encode back to the same bytes; a parsed proof is
// then verified against deterministic rows, which must give a verdict and never throw.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/proof/ holds the seeds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "toploc/proof.h"
#include "toploc/verify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trellis::toploc;
  if (size < 2) return 0;
  ProofConfig config;
  config.k = 1 + data[0] % 128;
  config.chunk_rows = 1 + data[1] % 32;
  const std::string_view proof(reinterpret_cast<const char*>(data) + 2, size - 2);
  std::vector<ChunkProof> chunks;
  try {
    chunks = parse_proof(proof, config, "fuzz proof");
  } catch (const trellis::Error&) {
    return 0;
  }
  std::string encoded;
  for (const ChunkProof& c : chunks) {
    if (c.coeffs.size() != config.k) __builtin_trap();
    encoded += encode_chunk_proof(c);
    (void)c.at(size);
  }
  if (encoded != proof) __builtin_trap();

  // Rows for the first few chunks (verifying is O(2^15) a chunk): finite bf16 values from an LCG.
  const size_t verified = std::min<size_t>(chunks.size(), 4);
  const size_t hidden = config.k / config.chunk_rows + 1;
  std::vector<uint16_t> rows(verified * config.chunk_rows * hidden);
  uint32_t state = data[0] * 256u + data[1];
  for (uint16_t& v : rows) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<uint16_t>((state >> 16) & 0xBF7F);  // exponent never all ones: finite
  }
  const Verdict verdict = verify_proof(proof.substr(0, verified * chunk_proof_bytes(config.k)),
                                       rows, hidden, Thresholds::strict(), config);
  if (verdict.accepted && !verdict.reason.empty()) __builtin_trap();
  return 0;
}
