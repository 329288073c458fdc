#include "engine/paged_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/fused_ops.h"
#include "model/vec_math.h"

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

// One query token against one kv head: its `group` query heads share every key/value load.
// Scratch: scores [group, n rounded up to B], acc, qf and out [group, hd], inv [group].
// always_inline: the kernels must be compiled inside each target_clones variant below.
#define TRELLIS_INLINE inline __attribute__((always_inline))

template <typename T>
TRELLIS_INLINE void attend_one(const T* q, const T* kc, const T* vc, const int32_t* table,
                               int64_t n, int64_t g, const Shape& s, float* scores, float* acc,
                               float* qf, float* inv, float* out) {
  const int64_t G = s.group, hd = s.hd, nb = (n + B - 1) / B, npad = nb * B;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < G * hd; ++i) qf[i] = to_f(q[i]) * scale;
  for (int64_t b = 0; b < nb; ++b) {
    const T* kb = kc + (static_cast<int64_t>(table[b]) * s.kv_heads + g) * hd * B;
    for (int64_t h = 0; h < G; ++h) {
      float sc[B] = {};
      const float* qh = qf + h * hd;
      for (int64_t d = 0; d < hd; ++d) {
        const float qd = qh[d];
        const T* kr = kb + d * B;
        for (int64_t j = 0; j < B; ++j) sc[j] += qd * to_f(kr[j]);
      }
      std::memcpy(scores + h * npad + b * B, sc, sizeof(sc));
    }
  }
  std::fill(acc, acc + G * hd, 0.0f);
  for (int64_t h = 0; h < G; ++h) {
    float* sh = scores + h * npad;
    const float mx = vec::max_value(sh, n);
    inv[h] = 1.0f / vec::exp_scaled_sum(sh, 1.0f, mx, n);
  }
  for (int64_t b = 0; b < nb; ++b) {
    const T* vb = vc + (static_cast<int64_t>(table[b]) * s.kv_heads + g) * B * hd;
    const int64_t m = std::min(B, n - b * B);
    for (int64_t j = 0; j < m; ++j) {
      const T* vr = vb + j * hd;
      for (int64_t h = 0; h < G; ++h) {
        const float w = scores[h * npad + b * B + j];
        float* ah = acc + h * hd;
        for (int64_t d = 0; d < hd; ++d) ah[d] += w * to_f(vr[d]);
      }
    }
  }
  for (int64_t h = 0; h < G; ++h)
    for (int64_t d = 0; d < hd; ++d) out[h * hd + d] = acc[h * hd + d] * inv[h];
}

// Attends `count` (token, kv head) tasks starting at `first`; see attend_one.
template <typename T>
TRELLIS_INLINE void attend_range(int64_t first, int64_t count, const T* q, const T* kc, const T* vc,
                                 const int32_t* tables, int64_t max_blocks,
                                 const int64_t* positions, const int64_t* token_seq, const Shape& s,
                                 T* out) {
  const int64_t G = s.group, hd = s.hd, H = s.kv_heads * G;
  std::vector<float> scores, acc(G * hd), qf(G * hd), o(G * hd), inv(G);
  for (int64_t task = first; task < first + count; ++task) {
    const int64_t t = task / s.kv_heads, g = task % s.kv_heads, n = positions[t] + 1;
    scores.resize(G * ((n + B - 1) / B) * B);
    attend_one(q + (t * H + g * G) * hd, kc, vc, tables + token_seq[t] * max_blocks, n, g, s,
               scores.data(), acc.data(), qf.data(), inv.data(), o.data());
    T* dst = out + (t * H + g * G) * hd;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(dst, o.data(), G * hd * sizeof(float));
    } else {
      vec::float_to_bf16(o.data(), dst, G * hd);
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
  attend_range(first, count, static_cast<const float*>(a.q), static_cast<const float*>(a.kc),
               static_cast<const float*>(a.vc), a.tables, a.max_blocks, a.positions, a.token_seq,
               a.shape, static_cast<float*>(a.out));
}

TRELLIS_VECTOR_CLONES
void attend_bf16(int64_t first, int64_t count, const Args& a) {
  attend_range(first, count, static_cast<const uint16_t*>(a.q), static_cast<const uint16_t*>(a.kc),
               static_cast<const uint16_t*>(a.vc), a.tables, a.max_blocks, a.positions, a.token_seq,
               a.shape, static_cast<uint16_t*>(a.out));
}

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
  at::parallel_for(0, T * KV, 1, [&](int64_t b, int64_t e) {
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
