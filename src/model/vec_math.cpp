#include "model/vec_math.h"

#include <bit>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <cstring>

namespace trellis::model::vec {
namespace {

// exp(x) = 2^n * p(r), x = n ln2 + r, |r| <= ln2/2; branch-free so loops vectorize.
inline float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = (x * 1.44269504f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

// exp(a) for a <= 0 in double, branch-free: a = n ln2 + r with |r| <= ln2 / 2 (Cody and Waite's
// split of ln2, whose high part times n is exact), exp(r) by its Taylor series to r^13 (truncation
// below 1e-17 relative), times 2^n built in the exponent bits. Integer work stays in 64-bit lanes
// (AVX2 has no double -> int64 conversion): rounding by adding 1.5 * 2^52 leaves n in the low bits.
inline double exp_nonpositive(double a) {
  double c = a < -708.0 ? -708.0 : a;
  c = c == c ? c : 0.0;                      // NaN: any finite value here, restored below
  const double kRound = 6755399441055744.0;  // 1.5 * 2^52
  const double shifted = c * 1.4426950408889634 + kRound;
  const double n = shifted - kRound;
  double r = c - n * 6.93147180369123816490e-01;
  r = r - n * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800.0;  // 1 / 13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const int64_t biased = std::bit_cast<int64_t>(shifted) - std::bit_cast<int64_t>(kRound) + 1023;
  const double result = a < -708.0 ? 0.0 : p * std::bit_cast<double>(biased << 52);
  return a == a ? result : a;
}

}  // namespace

TRELLIS_VECTOR_CLONES
void exp_weights(const float* x, int64_t n, double shift, double divisor, double* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = exp_nonpositive((x[i] - shift) / divisor);
}

TRELLIS_VECTOR_CLONES
void bf16_to_float(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(src[i]) << 16);
}

TRELLIS_VECTOR_CLONES
void float_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = std::bit_cast<uint32_t>(src[i]);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    dst[i] = static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
  }
}

TRELLIS_VECTOR_CLONES
float exp_scaled_sum(float* x, float scale, float shift, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    x[i] = fast_exp(x[i] * scale - shift);
    sum += x[i];
  }
  return sum;
}

TRELLIS_VECTOR_CLONES
float exp_scaled_sums(const float* x, float scale, float shift, int64_t n, float* weighted) {
  float sum = 0, wsum = 0;
#pragma omp simd reduction(+ : sum, wsum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = fast_exp(x[i] * scale - shift);
    sum += e;
    wsum += e * x[i];
  }
  *weighted = wsum;
  return sum;
}

TRELLIS_VECTOR_CLONES
void softmax_logit_grad(const float* x, float* out, float scale, float shift, float c0, float c1,
                        int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float z = x[i] * scale;
    out[i] = -scale * fast_exp(z - shift) * (c0 + c1 * z);
  }
}

TRELLIS_VECTOR_CLONES
float max_value(const float* x, int64_t n) {
  float m = -__builtin_inff();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

TRELLIS_VECTOR_CLONES
float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

bool has_avx512_bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's _mm512_reduce_add_ps and shuffles read a deliberately undefined register half.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace {

#define TRELLIS_BF16_KERNEL __attribute__((target("avx512f,avx512bw,avx512bf16")))

// Sums of four vectors: lane i of the result (i < 4) is the sum of all 16 lanes of a_i. Eight
// shuffles and adds in place of four full horizontal reductions.
TRELLIS_BF16_KERNEL inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 a01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 a23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Per 128-bit lane: [a0, a1, a0, a1] and [a2, a3, a2, a3] partials -> [a0, a1, a2, a3].
  const __m512 b =
      _mm512_add_ps(_mm512_shuffle_ps(a01, a23, 0x44), _mm512_shuffle_ps(a01, a23, 0xEE));
  const __m512 c = _mm512_add_ps(b, _mm512_shuffle_f32x4(b, b, 0x4E));
  const __m512 d = _mm512_add_ps(c, _mm512_shuffle_f32x4(c, c, 0xB1));
  return _mm512_castps512_ps128(d);
}

// acc[m][r] += x row m . weight row r over the 32 (or, masked, fewer) entries from k.
template <int kRows>
TRELLIS_BF16_KERNEL inline void skinny_step(const uint16_t* x, const uint16_t* w0, int64_t K,
                                            int64_t k, __mmask32 mask, __m512 (&acc)[kRows][4]) {
  __m512i wv[4];
  for (int r = 0; r < 4; ++r) wv[r] = _mm512_maskz_loadu_epi16(mask, w0 + r * K + k);
  for (int m = 0; m < kRows; ++m) {
    const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + m * K + k);
    for (int r = 0; r < 4; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], xv, (__m512bh)wv[r]);
  }
}

// Four weight rows j .. j+3 against `kRows` rows of x: one accumulator per (row, weight row), so
// each weight load feeds kRows dot products and 4 * kRows independent chains hide their latency.
template <int kRows>
TRELLIS_BF16_KERNEL void skinny_block4(const uint16_t* x, const uint16_t* w, int64_t K, int64_t j,
                                       int64_t N, float* out) {
  __m512 acc[kRows][4];
  for (int m = 0; m < kRows; ++m)
    for (int r = 0; r < 4; ++r) acc[m][r] = _mm512_setzero_ps();
  const uint16_t* w0 = w + j * K;
  const char* next = reinterpret_cast<const char*>(w0 + 4 * K);  // the next four rows
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    // The next block's rows (4 * K contiguous entries) stream in while these are summed.
    _mm_prefetch(next + 8 * k, _MM_HINT_T0);
    _mm_prefetch(next + 8 * k + 64, _MM_HINT_T0);
    _mm_prefetch(next + 8 * k + 128, _MM_HINT_T0);
    _mm_prefetch(next + 8 * k + 192, _MM_HINT_T0);
    skinny_step<kRows>(x, w0, K, k, ~__mmask32{0}, acc);
  }
  if (k < K) skinny_step<kRows>(x, w0, K, k, (__mmask32{1} << (K - k)) - 1, acc);
  for (int m = 0; m < kRows; ++m) {
    _mm_storeu_ps(out + m * N + j, reduce4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
  }
}

// One weight row (the tail when the range is not a multiple of four).
TRELLIS_BF16_KERNEL void skinny_row(const uint16_t* x, int64_t rows, const uint16_t* w, int64_t K,
                                    int64_t j, int64_t N, float* out) {
  const uint16_t* wr = w + j * K;
  for (int64_t m = 0; m < rows; ++m) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) {
      const __mmask32 mask = K - k >= 32 ? ~__mmask32{0} : (__mmask32{1} << (K - k)) - 1;
      acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(mask, x + m * K + k),
                             (__m512bh)_mm512_maskz_loadu_epi16(mask, wr + k));
    }
    out[m * N + j] = _mm512_reduce_add_ps(acc);
  }
}

}  // namespace

TRELLIS_BF16_KERNEL void skinny_matmul_bf16(const uint16_t* x, int64_t rows, const uint16_t* w,
                                            int64_t K, int64_t j0, int64_t j1, int64_t N,
                                            float* out) {
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    switch (rows) {
      case 1:
        skinny_block4<1>(x, w, K, j, N, out);
        break;
      case 2:
        skinny_block4<2>(x, w, K, j, N, out);
        break;
      case 3:
        skinny_block4<3>(x, w, K, j, N, out);
        break;
      default:
        skinny_block4<4>(x, w, K, j, N, out);
        break;
    }
  }
  for (; j < j1; ++j) skinny_row(x, rows, w, K, j, N, out);
}
#pragma GCC diagnostic pop
#else
void skinny_matmul_bf16(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t,
                        int64_t, float*) {}
#endif

TRELLIS_VECTOR_CLONES
void silu_mul(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] * u[i] / (1.0f + fast_exp(-g[i]));
}

TRELLIS_VECTOR_CLONES
void silu_mul_backward(const float* g, const float* u, const float* dy, float* dg, float* du,
                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + fast_exp(-g[i]));
    dg[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    du[i] = dy[i] * g[i] * s;
  }
}

}  // namespace trellis::model::vec
