#include "model/vec_math.h"

#include <bit>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRELLIS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRELLIS_VECTOR_CLONES
#endif

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

}  // namespace

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
// GCC 12's _mm512_reduce_add_ps reads a deliberately undefined register half.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void skinny_matmul_bf16(
    const uint16_t* x, int64_t rows, const uint16_t* w, int64_t K, int64_t j0, int64_t j1,
    int64_t N, float* out) {
  constexpr int64_t kMaxRows = 4;
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* wr = w + j * K;
    // Two partial sums per row hide the dot-product latency.
    __m512 acc[kMaxRows][2];
    for (int64_t m = 0; m < rows; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 64) {
      const __mmask32 m0 = K - k >= 32 ? ~__mmask32{0} : (__mmask32{1} << (K - k)) - 1;
      const __mmask32 m1 =
          K - k >= 64 ? ~__mmask32{0} : (K - k <= 32 ? 0 : (__mmask32{1} << (K - k - 32)) - 1);
      const __m512i w0 = _mm512_maskz_loadu_epi16(m0, wr + k);
      const __m512i w1 = _mm512_maskz_loadu_epi16(m1, wr + k + 32);
      for (int64_t m = 0; m < rows; ++m) {
        const uint16_t* xr = x + m * K + k;
        acc[m][0] =
            _mm512_dpbf16_ps(acc[m][0], (__m512bh)_mm512_maskz_loadu_epi16(m0, xr), (__m512bh)w0);
        acc[m][1] = _mm512_dpbf16_ps(acc[m][1], (__m512bh)_mm512_maskz_loadu_epi16(m1, xr + 32),
                                     (__m512bh)w1);
      }
    }
    for (int64_t m = 0; m < rows; ++m) {
      out[m * N + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]));
    }
  }
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
