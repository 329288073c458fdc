// Philox4x32-10, written from the published round function and key schedule (see rng.h).
#include "common/rng.h"

namespace trellis {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;   // multiplier for words 0 and 1
constexpr uint32_t kMul1 = 0xCD9E8D57u;   // multiplier for words 2 and 3
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // key increments: golden ratio, sqrt(3) - 1
constexpr uint32_t kWeyl1 = 0xBB67AE85u;
constexpr int kRounds = 10;

// One round: two 32x32 -> 64-bit products, their high halves xored with the other words and the
// round key, words permuted.
inline PhiloxCounter round(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

}  // namespace

std::array<uint32_t, 4> philox4x32(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = round(counter, key);
  }
  return counter;
}

double uniform53(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) | (lo >> 11);
  return static_cast<double>(bits) * 0x1p-53;
}

RandomStream::RandomStream(uint64_t seed, uint32_t stream)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
      counter_{0, 0, stream, 0} {}

uint32_t RandomStream::next_u32() {
  if (used_ == 4) {
    block_ = philox4x32(counter_, key_);
    if (++counter_[0] == 0) ++counter_[1];
    used_ = 0;
  }
  return block_[used_++];
}

uint64_t RandomStream::next_u64() {
  const uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

double RandomStream::uniform() {
  const uint32_t hi = next_u32();
  return uniform53(hi, next_u32());
}

int64_t RandomStream::uniform_int(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;  // 0 when the range is all of int64
  if (span == 0) return static_cast<int64_t>(next_u64());
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;  // accept draws below a multiple of span
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

bool RandomStream::bernoulli(double p) { return uniform() < p; }

}  // namespace trellis
