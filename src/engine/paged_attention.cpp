#include "engine/paged_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/fused_ops.h"
#include "model/vec_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRELLIS_HAVE_AVX512_PATH 1
// GCC 12's AVX-512 intrinsics pass a deliberately undefined register as the merge source.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRELLIS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRELLIS_VECTOR_CLONES
#endif

namespace trellis::engine {
namespace {

namespace vec = model::vec;
constexpr int64_t B = kBlockSize;

__attribute__((always_inline)) inline float to_f(float v) { return v; }
__attribute__((always_inline)) inline float to_f(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

struct Shape {
  int64_t kv_heads, group, hd;  // group: query heads per kv head
};

// Scores of one query head against `nb` key blocks starting at block index b0: sc[j] = q . k_j.
// Portable version; the AVX-512 one below keeps four blocks' scores in registers.
template <typename T>
inline __attribute__((always_inline)) void block_scores(const float* qh, const T* kc,
                                                        const int32_t* table, int64_t b0,
                                                        int64_t nb, int64_t stride, int64_t hd,
                                                        float* out) {
  for (int64_t b = b0; b < b0 + nb; ++b) {
    const T* kb = kc + static_cast<int64_t>(table[b]) * stride;
    float sc[B] = {};
    for (int64_t d = 0; d < hd; ++d) {
      const float qd = qh[d];
      const T* kr = kb + d * B;
      for (int64_t j = 0; j < B; ++j) sc[j] += qd * to_f(kr[j]);
    }
    std::memcpy(out + b * B, sc, sizeof(sc));
  }
}

#ifdef TRELLIS_HAVE_AVX512_PATH
#define TRELLIS_AVX512 __attribute__((target("avx512f,avx512bw"), always_inline)) inline

TRELLIS_AVX512 __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
TRELLIS_AVX512 __m512 load16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// Four blocks at a time: four independent FMA chains hide the FMA latency (GCC leaves the portable
// loop scalar: it unrolls the 16 lanes instead of vectorising them).
template <typename T>
__attribute__((target("avx512f,avx512bw"))) void block_scores_avx512(const float* qh, const T* kc,
                                                                     const int32_t* table,
                                                                     int64_t b0, int64_t nb,
                                                                     int64_t stride, int64_t hd,
                                                                     float* out) {
  int64_t b = b0;
  for (; b + 4 <= b0 + nb; b += 4) {
    const T* k0 = kc + static_cast<int64_t>(table[b]) * stride;
    const T* k1 = kc + static_cast<int64_t>(table[b + 1]) * stride;
    const T* k2 = kc + static_cast<int64_t>(table[b + 2]) * stride;
    const T* k3 = kc + static_cast<int64_t>(table[b + 3]) * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t d = 0; d < hd; ++d) {
      const __m512 qd = _mm512_set1_ps(qh[d]);
      a0 = _mm512_fmadd_ps(qd, load16(k0 + d * B), a0);
      a1 = _mm512_fmadd_ps(qd, load16(k1 + d * B), a1);
      a2 = _mm512_fmadd_ps(qd, load16(k2 + d * B), a2);
      a3 = _mm512_fmadd_ps(qd, load16(k3 + d * B), a3);
    }
    _mm512_storeu_ps(out + b * B, a0);
    _mm512_storeu_ps(out + (b + 1) * B, a1);
    _mm512_storeu_ps(out + (b + 2) * B, a2);
    _mm512_storeu_ps(out + (b + 3) * B, a3);
  }
  for (; b < b0 + nb; ++b) {
    const T* k0 = kc + static_cast<int64_t>(table[b]) * stride;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;  // two chains over even and odd d
    int64_t d = 0;
    for (; d + 2 <= hd; d += 2) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(qh[d]), load16(k0 + d * B), a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(qh[d + 1]), load16(k0 + (d + 1) * B), a1);
    }
    if (d < hd) a0 = _mm512_fmadd_ps(_mm512_set1_ps(qh[d]), load16(k0 + d * B), a0);
    _mm512_storeu_ps(out + b * B, _mm512_add_ps(a0, a1));
  }
}
#endif

// acc[0 .. hd) += Σ_j w[j] * v_j for the m value rows of one block (rows hd apart). Portable
// version; the AVX-512 one keeps the hd / 16 accumulators in registers.
template <typename T>
inline __attribute__((always_inline)) void block_values(const float* w, const T* vb, int64_t m,
                                                        int64_t hd, float* acc) {
  for (int64_t j = 0; j < m; ++j) {
    const T* vr = vb + j * hd;
    for (int64_t d = 0; d < hd; ++d) acc[d] += w[j] * to_f(vr[d]);
  }
}

#ifdef TRELLIS_HAVE_AVX512_PATH
template <typename T, int kChunks>
__attribute__((target("avx512f,avx512bw"))) void block_values_fixed(const float* w, const T* vb,
                                                                    int64_t m, float* acc) {
  constexpr int64_t hd = 16 * kChunks;
  __m512 a[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  for (int64_t j = 0; j < m; ++j) {
    const __m512 wj = _mm512_set1_ps(w[j]);
    for (int c = 0; c < kChunks; ++c)
      a[c] = _mm512_fmadd_ps(wj, load16(vb + j * hd + 16 * c), a[c]);
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

template <typename T>
void block_values_avx512(const float* w, const T* vb, int64_t m, int64_t hd, float* acc) {
  switch (hd) {
    case 64:
      return block_values_fixed<T, 4>(w, vb, m, acc);
    case 128:
      return block_values_fixed<T, 8>(w, vb, m, acc);
    default:
      block_values(w, vb, m, hd, acc);
  }
}
#endif

// One query token, all heads. Blocks are visited in order and, within a block, kv head by kv head,
// so each block's keys (then values) stream from memory once and contiguously; the query heads of
// a group share each key/value load from L1.
// Scratch: scores [heads, n rounded up to B]; qf, acc, out [heads, hd]; inv [heads].
// always_inline: the kernels must be compiled inside each target_clones variant below.
#define TRELLIS_INLINE inline __attribute__((always_inline))

template <typename T, bool kAvx512>
TRELLIS_INLINE void attend_token(const T* q, const T* kc, const T* vc, const int32_t* table,
                                 int64_t n, const Shape& s, float* scores, float* acc, float* qf,
                                 float* inv, float* out) {
  const int64_t G = s.group, KV = s.kv_heads, H = KV * G, hd = s.hd;
  const int64_t nb = (n + B - 1) / B, npad = nb * B;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < H * hd; ++i) qf[i] = to_f(q[i]) * scale;
  const int64_t stride = KV * hd * B;  // between consecutive blocks of one kv head
  constexpr int64_t kGroup = 4;        // blocks per pass: four independent FMA chains
  for (int64_t b0 = 0; b0 < nb; b0 += kGroup) {
    const int64_t nblk = std::min(kGroup, nb - b0);
    for (int64_t h = 0; h < H; ++h) {
      const T* kg = kc + (h / G) * hd * B;
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
    const float mx = vec::max_value(sh, n);
    inv[h] = 1.0f / vec::exp_scaled_sum(sh, 1.0f, mx, n);
  }
  std::fill(acc, acc + H * hd, 0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t m = std::min(B, n - b * B);
    for (int64_t h = 0; h < H; ++h) {
      const T* vb = vc + (static_cast<int64_t>(table[b]) * KV + h / G) * B * hd;
      const float* w = scores + h * npad + b * B;
#ifdef TRELLIS_HAVE_AVX512_PATH
      if constexpr (kAvx512) {
        block_values_avx512(w, vb, m, hd, acc + h * hd);
        continue;
      }
#endif
      block_values(w, vb, m, hd, acc + h * hd);
    }
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < hd; ++d) out[h * hd + d] = acc[h * hd + d] * inv[h];
}

// Attends tokens [first, first + count); see attend_token.
template <typename T, bool kAvx512>
TRELLIS_INLINE void attend_range(int64_t first, int64_t count, const T* q, const T* kc, const T* vc,
                                 const int32_t* tables, int64_t max_blocks,
                                 const int64_t* positions, const int64_t* token_seq, const Shape& s,
                                 T* out) {
  const int64_t H = s.kv_heads * s.group, hd = s.hd;
  std::vector<float> scores, acc(H * hd), qf(H * hd), o(H * hd), inv(H);
  for (int64_t t = first; t < first + count; ++t) {
    const int64_t n = positions[t] + 1;
    scores.resize(H * ((n + B - 1) / B) * B);
    attend_token<T, kAvx512>(q + t * H * hd, kc, vc, tables + token_seq[t] * max_blocks, n, s,
                             scores.data(), acc.data(), qf.data(), inv.data(), o.data());
    T* dst = out + t * H * hd;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(dst, o.data(), H * hd * sizeof(float));
    } else {
      vec::float_to_bf16(o.data(), dst, H * hd);
    }
  }
}

struct Args {
  const void *q, *kc, *vc;
  const int32_t* tables;
  int64_t max_blocks;
  const int64_t *positions, *token_seq;
  Shape shape;
  void* out;
};

TRELLIS_VECTOR_CLONES
void attend_f32(int64_t first, int64_t count, const Args& a) {
  attend_range<float, false>(first, count, static_cast<const float*>(a.q),
                             static_cast<const float*>(a.kc), static_cast<const float*>(a.vc),
                             a.tables, a.max_blocks, a.positions, a.token_seq, a.shape,
                             static_cast<float*>(a.out));
}

TRELLIS_VECTOR_CLONES
void attend_bf16(int64_t first, int64_t count, const Args& a) {
  attend_range<uint16_t, false>(first, count, static_cast<const uint16_t*>(a.q),
                                static_cast<const uint16_t*>(a.kc),
                                static_cast<const uint16_t*>(a.vc), a.tables, a.max_blocks,
                                a.positions, a.token_seq, a.shape, static_cast<uint16_t*>(a.out));
}

#ifdef TRELLIS_HAVE_AVX512_PATH
__attribute__((target("avx512f,avx512bw"))) void attend_f32_avx512(int64_t first, int64_t count,
                                                                   const Args& a) {
  attend_range<float, true>(first, count, static_cast<const float*>(a.q),
                            static_cast<const float*>(a.kc), static_cast<const float*>(a.vc),
                            a.tables, a.max_blocks, a.positions, a.token_seq, a.shape,
                            static_cast<float*>(a.out));
}

__attribute__((target("avx512f,avx512bw"))) void attend_bf16_avx512(int64_t first, int64_t count,
                                                                    const Args& a) {
  attend_range<uint16_t, true>(first, count, static_cast<const uint16_t*>(a.q),
                               static_cast<const uint16_t*>(a.kc),
                               static_cast<const uint16_t*>(a.vc), a.tables, a.max_blocks,
                               a.positions, a.token_seq, a.shape, static_cast<uint16_t*>(a.out));
}

bool has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}
#endif

// Scatters the new tokens' keys (transposed into [hd, B] blocks) and values into their slots.
template <typename T>
void write_slots(const T* k, const T* v, T* kc, T* vc, const int64_t* slots, int64_t tokens,
                 int64_t kv_heads, int64_t hd) {
  at::parallel_for(0, tokens, 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t blk = slots[t] / B, off = slots[t] % B;
      for (int64_t g = 0; g < kv_heads; ++g) {
        const T* kr = k + (t * kv_heads + g) * hd;
        const T* vr = v + (t * kv_heads + g) * hd;
        T* kb = kc + (blk * kv_heads + g) * hd * B;
        for (int64_t d = 0; d < hd; ++d) kb[d * B + off] = kr[d];
        std::memcpy(vc + ((blk * kv_heads + g) * B + off) * hd, vr, hd * sizeof(T));
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
}

}  // namespace

torch::Tensor paged_attention(const torch::Tensor& q_in, const torch::Tensor& k_in,
                              const torch::Tensor& v_in, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const PagedBatch& batch) {
  check_args(q_in, k_in, key_cache, batch);
  if (!q_in.device().is_cpu() ||
      (q_in.scalar_type() != torch::kFloat32 && q_in.scalar_type() != torch::kBFloat16)) {
    return composed::paged_attention(q_in, k_in, v_in, key_cache, value_cache, batch);
  }
  auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  auto slots = batch.slots.to(torch::kInt64).contiguous();
  auto positions = batch.positions.to(torch::kInt64).contiguous();
  auto token_seq = batch.token_seq.to(torch::kInt64).contiguous();
  auto tables = batch.block_tables.to(torch::kInt32).contiguous();
  const int64_t T = q.size(0), H = q.size(1), hd = q.size(2), KV = k.size(1);
  const bool bf16 = q.scalar_type() == torch::kBFloat16;
  if (bf16) {
    write_slots(reinterpret_cast<const uint16_t*>(k.data_ptr()),
                reinterpret_cast<const uint16_t*>(v.data_ptr()),
                reinterpret_cast<uint16_t*>(key_cache.data_ptr()),
                reinterpret_cast<uint16_t*>(value_cache.data_ptr()), slots.data_ptr<int64_t>(), T,
                KV, hd);
  } else {
    write_slots(k.data_ptr<float>(), v.data_ptr<float>(), key_cache.data_ptr<float>(),
                value_cache.data_ptr<float>(), slots.data_ptr<int64_t>(), T, KV, hd);
  }
  auto out = torch::empty({T, H * hd}, q.options());
  Args a{q.data_ptr(),
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
    if (has_avx512()) {
      if (bf16) {
        attend_bf16_avx512(b, e - b, a);
      } else {
        attend_f32_avx512(b, e - b, a);
      }
      return;
    }
#endif
    if (bf16) {
      attend_bf16(b, e - b, a);
    } else {
      attend_f32(b, e - b, a);
    }
  });
  return out;
}

namespace composed {

torch::Tensor paged_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& key_cache,
                              const torch::Tensor& value_cache, const PagedBatch& batch) {
  check_args(q, k, key_cache, batch);
  const auto dev = q.device();
  // Token-major views of the caches: [blocks, B, kv_heads, hd].
  auto kview = key_cache.permute({0, 3, 1, 2}), vview = value_cache.permute({0, 2, 1, 3});
  auto slots = batch.slots.to(dev, torch::kInt64);
  auto blk = slots.div(B, "floor"), off = slots.remainder(B);
  kview.index_put_({blk, off}, k);
  vview.index_put_({blk, off}, v);

  auto positions = batch.positions.to(torch::kCPU, torch::kInt64).contiguous();
  auto token_seq = batch.token_seq.to(torch::kCPU, torch::kInt64).contiguous();
  auto tables = batch.block_tables.to(torch::kCPU, torch::kInt64);
  const int64_t T = q.size(0);
  const int64_t* pos = positions.data_ptr<int64_t>();
  const int64_t* seq = token_seq.data_ptr<int64_t>();
  std::vector<torch::Tensor> outs;
  // Runs of consecutive tokens of one sequence at consecutive positions form one query block.
  for (int64_t t = 0; t < T;) {
    int64_t e = t + 1;
    while (e < T && seq[e] == seq[t] && pos[e] == pos[e - 1] + 1) ++e;
    const int64_t n = pos[e - 1] + 1;
    auto idx = torch::arange(n, torch::kInt64);
    auto blocks = tables[seq[t]].index_select(0, idx.div(B, "floor")).to(dev);
    auto offs = idx.remainder(B).to(dev);
    auto keys = kview.index({blocks, offs}).permute({1, 0, 2}).unsqueeze(0);  // [1, KV, n, hd]
    auto vals = vview.index({blocks, offs}).permute({1, 0, 2}).unsqueeze(0);
    auto qs = q.narrow(0, t, e - t).unsqueeze(0);  // [1, t, heads, hd]
    outs.push_back(model::fused::composed::cached_attention(qs, keys, vals, pos[t]).squeeze(0));
    t = e;
  }
  return torch::cat(outs);
}

}  // namespace composed
}  // namespace trellis::engine
