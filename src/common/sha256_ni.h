// SHA-256 on the x86 SHA extensions (SHA-NI: Intel since Ice Lake and Goldmont, every AMD Zen),
// about four times the throughput of libsodium's portable code on the same core. Checkpoints,
// shards, deltas and rollout files are hashed on every publish, relay and fetch, so this is the
// CPU cost of SHARDCAST (docs/benchmarks.md). hashing.cpp uses it where the CPU has it and
// libsodium elsewhere; both give the FIPS 180-4 digest.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trellis {

// Whether this CPU runs the SHA extensions (and the SSSE3/SSE4.1 the code needs beside them).
bool sha_ni_supported();

// The compression function over `blocks` consecutive 64-byte blocks of `data`, updating `state`
// (H0..H7 of FIPS 180-4). Only where sha_ni_supported().
void sha256_ni_blocks(uint32_t state[8], const uint8_t* data, size_t blocks);

// A streaming SHA-256 over sha256_ni_blocks: whole blocks go straight to the extensions, a tail
// waits in `buffer` for the next update or the padding.
struct Sha256NiState {
  uint32_t h[8];
  uint64_t bytes = 0;  // fed so far
  uint8_t buffer[64];

  Sha256NiState();
  void update(const uint8_t* data, size_t size);
  void finish(uint8_t digest[32]);  // pads and writes the big-endian digest: call once
};

}  // namespace trellis
