// Vector math on float rows for the fused CPU kernels: bf16 <-> fp32 conversion and the
// exp-heavy inner loops (softmax, SiLU). Each function is compiled for AVX-512, AVX2 and baseline
// x86-64 and picked at load time (GCC target_clones), so one binary runs everywhere and uses the
// widest vectors the CPU has. exp is a polynomial approximation (relative error < 2e-7 on
// [-87, 88], exactly 0 below), well inside bf16 and fp32 training tolerances.
#pragma once

#include <cstdint>

// Compiles a kernel function for AVX-512, AVX2 and baseline x86-64, picked at load time (GCC;
// other compilers get the baseline). For the CPU kernel files of the model.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRELLIS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRELLIS_VECTOR_CLONES
#endif

namespace trellis::model::vec {

// bf16 bit patterns <-> fp32. to_bf16 rounds to nearest even and keeps NaN a NaN.
void bf16_to_float(const uint16_t* src, float* dst, int64_t n);
void float_to_bf16(const float* src, uint16_t* dst, int64_t n);

// x[i] = exp(x[i] * scale - shift) for finite x; returns the sum of the results.
float exp_scaled_sum(float* x, float scale, float shift, int64_t n);
float max_value(const float* x, int64_t n);  // -inf for n == 0
// Σ e[i] and Σ e[i] * x[i] (into *weighted) for e[i] = exp(x[i] * scale - shift); x unchanged.
float exp_scaled_sums(const float* x, float scale, float shift, int64_t n, float* weighted);
// out[i] = -scale * exp(z - shift) * (c0 + c1 * z) with z = x[i] * scale: the gradient through
// logits x of a tempered softmax's log-prob (c0) and entropy (c1) terms (model/token_logprobs).
void softmax_logit_grad(const float* x, float* out, float scale, float shift, float c0, float c1,
                        int64_t n);
float dot(const float* a, const float* b, int64_t n);
// out[i] = exp((x[i] - shift) / divisor) in double, for arguments <= 0 (the weights of a softmax
// relative to its maximum): within about 2 ulp of std::exp, 0 below -708 (where std::exp's
// results are subnormal), exactly 1 at 0, NaN for NaN. About 8x std::exp's speed with AVX-512.
void exp_weights(const float* x, int64_t n, double shift, double divisor, double* out);
// Whether the CPU has AVX512-BF16 dot products (vdpbf16ps), which the skinny matmul needs.
bool has_avx512_bf16();
// out[m * N + j] = Σ_k x[m * K + k] * w[j * K + k] for m < rows (rows <= 4), j in [j0, j1), all
// bf16 bit patterns but out, with fp32 accumulation. One pass over each weight row serves every
// row of x. Only call when has_avx512_bf16().
void skinny_matmul_bf16(const uint16_t* x, int64_t rows, const uint16_t* w, int64_t K, int64_t j0,
                        int64_t j1, int64_t N, float* out);

// y = silu(g) * u
void silu_mul(const float* g, const float* u, float* y, int64_t n);
// dg, du of y = silu(g) * u given dy.
void silu_mul_backward(const float* g, const float* u, const float* dy, float* dg, float* du,
                       int64_t n);

}  // namespace trellis::model::vec
