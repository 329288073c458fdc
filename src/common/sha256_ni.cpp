#include "common/sha256_ni.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define TRELLIS_SHA_TARGET __attribute__((target("sha,ssse3,sse4.1")))
#endif

namespace trellis {
namespace {

// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes.
alignas(16) constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// FIPS 180-4 §5.3.3: the initial hash value.
constexpr uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

}  // namespace

#if defined(__x86_64__)

bool sha_ni_supported() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ssse3 && sse41 && (b & (1u << 29));  // CPUID.(7,0):EBX[29] = SHA
}

TRELLIS_SHA_TARGET void sha256_ni_blocks(uint32_t state[8], const uint8_t* data, size_t blocks) {
  // sha256rnds2 keeps the eight working variables as two vectors, ABEF and CDGH, with A and C in
  // the highest lane (abef and cdgh here); H0..H7 are A..H. The other vectors' names list their
  // lanes from the lowest.
  const __m128i badc = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<__m128i*>(state)), 0xB1);
  const __m128i hgfe =
      _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<__m128i*>(state + 4)), 0x1B);
  __m128i abef = _mm_alignr_epi8(badc, hgfe, 8);     // lanes f e b a
  __m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);  // lanes h g d c
  // The message words are big-endian.
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);

  for (; blocks > 0; --blocks, data += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // W[4g .. 4g+3] of the last four groups, group g in w[g % 4]
    for (int i = 0; i < 4; ++i) {
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * i)),
                              byte_swap);
    }
    for (int g = 0; g < 16; ++g) {
      __m128i& wg = w[g % 4];
      if (g >= 4) {
        // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time: msg1 adds
        // s0(W[t-15]) to W[t-16], the aligned vector brings W[t-7], msg2 adds s1(W[t-2]).
        const __m128i& w_12 = w[(g + 3) % 4];  // W[4g-4 .. 4g-1]
        const __m128i w_7 = _mm_alignr_epi8(w_12, w[(g + 2) % 4], 4);
        wg = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(wg, w[(g + 1) % 4]), w_7),
                                  w_12);
      }
      __m128i wk =
          _mm_add_epi32(wg, _mm_load_si128(reinterpret_cast<const __m128i*>(kRound + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);  // rounds 4g, 4g+1: the new ABEF
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk);  // rounds 4g+2, 4g+3
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  const __m128i abef_rev = _mm_shuffle_epi32(abef, 0x1B);  // lanes a b e f
  const __m128i ghcd = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(abef_rev, ghcd, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(ghcd, abef_rev, 8));
}

#else

bool sha_ni_supported() { return false; }

void sha256_ni_blocks(uint32_t*, const uint8_t*, size_t) { std::abort(); }

#endif

Sha256NiState::Sha256NiState() { std::memcpy(h, kInitial, sizeof h); }

void Sha256NiState::update(const uint8_t* data, size_t size) {
  size_t held = bytes % 64;
  bytes += size;
  if (held > 0) {
    const size_t take = std::min(size, 64 - held);
    std::memcpy(buffer + held, data, take);
    data += take;
    size -= take;
    held += take;
    if (held < 64) return;
    sha256_ni_blocks(h, buffer, 1);
  }
  sha256_ni_blocks(h, data, size / 64);
  std::memcpy(buffer, data + size / 64 * 64, size % 64);
}

void Sha256NiState::finish(uint8_t digest[32]) {
  // FIPS 180-4 §5.1.1: a 1 bit, zeros up to 56 bytes mod 64, the length in bits (big-endian).
  const uint64_t bits = bytes * 8;
  uint8_t pad[72] = {0x80};
  const size_t zeros = (119 - bytes % 64) % 64;  // 1 + zeros + 8 = 0 (mod 64) past the data
  for (int i = 0; i < 8; ++i) pad[1 + zeros + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(pad, 1 + zeros + 8);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<uint8_t>(h[i] >> (24 - 8 * j));
  }
}

}  // namespace trellis
