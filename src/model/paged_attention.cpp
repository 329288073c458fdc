// Paged attention on CPU. Decoding streams every cached key and value once per step, so the
// kernels are built around memory: blocks are visited in order with the next ones prefetched, the
// query heads of a kv group share each block while it is in L1, and bf16 caches are laid out for
// AVX512-BF16 dot products (vdpbf16ps: two bf16 products per fp32 lane, no conversions).
#include "model/paged_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/fused_ops.h"
#include "model/vec_math.h"

#ifdef TRELLIS_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/cuda/paged_decode.h"
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRELLIS_HAVE_AVX512_PATH 1
// GCC 12's AVX-512 intrinsics pass a deliberately undefined register as the merge source.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// always_inline: the helpers must be compiled inside each kernel's target variant.
#define TRELLIS_INLINE inline __attribute__((always_inline))

namespace trellis::model {
namespace {

namespace vec = model::vec;
constexpr int64_t B = kBlockSize;

struct Shape {
  int64_t kv_heads, group, hd;  // group: query heads per kv head
};

// Blocks sit wherever the allocator put them, so the hardware prefetcher, which follows streams
// within a page, may start cold at a block: the kernels ask for the blocks they read next while
// they compute on the current ones (keys one group of blocks ahead, values kValueLead blocks).
template <typename T>
TRELLIS_INLINE void prefetch_block(const T* p, int64_t elements) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < elements * static_cast<int64_t>(sizeof(T)); off += 64) {
    __builtin_prefetch(c + off, 0, 3);
  }
}
constexpr int64_t kKeyGroup = 4;  // key blocks per pass: independent accumulator chains
constexpr int64_t kValueLead = 2;

// Calls f(b, m, block) for the value blocks of a sequence of n tokens in order (m: its tokens),
// with the block kValueLead ahead prefetched.
template <typename T, typename F>
TRELLIS_INLINE void for_each_value_block(const T* vc, const int32_t* table, int64_t n,
                                         int64_t stride, F&& f) {
  const int64_t nb = (n + B - 1) / B;
  for (int64_t b = 0; b < std::min(nb, kValueLead); ++b) {
    prefetch_block(vc + static_cast<int64_t>(table[b]) * stride, stride);
  }
  for (int64_t b = 0; b < nb; ++b) {
    if (b + kValueLead < nb) {
      prefetch_block(vc + static_cast<int64_t>(table[b + kValueLead]) * stride, stride);
    }
    f(b, std::min(B, n - b * B), static_cast<int64_t>(table[b]));
  }
}

// Scratch of one thread, reused across tokens.
struct Scratch {
  std::vector<float> scores, acc, qf, inv;
  std::vector<uint16_t> weights;  // bf16 path: softmax weights as bf16
};

// ---- fp32 caches: keys [block, kv, hd, B], values [block, kv, B, hd]; fp32 FMAs. ----

// Scores of one query head against `nb` key blocks from block index b0: sc[j] = q . k_j.
// Portable version; the AVX-512 one keeps four blocks' scores in registers.
TRELLIS_INLINE void block_scores(const float* qh, const float* kc, const int32_t* table, int64_t b0,
                                 int64_t nb, int64_t stride, int64_t hd, float* out) {
  for (int64_t b = b0; b < b0 + nb; ++b) {
    const float* kb = kc + static_cast<int64_t>(table[b]) * stride;
    float sc[B] = {};
    for (int64_t d = 0; d < hd; ++d) {
      const float qd = qh[d];
      const float* kr = kb + d * B;
      for (int64_t j = 0; j < B; ++j) sc[j] += qd * kr[j];
    }
    std::memcpy(out + b * B, sc, sizeof(sc));
  }
}

// acc[0 .. hd) += Σ_j w[j] * v_j for the m value rows of one block (rows hd apart).
TRELLIS_INLINE void block_values(const float* w, const float* vb, int64_t m, int64_t hd,
                                 float* acc) {
  for (int64_t j = 0; j < m; ++j) {
    const float* vr = vb + j * hd;
    for (int64_t d = 0; d < hd; ++d) acc[d] += w[j] * vr[d];
  }
}

#ifdef TRELLIS_HAVE_AVX512_PATH
#define TRELLIS_AVX512 __attribute__((target("avx512f,avx512bw")))

// Four blocks at a time: four independent FMA chains hide the FMA latency (GCC leaves the portable
// loop scalar: it unrolls the 16 lanes instead of vectorising them).
TRELLIS_AVX512 void block_scores_avx512(const float* qh, const float* kc, const int32_t* table,
                                        int64_t b0, int64_t nb, int64_t stride, int64_t hd,
                                        float* out) {
  int64_t b = b0;
  for (; b + 4 <= b0 + nb; b += 4) {
    const float* k0 = kc + static_cast<int64_t>(table[b]) * stride;
    const float* k1 = kc + static_cast<int64_t>(table[b + 1]) * stride;
    const float* k2 = kc + static_cast<int64_t>(table[b + 2]) * stride;
    const float* k3 = kc + static_cast<int64_t>(table[b + 3]) * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t d = 0; d < hd; ++d) {
      const __m512 qd = _mm512_set1_ps(qh[d]);
      a0 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k0 + d * B), a0);
      a1 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k1 + d * B), a1);
      a2 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k2 + d * B), a2);
      a3 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k3 + d * B), a3);
    }
    _mm512_storeu_ps(out + b * B, a0);
    _mm512_storeu_ps(out + (b + 1) * B, a1);
    _mm512_storeu_ps(out + (b + 2) * B, a2);
    _mm512_storeu_ps(out + (b + 3) * B, a3);
  }
  for (; b < b0 + nb; ++b) {
    const float* k0 = kc + static_cast<int64_t>(table[b]) * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;  // two chains over even and odd d
    int64_t d = 0;
    for (; d + 2 <= hd; d += 2) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(qh[d]), _mm512_loadu_ps(k0 + d * B), a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(qh[d + 1]), _mm512_loadu_ps(k0 + (d + 1) * B), a1);
    }
    if (d < hd) a0 = _mm512_fmadd_ps(_mm512_set1_ps(qh[d]), _mm512_loadu_ps(k0 + d * B), a0);
    _mm512_storeu_ps(out + b * B, _mm512_add_ps(a0, a1));
  }
}

template <int kChunks>
TRELLIS_AVX512 void block_values_fixed(const float* w, const float* vb, int64_t m, float* acc) {
  constexpr int64_t hd = 16 * kChunks;
  __m512 a[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  for (int64_t j = 0; j < m; ++j) {
    const __m512 wj = _mm512_set1_ps(w[j]);
    for (int c = 0; c < kChunks; ++c)
      a[c] = _mm512_fmadd_ps(wj, _mm512_loadu_ps(vb + j * hd + 16 * c), a[c]);
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

TRELLIS_AVX512 void block_values_avx512(const float* w, const float* vb, int64_t m, int64_t hd,
                                        float* acc) {
  switch (hd) {
    case 64:
      return block_values_fixed<4>(w, vb, m, acc);
    case 128:
      return block_values_fixed<8>(w, vb, m, acc);
    default:
      block_values(w, vb, m, hd, acc);
  }
}
#endif

// One query token, all heads. Blocks are visited in order and, within a block, kv head by kv head,
// so each block's keys (then values) stream from memory once and contiguously; the query heads of
// a group share each key/value load from L1.
template <bool kAvx512>
TRELLIS_INLINE void attend_token_f32(const float* q, const float* kc, const float* vc,
                                     const int32_t* table, int64_t n, const Shape& s, Scratch& w,
                                     float* out) {
  const int64_t G = s.group, KV = s.kv_heads, H = KV * G, hd = s.hd;
  const int64_t nb = (n + B - 1) / B, npad = nb * B;
  w.scores.resize(H * npad);
  float *scores = w.scores.data(), *acc = w.acc.data(), *qf = w.qf.data(), *inv = w.inv.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < H * hd; ++i) qf[i] = q[i] * scale;
  const int64_t stride = KV * hd * B;  // between consecutive blocks of one kv head
  for (int64_t b0 = 0; b0 < nb; b0 += kKeyGroup) {
    const int64_t nblk = std::min(kKeyGroup, nb - b0);
    for (int64_t b = b0 + kKeyGroup; b < std::min(nb, b0 + 2 * kKeyGroup); ++b) {
      prefetch_block(kc + static_cast<int64_t>(table[b]) * stride, stride);
    }
    for (int64_t h = 0; h < H; ++h) {
      const float* kg = kc + (h / G) * hd * B;
#ifdef TRELLIS_HAVE_AVX512_PATH
      if constexpr (kAvx512) {
        block_scores_avx512(qf + h * hd, kg, table, b0, nblk, stride, hd, scores + h * npad);
        continue;
      }
#endif
      block_scores(qf + h * hd, kg, table, b0, nblk, stride, hd, scores + h * npad);
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    float* sh = scores + h * npad;
    inv[h] = 1.0f / vec::exp_scaled_sum(sh, 1.0f, vec::max_value(sh, n), n);
  }
  std::fill(acc, acc + H * hd, 0.0f);
  for_each_value_block(vc, table, n, stride, [&](int64_t b, int64_t m, int64_t block) {
    for (int64_t h = 0; h < H; ++h) {
      const float* vb = vc + (block * KV + h / G) * B * hd;
      const float* wh = scores + h * npad + b * B;
#ifdef TRELLIS_HAVE_AVX512_PATH
      if constexpr (kAvx512) {
        block_values_avx512(wh, vb, m, hd, acc + h * hd);
        continue;
      }
#endif
      block_values(wh, vb, m, hd, acc + h * hd);
    }
  });
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < hd; ++d) out[h * hd + d] = acc[h * hd + d] * inv[h];
}

// ---- bf16 caches, pair-interleaved (see paged_attention.h); AVX512-BF16 dot products. ----

#ifdef TRELLIS_HAVE_AVX512_PATH
#define TRELLIS_BF16DP __attribute__((target("avx512f,avx512bw,avx512bf16")))

// Two bf16 values as one 32-bit lane (the first in the low half), for a broadcast.
TRELLIS_INLINE uint32_t pair_at(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Unscaled scores of one query head against kBlocks key blocks from block index b0. A key block
// of one kv head is [hd / 2][B][2]: each 32-lane vector holds dims (2i, 2i+1) of all B tokens, and
// one vdpbf16ps adds both products to each token's score. Two chains per block (even and odd i)
// hide the instruction's latency.
template <int kBlocks>
TRELLIS_BF16DP void scores_dp(const uint16_t* qh, const uint16_t* kc, const int32_t* table,
                              int64_t b0, int64_t stride, int64_t hd, float* out) {
  const uint16_t* kb[kBlocks];
  __m512 acc[kBlocks][2];
  for (int i = 0; i < kBlocks; ++i) {
    kb[i] = kc + static_cast<int64_t>(table[b0 + i]) * stride;
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < hd / 2; p += 2) {
    const auto q0 = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_at(qh + 2 * p)));
    const auto q1 = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_at(qh + 2 * p + 2)));
    for (int i = 0; i < kBlocks; ++i) {
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], (__m512bh)_mm512_loadu_si512(kb[i] + p * 2 * B), q0);
      acc[i][1] =
          _mm512_dpbf16_ps(acc[i][1], (__m512bh)_mm512_loadu_si512(kb[i] + (p + 1) * 2 * B), q1);
    }
  }
  for (int i = 0; i < kBlocks; ++i) {
    _mm512_storeu_ps(out + (b0 + i) * B, _mm512_add_ps(acc[i][0], acc[i][1]));
  }
}

TRELLIS_BF16DP void block_scores_dp(const uint16_t* qh, const uint16_t* kc, const int32_t* table,
                                    int64_t b0, int64_t nb, int64_t stride, int64_t hd,
                                    float* out) {
  switch (nb) {
    case 4:
      return scores_dp<4>(qh, kc, table, b0, stride, hd, out);
    case 3:
      return scores_dp<3>(qh, kc, table, b0, stride, hd, out);
    case 2:
      return scores_dp<2>(qh, kc, table, b0, stride, hd, out);
    default:
      return scores_dp<1>(qh, kc, table, b0, stride, hd, out);
  }
}

// acc[0 .. hd) += Σ_j w[j] v_j over the m tokens of one value block. A value block of one kv head
// is [B / 2][hd][2]: each 32-lane vector holds tokens (2i, 2i+1) of 16 dims, and one vdpbf16ps
// adds both tokens' weighted values. The weights are bf16 (as in FlashAttention's P·V); when m is
// odd, the last pair's second token lies past the sequence: its lanes are masked to zero so that
// whatever the unwritten slot holds (NaN included) never reaches the sum.
template <int kChunks>
TRELLIS_BF16DP void values_dp(const uint16_t* wb, const uint16_t* vb, int64_t m, float* acc) {
  constexpr int64_t hd = 16 * kChunks;
  __m512 a[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  const int64_t full = m / 2;
  for (int64_t i = 0; i < full; ++i) {
    const auto wi = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair_at(wb + 2 * i)));
    const uint16_t* vr = vb + i * hd * 2;
    for (int c = 0; c < kChunks; ++c) {
      a[c] = _mm512_dpbf16_ps(a[c], (__m512bh)_mm512_loadu_si512(vr + 32 * c), wi);
    }
  }
  if (m % 2 != 0) {
    const auto wi = (__m512bh)_mm512_set1_epi32(static_cast<int>(wb[2 * full]));
    const uint16_t* vr = vb + full * hd * 2;
    for (int c = 0; c < kChunks; ++c) {
      const __m512i v = _mm512_maskz_loadu_epi16(0x55555555u, vr + 32 * c);  // even lanes
      a[c] = _mm512_dpbf16_ps(a[c], (__m512bh)v, wi);
    }
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

template <int kChunks>
TRELLIS_BF16DP void attend_token_dp(const uint16_t* q, const uint16_t* kc, const uint16_t* vc,
                                    const int32_t* table, int64_t n, const Shape& s, Scratch& w,
                                    uint16_t* out) {
  constexpr int64_t hd = 16 * kChunks;
  const int64_t G = s.group, KV = s.kv_heads, H = KV * G;
  const int64_t nb = (n + B - 1) / B, npad = nb * B;
  w.scores.resize(H * npad);
  w.weights.resize(H * npad);
  float *scores = w.scores.data(), *acc = w.acc.data(), *inv = w.inv.data();
  uint16_t* weights = w.weights.data();
  const int64_t stride = KV * hd * B;
  for (int64_t b0 = 0; b0 < nb; b0 += kKeyGroup) {
    const int64_t nblk = std::min(kKeyGroup, nb - b0);
    for (int64_t b = b0 + kKeyGroup; b < std::min(nb, b0 + 2 * kKeyGroup); ++b) {
      prefetch_block(kc + static_cast<int64_t>(table[b]) * stride, stride);
    }
    for (int64_t h = 0; h < H; ++h) {
      block_scores_dp(q + h * hd, kc + (h / G) * hd * B, table, b0, nblk, stride, hd,
                      scores + h * npad);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t h = 0; h < H; ++h) {
    float* sh = scores + h * npad;
    const float mx = vec::max_value(sh, n);
    inv[h] = 1.0f / vec::exp_scaled_sum(sh, scale, mx * scale, n);
    vec::float_to_bf16(sh, weights + h * npad, n);
  }
  std::fill(acc, acc + H * hd, 0.0f);
  for_each_value_block(vc, table, n, stride, [&](int64_t b, int64_t m, int64_t block) {
    for (int64_t h = 0; h < H; ++h) {
      const uint16_t* vb = vc + (block * KV + h / G) * B * hd;
      values_dp<kChunks>(weights + h * npad + b * B, vb, m, acc + h * hd);
    }
  });
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < hd; ++d) acc[h * hd + d] *= inv[h];
  vec::float_to_bf16(acc, out, H * hd);
}
#endif

struct Args {
  const void *q, *kc, *vc;
  const int32_t* tables;
  int64_t max_blocks;
  const int64_t *positions, *token_seq;
  Shape shape;
  void* out;
};

// Attends tokens [first, first + count) with `attend(q, table, n, scratch, out)`.
template <typename T, typename F>
TRELLIS_INLINE void attend_range(int64_t first, int64_t count, const Args& a, F&& attend) {
  const int64_t H = a.shape.kv_heads * a.shape.group, hd = a.shape.hd;
  Scratch w;
  w.acc.resize(H * hd);
  w.qf.resize(H * hd);
  w.inv.resize(H);
  const T* q = static_cast<const T*>(a.q);
  T* out = static_cast<T*>(a.out);
  for (int64_t t = first; t < first + count; ++t) {
    attend(q + t * H * hd, a.tables + a.token_seq[t] * a.max_blocks, a.positions[t] + 1, w,
           out + t * H * hd);
  }
}

TRELLIS_VECTOR_CLONES
void attend_f32(int64_t first, int64_t count, const Args& a) {
  const auto *kc = static_cast<const float*>(a.kc), *vc = static_cast<const float*>(a.vc);
  attend_range<float>(first, count, a,
                      [&](const float* q, const int32_t* table, int64_t n, Scratch& w, float* o) {
                        attend_token_f32<false>(q, kc, vc, table, n, a.shape, w, o);
                      });
}

#ifdef TRELLIS_HAVE_AVX512_PATH
TRELLIS_AVX512 void attend_f32_avx512(int64_t first, int64_t count, const Args& a) {
  const auto *kc = static_cast<const float*>(a.kc), *vc = static_cast<const float*>(a.vc);
  attend_range<float>(first, count, a,
                      [&](const float* q, const int32_t* table, int64_t n, Scratch& w, float* o) {
                        attend_token_f32<true>(q, kc, vc, table, n, a.shape, w, o);
                      });
}

template <int kChunks>
TRELLIS_BF16DP void attend_bf16_dp(int64_t first, int64_t count, const Args& a) {
  const auto* kc = static_cast<const uint16_t*>(a.kc);
  const auto* vc = static_cast<const uint16_t*>(a.vc);
  attend_range<uint16_t>(
      first, count, a,
      [&](const uint16_t* q, const int32_t* table, int64_t n, Scratch& w, uint16_t* o) {
        attend_token_dp<kChunks>(q, kc, vc, table, n, a.shape, w, o);
      });
}

bool has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}
#endif

// Whether the fused kernel serves a cache of this dtype and head size on this CPU; the composed
// path serves the rest.
bool kernel_supports(torch::ScalarType dtype, int64_t hd) {
  if (dtype == torch::kFloat32) return true;
#ifdef TRELLIS_HAVE_AVX512_PATH
  return dtype == torch::kBFloat16 && (hd == 32 || hd == 64 || hd == 128) && vec::has_avx512_bf16();
#else
  return false;
#endif
}

// Scatters the new tokens' keys and values into their slots, in the cache's layout.
void write_slots_f32(const float* k, const float* v, float* kc, float* vc, const int64_t* slots,
                     int64_t tokens, int64_t kv_heads, int64_t hd) {
  at::parallel_for(0, tokens, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t blk = slots[t] / B, off = slots[t] % B;
      for (int64_t g = 0; g < kv_heads; ++g) {
        const float* kr = k + (t * kv_heads + g) * hd;
        float* kb = kc + (blk * kv_heads + g) * hd * B;
        for (int64_t d = 0; d < hd; ++d) kb[d * B + off] = kr[d];
        std::memcpy(vc + ((blk * kv_heads + g) * B + off) * hd, v + (t * kv_heads + g) * hd,
                    hd * sizeof(float));
      }
    }
  });
}

void write_slots_bf16(const uint16_t* k, const uint16_t* v, uint16_t* kc, uint16_t* vc,
                      const int64_t* slots, int64_t tokens, int64_t kv_heads, int64_t hd) {
  at::parallel_for(0, tokens, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t blk = slots[t] / B, off = slots[t] % B;
      for (int64_t g = 0; g < kv_heads; ++g) {
        const uint16_t* kr = k + (t * kv_heads + g) * hd;
        const uint16_t* vr = v + (t * kv_heads + g) * hd;
        uint16_t* kb = kc + (blk * kv_heads + g) * hd * B;
        uint16_t* vb = vc + (blk * kv_heads + g) * B * hd;
        for (int64_t d = 0; d < hd; ++d) {
          kb[((d / 2) * B + off) * 2 + d % 2] = kr[d];
          vb[((off / 2) * hd + d) * 2 + off % 2] = vr[d];
        }
      }
    }
  });
}

void check_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& key_cache,
                const PagedBatch& batch) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && q.size(0) == k.size(0) &&
                  q.size(1) % k.size(1) == 0 && q.size(2) == k.size(2),
              "paged_attention: q [T, heads, hd] and k, v [T, kv_heads, hd] expected");
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.size(1) == k.size(1) &&
                  key_cache.size(2) == k.size(2) && key_cache.size(3) == kBlockSize,
              "paged_attention: key cache [blocks, kv_heads, hd, ", kBlockSize, "] expected");
  TORCH_CHECK(q.scalar_type() == key_cache.scalar_type(),
              "paged_attention: q and the cache must share a dtype");
  TORCH_CHECK(batch.slots.numel() == q.size(0) && batch.positions.numel() == q.size(0) &&
                  batch.token_seq.numel() == q.size(0),
              "paged_attention: one slot, position and sequence per token");
  TORCH_CHECK(key_cache.scalar_type() != torch::kBFloat16 || k.size(2) % 2 == 0,
              "paged_attention: bf16 caches need an even head_dim");
}

}  // namespace

torch::Tensor paged_attention(const torch::Tensor& q_in, const torch::Tensor& k_in,
                              const torch::Tensor& v_in, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const PagedBatch& batch) {
  check_args(q_in, k_in, key_cache, batch);
  const int64_t hd = q_in.size(2);
  if (!paged_kernel_supports(q_in)) {
    return composed::paged_attention(q_in, k_in, v_in, key_cache, value_cache, batch);
  }
  auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  auto slots = batch.slots.to(torch::kInt64).contiguous();
  auto positions = batch.positions.to(torch::kInt64).contiguous();
  auto token_seq = batch.token_seq.to(torch::kInt64).contiguous();
  auto tables = batch.block_tables.to(torch::kInt32).contiguous();
  const int64_t T = q.size(0), H = q.size(1), KV = k.size(1);
  const bool bf16 = q.scalar_type() == torch::kBFloat16;
  if (bf16) {
    write_slots_bf16(reinterpret_cast<const uint16_t*>(k.data_ptr()),
                     reinterpret_cast<const uint16_t*>(v.data_ptr()),
                     reinterpret_cast<uint16_t*>(key_cache.data_ptr()),
                     reinterpret_cast<uint16_t*>(value_cache.data_ptr()), slots.data_ptr<int64_t>(),
                     T, KV, hd);
  } else {
    write_slots_f32(k.data_ptr<float>(), v.data_ptr<float>(), key_cache.data_ptr<float>(),
                    value_cache.data_ptr<float>(), slots.data_ptr<int64_t>(), T, KV, hd);
  }
  auto out = torch::empty({T, H * hd}, q.options());
  const Args a{q.data_ptr(),
               key_cache.data_ptr(),
               value_cache.data_ptr(),
               tables.data_ptr<int32_t>(),
               tables.size(1),
               positions.data_ptr<int64_t>(),
               token_seq.data_ptr<int64_t>(),
               Shape{KV, H / KV, hd},
               out.data_ptr()};
  at::parallel_for(0, T, 1, [&](int64_t b, int64_t e) {
#ifdef TRELLIS_HAVE_AVX512_PATH
    if (bf16) {
      // kernel_supports() admitted only these head sizes.
      if (hd == 32) return attend_bf16_dp<2>(b, e - b, a);
      return hd == 64 ? attend_bf16_dp<4>(b, e - b, a) : attend_bf16_dp<8>(b, e - b, a);
    }
    if (has_avx512()) return attend_f32_avx512(b, e - b, a);
#endif
    attend_f32(b, e - b, a);
  });
  return out;
}

bool paged_kernel_supports(const torch::Tensor& q) {
  return q.device().is_cpu() && kernel_supports(q.scalar_type(), q.size(-1));
}

torch::Tensor paged_packed_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const std::vector<int64_t>& seq_lens) {
  const int64_t T = q.size(0), S = static_cast<int64_t>(seq_lens.size());
  int64_t blocks = 0, max_blocks = 1;
  for (const int64_t len : seq_lens) {
    blocks += (len + B - 1) / B;
    max_blocks = std::max(max_blocks, (len + B - 1) / B);
  }
  // Each sample's blocks follow the previous sample's; the slots past a sample's end are never
  // read into a result (the kernels stop at each query's position), zeros keep them defined.
  const auto pool = [&](std::vector<int64_t> shape) { return torch::zeros(shape, k.options()); };
  auto key_pool = pool({blocks, k.size(1), k.size(2), B});
  auto value_pool = pool({blocks, k.size(1), B, k.size(2)});
  auto slots = torch::empty({T}, torch::kInt64), positions = torch::empty({T}, torch::kInt64);
  auto token_seq = torch::empty({T}, torch::kInt64);
  auto tables = torch::zeros({S, max_blocks}, torch::kInt32);
  int64_t *sp = slots.data_ptr<int64_t>(), *pp = positions.data_ptr<int64_t>();
  int64_t* qp = token_seq.data_ptr<int64_t>();
  int32_t* tp = tables.data_ptr<int32_t>();
  int64_t t = 0, first_block = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t len = seq_lens[s], nb = (len + B - 1) / B;
    for (int64_t b = 0; b < nb; ++b) tp[s * max_blocks + b] = static_cast<int32_t>(first_block + b);
    for (int64_t j = 0; j < len; ++j, ++t) {
      sp[t] = first_block * B + j;
      pp[t] = j;
      qp[t] = s;
    }
    first_block += nb;
  }
  TORCH_CHECK(t == T, "paged_packed_attention: seq_lens must sum to the tokens of q");
  return paged_attention(q, k, v, key_pool, value_pool, {slots, positions, token_seq, tables});
}

bool paged_decode_plans_on_device(torch::Device device, torch::ScalarType dtype, int64_t head_dim) {
#ifdef TRELLIS_CUDA_KERNELS
  return device.is_cuda() && (dtype == torch::kFloat32 || dtype == torch::kBFloat16) &&
         cuda::paged_decode_serves(head_dim);
#else
  (void)device, (void)dtype, (void)head_dim;
  return false;
#endif
}

namespace composed {

using Index = std::vector<at::indexing::TensorIndex>;

// Index targets in which one token's keys or values are a single element of the leading dims:
// keys by (block, offset); values by (block, offset) for fp32 and (block, offset / 2, offset % 2)
// for bf16's pair-interleaved layout.
Index key_index(const torch::Tensor& slot) { return {slot.div(B, "floor"), slot.remainder(B)}; }
Index value_index(const torch::Tensor& slot, bool bf16) {
  if (!bf16) return key_index(slot);
  auto off = slot.remainder(B);
  return {slot.div(B, "floor"), off.div(2, "floor"), off.remainder(2)};
}

struct TokenViews {
  torch::Tensor keys;    // [N, B, KV, hd] or bf16 [N, B, KV, hd / 2, 2]
  torch::Tensor values;  // [N, B, KV, hd] or bf16 [N, B / 2, 2, KV, hd]
  bool bf16;

  // The keys and values [..., KV, hd] of the tokens at the slots behind the two indexes.
  std::pair<torch::Tensor, torch::Tensor> gather(const Index& keys_at,
                                                 const Index& values_at) const {
    auto k = keys.index(keys_at), v = values.index(values_at);
    if (bf16) k = k.flatten(-2);  // [..., KV, hd / 2, 2] -> [..., KV, hd]
    return {k, v};
  }
};

TokenViews token_views(const torch::Tensor& key_cache, const torch::Tensor& value_cache) {
  const int64_t N = key_cache.size(0), KV = key_cache.size(1), hd = key_cache.size(2);
  if (key_cache.scalar_type() != torch::kBFloat16) {
    return {key_cache.permute({0, 3, 1, 2}), value_cache.permute({0, 2, 1, 3}), false};
  }
  return {key_cache.view({N, KV, hd / 2, B, 2}).permute({0, 3, 1, 2, 4}),
          value_cache.view({N, KV, B / 2, hd, 2}).permute({0, 2, 4, 1, 3}), true};
}

// The slots of positions 0 .. length - 1 of the sequences of tables [S, max_blocks]: [S, length].
torch::Tensor token_slots(const torch::Tensor& tables, int64_t length) {
  auto idx = torch::arange(length, tables.options().dtype(torch::kInt64));
  auto blocks = tables.gather(1, idx.div(B, "floor").unsqueeze(0).expand({tables.size(0), length}));
  return blocks.to(torch::kInt64) * B + idx.remainder(B);
}

// What the composed path derives from a batch alone, on the device: the same for every layer, so
// the first layer builds it and the others reuse it. Each layer would otherwise copy the batch to
// the device and rebuild these indexes: about twenty small copies and kernels a layer, which on a
// GPU cost as much as the attention of a decode step.
struct Plan {
  // What it was made for: a batch's plan is rebuilt when a layer differs in one of these.
  torch::Device device = torch::kCPU;
  bool bf16 = false;
  int64_t kv_elements = 0;  // kv_heads x head_dim of one token
  int64_t decode_chunk_elements = 0;

  Index write_keys, write_values;  // the slots receiving the new tokens' keys and values
  // A run of consecutive tokens of one sequence at consecutive positions (a prefill chunk, its
  // own causal block): tokens [first, first + count) at positions from q_offset.
  struct Run {
    int64_t first, count, q_offset;
    Index keys, values;  // its sequence's slots of positions 0 .. q_offset + count - 1
  };
  std::vector<Run> runs;
  // Decode tokens (runs of one) of one padded, masked batch; with the CUDA decode kernel, all of
  // them in one chunk that the kernel reads through the block tables.
  bool decode_kernel = false;
  struct DecodeChunk {
    torch::Tensor rows;      // int64 [D]: the tokens
    Index keys{}, values{};  // the slots of positions 0 .. length - 1 of each token's sequence
    torch::Tensor future{};  // bool [D, length]: the positions past each token's own
    torch::Tensor positions{}, sequences{};  // the kernel's: int64 [D], each token's position
                                             // and row of the block tables
  };
  std::vector<DecodeChunk> decode;
  torch::Tensor tables;  // int32 [S, max_blocks]: the block tables on the device
  torch::Tensor row_of;  // int64 [T]: each token's row in the parts' concatenation; undefined
                         // when the parts are already in token order
};

std::shared_ptr<const Plan> make_plan(const PagedBatch& batch, torch::Device dev, bool bf16,
                                      int64_t kv_elements, int64_t decode_chunk_elements,
                                      bool decode_kernel) {
  auto plan = std::make_shared<Plan>();
  plan->device = dev;
  plan->bf16 = bf16;
  plan->kv_elements = kv_elements;
  plan->decode_chunk_elements = decode_chunk_elements;
  plan->decode_kernel = decode_kernel;
  const auto slots = batch.slots.to(dev, torch::kInt64);
  plan->write_keys = key_index(slots);
  plan->write_values = value_index(slots, bf16);
  if (decode_kernel && batch.decode_only) {
    // One chunk of every token, in order, from the batch's own device tensors: nothing here
    // waits on the host.
    plan->tables = batch.block_tables.to(dev, torch::kInt32).contiguous();
    plan->decode.push_back({.rows = torch::arange(slots.numel(), slots.options()),
                            .positions = batch.positions.to(dev, torch::kInt64).contiguous(),
                            .sequences = batch.token_seq.to(dev, torch::kInt64).contiguous()});
    return plan;
  }

  auto positions = batch.positions.to(torch::kCPU, torch::kInt64).contiguous();
  auto token_seq = batch.token_seq.to(torch::kCPU, torch::kInt64).contiguous();
  auto tables = batch.block_tables.to(dev, torch::kInt32).contiguous();
  plan->tables = tables;
  const int64_t T = positions.numel();
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* seq = token_seq.data_ptr<int64_t>();
  std::vector<int64_t> order, decode;  // order: the token behind each row of the parts
  for (int64_t t = 0; t < T;) {
    int64_t e = t + 1;
    while (e < T && seq[e] == seq[t] && pos[e] == pos[e - 1] + 1) ++e;
    if (e - t == 1) {
      decode.push_back(t++);
      continue;
    }
    const auto run_slots = token_slots(tables.narrow(0, seq[t], 1), pos[e - 1] + 1)[0];
    plan->runs.push_back({t, e - t, pos[t], key_index(run_slots), value_index(run_slots, bf16)});
    for (; t < e; ++t) order.push_back(t);
  }
  if (decode_kernel && !decode.empty()) {
    // In token order: the kernel takes any lengths at once, and a step of decodes alone then
    // needs no reordering of its queries or of the output.
    const auto rows = torch::tensor(decode, torch::kInt64);
    plan->decode.push_back({.rows = rows.to(dev),
                            .positions = positions.index_select(0, rows).to(dev),
                            .sequences = token_seq.index_select(0, rows).to(dev)});
    order.insert(order.end(), decode.begin(), decode.end());
    decode.clear();
  }
  std::stable_sort(decode.begin(), decode.end(),
                   [&](int64_t a, int64_t b) { return pos[a] < pos[b]; });
  for (size_t i = 0; i < decode.size();) {
    size_t j = i + 1;
    while (j < decode.size() &&
           static_cast<int64_t>(j + 1 - i) * (pos[decode[j]] + 1) * kv_elements <=
               decode_chunk_elements) {
      ++j;
    }
    const std::vector<int64_t> chunk(decode.begin() + i, decode.begin() + j);
    const int64_t length = pos[chunk.back()] + 1;
    const auto rows = torch::tensor(chunk, torch::kInt64);
    const auto chunk_pos = positions.index_select(0, rows).to(dev);
    const auto chunk_slots =
        token_slots(tables.index_select(0, token_seq.index_select(0, rows).to(dev)), length);
    plan->decode.push_back(
        {rows.to(dev), key_index(chunk_slots), value_index(chunk_slots, bf16),
         torch::arange(length, chunk_pos.options()).unsqueeze(0) > chunk_pos.unsqueeze(1)});
    order.insert(order.end(), chunk.begin(), chunk.end());
    i = j;
  }
  if (!std::is_sorted(order.begin(), order.end())) {
    std::vector<int64_t> row_of(T);
    for (int64_t r = 0; r < T; ++r) row_of[order[r]] = r;
    plan->row_of = torch::tensor(row_of, torch::kInt64).to(dev);
  }
  return plan;
}

// The attention of queries q [D, H, hd] over keys and values [D, L, KV, hd] of their sequences'
// positions 0 .. L - 1, `future` [D, L] masking the positions past each query's own, with the
// rounding of fused::composed::cached_attention: scores in the cache's dtype, softmax in fp32,
// probabilities back in the cache's dtype.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& keys,
                               torch::Tensor vals, const torch::Tensor& future) {
  const int64_t D = q.size(0), H = q.size(1), hd = q.size(2), L = keys.size(1), KV = keys.size(2);
  // Padding past a sequence's end reads whatever the pool holds there (stale or never written):
  // its probability is zero, and zeroed values keep a NaN there out of the sum.
  vals = vals.masked_fill(future.view({D, L, 1, 1}), 0);
  auto qg = q.view({D, KV, H / KV, hd});
  auto scores = torch::matmul(qg, keys.permute({0, 2, 3, 1})).to(torch::kFloat32) /
                std::sqrt(static_cast<double>(hd));  // [D, KV, group, L]
  auto probs = torch::softmax(scores.masked_fill(future.view({D, 1, 1, L}), -INFINITY), -1)
                   .to(q.scalar_type());
  return torch::matmul(probs, vals.permute({0, 2, 1, 3})).reshape({D, H * hd});
}

// Whether the CUDA decode kernel serves these queries and caches.
bool decode_kernel_serves(const torch::Tensor& q, const torch::Tensor& key_cache,
                          const torch::Tensor& value_cache) {
  return paged_decode_plans_on_device(q.device(), q.scalar_type(), q.size(2)) &&
         key_cache.is_contiguous() && value_cache.is_contiguous();
}

#ifdef TRELLIS_CUDA_KERNELS
static_assert(kBlockSize == 16, "cuda/paged_decode.cu reads blocks of 16 tokens");

// The decode tokens `chunk` of q [T, H, hd] through the kernel: [D, H * hd].
torch::Tensor kernel_decode(const torch::Tensor& q, const torch::Tensor& key_cache,
                            const torch::Tensor& value_cache, const Plan& plan,
                            const Plan::DecodeChunk& chunk) {
  const c10::cuda::CUDAGuard on_the_device(q.device());  // the launch goes to the current one
  // Every token a decode (a step without prefill): the rows are all of q, in order.
  const bool all = chunk.rows.numel() == q.size(0);
  const auto queries = (all ? q : q.index_select(0, chunk.rows)).contiguous();
  auto out = torch::empty({queries.size(0), queries.size(1) * queries.size(2)}, queries.options());
  cuda::PagedDecodeArgs a;
  a.q = queries.data_ptr();
  a.key_cache = key_cache.data_ptr();
  a.value_cache = value_cache.data_ptr();
  a.out = out.data_ptr();
  a.positions = chunk.positions.data_ptr<int64_t>();
  a.sequences = chunk.sequences.data_ptr<int64_t>();
  a.block_tables = plan.tables.data_ptr<int32_t>();
  a.max_blocks = plan.tables.size(1);
  a.tokens = queries.size(0);
  a.heads = queries.size(1);
  a.kv_heads = key_cache.size(1);
  a.head_dim = queries.size(2);
  a.bf16 = plan.bf16;
  a.stream = c10::cuda::getCurrentCUDAStream().stream();
  const char* error = cuda::paged_decode(a);
  TORCH_CHECK(error == nullptr, "paged_attention: the CUDA decode kernel failed: ", error);
  return out;
}
#endif

torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const PagedBatch& batch,
                              int64_t decode_chunk_elements) {
  check_args(q, k, key_cache, batch);
  const int64_t T = q.size(0), KV = k.size(1), hd = k.size(2);
  auto views = token_views(key_cache, value_cache);
  const bool decode_kernel = decode_kernel_serves(q, key_cache, value_cache);
  auto& plan = batch.composed_plan;
  if (!plan || plan->device != q.device() || plan->bf16 != views.bf16 ||
      plan->kv_elements != KV * hd || plan->decode_chunk_elements != decode_chunk_elements ||
      plan->decode_kernel != decode_kernel) {
    plan = make_plan(batch, q.device(), views.bf16, KV * hd, decode_chunk_elements, decode_kernel);
  }
  views.keys.index_put_(plan->write_keys, views.bf16 ? k.reshape({T, KV, hd / 2, 2}) : k);
  views.values.index_put_(plan->write_values, v);

  std::vector<torch::Tensor> parts;
  for (const auto& run : plan->runs) {
    auto [keys, vals] = views.gather(run.keys, run.values);  // [n, KV, hd]
    parts.push_back(
        model::fused::composed::cached_attention(q.narrow(0, run.first, run.count).unsqueeze(0),
                                                 keys.permute({1, 0, 2}).unsqueeze(0),
                                                 vals.permute({1, 0, 2}).unsqueeze(0), run.q_offset)
            .squeeze(0));
  }
  for (const auto& chunk : plan->decode) {
#ifdef TRELLIS_CUDA_KERNELS
    if (plan->decode_kernel) {
      parts.push_back(kernel_decode(q, key_cache, value_cache, *plan, chunk));
      continue;
    }
#endif
    auto [keys, vals] = views.gather(chunk.keys, chunk.values);  // [D, L, KV, hd]
    parts.push_back(decode_attention(q.index_select(0, chunk.rows), keys, vals, chunk.future));
  }
  auto out = parts.size() == 1 ? parts[0] : torch::cat(parts);
  return plan->row_of.defined() ? out.index_select(0, plan->row_of) : out;
}

}  // namespace composed
}  // namespace trellis::model
