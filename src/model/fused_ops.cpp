#include "model/fused_ops.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "model/paged_attention.h"
#include "model/vec_math.h"

#ifdef TRELLIS_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/cuda/fused_ops.h"
#endif

// PyTorch 2.5 and later: scaled_dot_product_attention with grouped-query heads. Debian's libtorch
// 1.13 has no such op, and the composed attention spells it out in ATen ops instead.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define TRELLIS_TORCH_SDPA 1
#else
#define TRELLIS_TORCH_SDPA 0
#endif

namespace trellis::model::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using BF16 = c10::BFloat16;

inline float to_f(float v) { return v; }
inline float to_f(BF16 v) { return static_cast<float>(v); }
template <typename T>
inline T from_f(float v) {
  return static_cast<T>(v);
}

// Copies (float) or converts (bf16) a row into buf and returns buf.
template <typename T>
float* load_into(const T* src, float* buf, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(buf, src, n * sizeof(float));
  } else {
    vec::bf16_to_float(reinterpret_cast<const uint16_t*>(src), buf, n);
  }
  return buf;
}

template <typename T>
void store(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (src != dst) std::memcpy(dst, src, n * sizeof(float));
  } else {
    vec::float_to_bf16(src, reinterpret_cast<uint16_t*>(dst), n);
  }
}

// Runs fn(T*) for the dtype of t: float or bf16 (the two compute dtypes).
template <typename Fn>
void dispatch(const torch::Tensor& t, Fn&& fn) {
  if (t.scalar_type() == torch::kFloat32) {
    fn(float{});
  } else if (t.scalar_type() == torch::kBFloat16) {
    fn(BF16{});
  } else {
    TORCH_CHECK(false, "fused ops support float32 and bfloat16, got ", t.scalar_type());
  }
}

// Rows [0, rows) split into chunks for threads that each need a private accumulator.
int64_t num_chunks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(rows, 4 * at::get_num_threads()));
}

#ifdef TRELLIS_CUDA_KERNELS
// The same ops on a GPU through model/cuda/fused_ops.h: contiguous inputs on one CUDA device.
namespace gpu {

void check(const char* error, const char* op) {
  TORCH_CHECK(error == nullptr, op, ": the CUDA kernel failed: ", error);
}
void* stream_of(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
bool is_bf16(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16; }

std::pair<torch::Tensor, torch::Tensor> rms_norm_forward(const torch::Tensor& x,
                                                         const torch::Tensor& weight, double eps) {
  const c10::cuda::CUDAGuard on_the_device(x.device());
  const auto w = weight.to(torch::kFloat32).contiguous();
  const int64_t d = x.size(-1);
  auto y = torch::empty_like(x);
  auto rstd = torch::empty({x.numel() / d}, x.options().dtype(torch::kFloat32));
  model::cuda::RmsNormArgs a;
  a.x = x.data_ptr();
  a.weight = w.data_ptr<float>();
  a.y = y.data_ptr();
  a.rstd = rstd.data_ptr<float>();
  a.rows = rstd.size(0);
  a.dim = d;
  a.eps = static_cast<float>(eps);
  a.bf16 = is_bf16(x);
  a.stream = stream_of(x);
  check(model::cuda::rms_norm_forward(a), "rms_norm");
  return {y, rstd};
}

std::pair<torch::Tensor, torch::Tensor> rms_norm_backward(const torch::Tensor& x,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& rstd,
                                                          const torch::Tensor& gy) {
  const c10::cuda::CUDAGuard on_the_device(x.device());
  const auto w = weight.to(torch::kFloat32).contiguous();
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto gx = torch::empty_like(x);
  auto partial = torch::empty({model::cuda::rms_norm_backward_blocks(rows), d},
                              x.options().dtype(torch::kFloat32));
  model::cuda::RmsNormBackwardArgs a;
  a.x = x.data_ptr();
  a.weight = w.data_ptr<float>();
  a.grad_y = gy.data_ptr();
  a.rstd = rstd.data_ptr<float>();
  a.grad_x = gx.data_ptr();
  a.grad_weight_partial = partial.data_ptr<float>();
  a.rows = rows;
  a.dim = d;
  a.bf16 = is_bf16(x);
  a.stream = stream_of(x);
  check(model::cuda::rms_norm_backward(a), "rms_norm backward");
  return {gx, partial.sum(0)};
}

torch::Tensor swiglu_forward(const torch::Tensor& gate, const torch::Tensor& up) {
  const c10::cuda::CUDAGuard on_the_device(gate.device());
  auto y = torch::empty_like(gate);
  check(model::cuda::swiglu_forward(gate.data_ptr(), up.data_ptr(), y.data_ptr(), gate.numel(),
                                    is_bf16(gate), stream_of(gate)),
        "swiglu");
  return y;
}

std::pair<torch::Tensor, torch::Tensor> swiglu_backward(const torch::Tensor& gate,
                                                        const torch::Tensor& up,
                                                        const torch::Tensor& gy) {
  const c10::cuda::CUDAGuard on_the_device(gate.device());
  auto dgate = torch::empty_like(gate), dup = torch::empty_like(up);
  check(
      model::cuda::swiglu_backward(gate.data_ptr(), up.data_ptr(), gy.data_ptr(), dgate.data_ptr(),
                                   dup.data_ptr(), gate.numel(), is_bf16(gate), stream_of(gate)),
      "swiglu backward");
  return {dgate, dup};
}

torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                     float sign) {
  const c10::cuda::CUDAGuard on_the_device(x.device());
  auto out = torch::empty_like(x);
  model::cuda::RopeArgs a;
  a.x = x.data_ptr();
  a.cos = cos.data_ptr<float>();
  a.sin = sin.data_ptr<float>();
  a.out = out.data_ptr();
  a.head_dim = x.size(-1);
  a.rows = x.numel() / a.head_dim;
  a.heads = x.size(-2);
  a.tokens = x.size(-3);
  a.sign = sign;
  a.bf16 = is_bf16(x);
  a.stream = stream_of(x);
  check(model::cuda::rope(a), "rope");
  return out;
}

}  // namespace gpu
#endif

// ---------------------------------------------------------------- RMSNorm
// x: contiguous [..., d]; weight: [d]. Returns y and the rows' 1 / rms (fp32).
std::pair<torch::Tensor, torch::Tensor> rms_norm_forward(const torch::Tensor& x,
                                                         const torch::Tensor& weight, double eps) {
#ifdef TRELLIS_CUDA_KERNELS
  if (x.is_cuda()) return gpu::rms_norm_forward(x, weight, eps);
#endif
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto w = weight.to(x.scalar_type()).contiguous();  // HF multiplies in the input dtype
  auto y = torch::empty_like(x);
  auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    float* rp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = xp + r * d;
        float ss = 0;
        for (int64_t j = 0; j < d; ++j) ss += to_f(xr[j]) * to_f(xr[j]);
        const float s = 1.0f / std::sqrt(ss / d + static_cast<float>(eps));
        rp[r] = s;
        T* yr = yp + r * d;
        for (int64_t j = 0; j < d; ++j) {
          yr[j] = from_f<T>(to_f(wp[j]) * to_f(from_f<T>(to_f(xr[j]) * s)));
        }
      }
    });
  });
  return {y, rstd};
}

// The gradients of x (x's dtype) and of the weight (fp32).
std::pair<torch::Tensor, torch::Tensor> rms_norm_backward(const torch::Tensor& x,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& rstd,
                                                          const torch::Tensor& gy) {
#ifdef TRELLIS_CUDA_KERNELS
  if (x.is_cuda()) return gpu::rms_norm_backward(x, weight, rstd, gy);
#endif
  const int64_t d = x.size(-1), rows = x.numel() / d, chunks = num_chunks(rows);
  auto w = weight.to(x.scalar_type()).contiguous();
  auto gx = torch::empty_like(x);
  std::vector<float> partial(static_cast<size_t>(chunks * d), 0.0f);
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    const T* wp = w.data_ptr<T>();
    const T* gp = gy.data_ptr<T>();
    const float* rp = rstd.data_ptr<float>();
    T* gxp = gx.data_ptr<T>();
    at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      std::vector<float> g(d);
      for (int64_t c = cb; c < ce; ++c) {
        float* gw = partial.data() + c * d;
        for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
          const T* xr = xp + r * d;
          const T* gr = gp + r * d;
          const float s = rp[r];
          float dot = 0;
          for (int64_t j = 0; j < d; ++j) {
            const float n = to_f(xr[j]) * s, gyj = to_f(gr[j]);
            gw[j] += gyj * n;
            g[j] = gyj * to_f(wp[j]);
            dot += g[j] * n;
          }
          dot /= d;
          T* out = gxp + r * d;
          for (int64_t j = 0; j < d; ++j) out[j] = from_f<T>(s * (g[j] - to_f(xr[j]) * s * dot));
        }
      }
    });
  });
  auto gw = torch::zeros({d}, torch::kFloat32);
  float* gwp = gw.data_ptr<float>();
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = 0; j < d; ++j) gwp[j] += partial[c * d + j];
  return {gx, gw};
}

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& weight, double eps) {
    auto x = x_in.contiguous();
    auto [y, rstd] = rms_norm_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [gx, gw] = rms_norm_backward(saved[0], saved[1], saved[2], grads[0].contiguous());
    return {gx, gw.to(saved[1].scalar_type()), torch::Tensor()};
  }
};

// ---------------------------------------------------------------- SwiGLU
constexpr int64_t kBlock = 2048;  // elements per inner block: fits L1 with its float buffers

torch::Tensor swiglu_forward(const torch::Tensor& gate, const torch::Tensor& up) {
#ifdef TRELLIS_CUDA_KERNELS
  if (gate.is_cuda()) return gpu::swiglu_forward(gate, up);
#endif
  auto y = torch::empty_like(gate);
  const int64_t n = gate.numel();
  dispatch(gate, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data_ptr<T>();
    const T* u = up.data_ptr<T>();
    T* o = y.data_ptr<T>();
    at::parallel_for(0, n, kBlock, [&](int64_t b, int64_t e) {
      std::vector<float> buf(3 * kBlock);
      for (int64_t i = b; i < e; i += kBlock) {
        const int64_t m = std::min(kBlock, e - i);
        float* y = buf.data() + 2 * kBlock;
        vec::silu_mul(load_into(g + i, buf.data(), m), load_into(u + i, buf.data() + kBlock, m), y,
                      m);
        store(y, o + i, m);
      }
    });
  });
  return y;
}

// The gradients of gate and up.
std::pair<torch::Tensor, torch::Tensor> swiglu_backward(const torch::Tensor& gate,
                                                        const torch::Tensor& up,
                                                        const torch::Tensor& gy) {
#ifdef TRELLIS_CUDA_KERNELS
  if (gate.is_cuda()) return gpu::swiglu_backward(gate, up, gy);
#endif
  auto dgate = torch::empty_like(gate), dup = torch::empty_like(up);
  const int64_t n = gate.numel();
  dispatch(gate, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gate.data_ptr<T>();
    const T* u = up.data_ptr<T>();
    const T* gyp = gy.data_ptr<T>();
    T* dg = dgate.data_ptr<T>();
    T* du = dup.data_ptr<T>();
    at::parallel_for(0, n, kBlock, [&](int64_t b, int64_t e) {
      std::vector<float> buf(5 * kBlock);
      float *bg = buf.data(), *bu = bg + kBlock, *bd = bu + kBlock, *og = bd + kBlock,
            *ou = og + kBlock;
      for (int64_t i = b; i < e; i += kBlock) {
        const int64_t m = std::min(kBlock, e - i);
        vec::silu_mul_backward(load_into(g + i, bg, m), load_into(u + i, bu, m),
                               load_into(gyp + i, bd, m), og, ou, m);
        store(og, dg + i, m);
        store(ou, du + i, m);
      }
    });
  });
  return {dgate, dup};
}

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate_in,
                               const torch::Tensor& up_in) {
    auto gate = gate_in.contiguous(), up = up_in.contiguous();
    ctx->save_for_backward({gate, up});
    return swiglu_forward(gate, up);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dgate, dup] = swiglu_backward(saved[0], saved[1], grads[0].contiguous());
    return {dgate, dup};
  }
};

// ---------------------------------------------------------------- RoPE
// out = rotate(x) with sign +1 (forward) or -1 (backward: the transpose of a rotation).
torch::Tensor rotate(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin,
                     float sign) {
  auto x = x_in.contiguous();
  auto c = cos.contiguous(), s = sin.contiguous();
#ifdef TRELLIS_CUDA_KERNELS
  if (x.is_cuda()) return gpu::rotate(x, c, s, sign);
#endif
  const int64_t hd = x.size(-1), half = hd / 2, heads = x.size(-2), t = x.size(-3);
  const int64_t rows = x.numel() / hd;
  auto out = torch::empty_like(x);
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    const float* cp = c.data_ptr<float>();
    const float* sp = s.data_ptr<float>();
    T* op = out.data_ptr<T>();
    at::parallel_for(0, rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t tok = (r / heads) % t;
        const float* cr = cp + tok * half;
        const float* sr = sp + tok * half;
        const T* xr = xp + r * hd;
        T* orow = op + r * hd;
        for (int64_t j = 0; j < half; ++j) {
          // cos/sin are rounded to the compute dtype as in HF's rotary embedding.
          const float cj = to_f(from_f<T>(cr[j])), sj = sign * to_f(from_f<T>(sr[j]));
          const float x1 = to_f(xr[j]), x2 = to_f(xr[j + half]);
          orow[j] = from_f<T>(x1 * cj - x2 * sj);
          orow[j + half] = from_f<T>(x2 * cj + x1 * sj);
        }
      }
    });
  });
  return out;
}

struct RopeFn : torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotate(x, cos, sin, 1.0f);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {rotate(grads[0], saved[0], saved[1], -1.0f), torch::Tensor(), torch::Tensor()};
  }
};

// ---------------------------------------------------------------- attention
// Layout: query heads h*group .. h*group+group-1 share kv head h, so the group is folded into the
// query rows ([n, kv_heads, t * group, hd], query-major: row r is query r / group) and one batched
// matmul per kv head serves them all without repeating k and v. Query i sits at position
// q_offset + i. Queries are processed in blocks so that a block's scores only span the keys it
// can see: for a causal square this skips most of the masked half of QK^T and PV.
constexpr int64_t kQueryBlock = 256;

// q: [n, t, heads, hd] -> [n, kv_heads, t * group, hd]
torch::Tensor fold_queries(const torch::Tensor& q, int64_t kv_heads) {
  const int64_t n = q.size(0), t = q.size(1), hd = q.size(3), group = q.size(2) / kv_heads;
  return q.view({n, t, kv_heads, group, hd})
      .permute({0, 2, 1, 3, 4})
      .reshape({n, kv_heads, t * group, hd});
}

// [n, kv_heads, t * group, hd] -> [n, t, heads, hd]
torch::Tensor unfold_queries(const torch::Tensor& x, int64_t t) {
  const int64_t n = x.size(0), kvh = x.size(1), group = x.size(2) / t, hd = x.size(3);
  return x.view({n, kvh, t, group, hd}).permute({0, 2, 1, 3, 4}).reshape({n, t, kvh * group, hd});
}

// Keys visible to row r of a block whose first query sits at position first_pos.
inline int64_t visible_keys(int64_t row, int64_t rows_per_head, int64_t group, int64_t first_pos,
                            int64_t s) {
  return std::min<int64_t>(s, first_pos + (row % rows_per_head) / group + 1);
}

// Scores -> probabilities in place: causal mask, scale, fp32 softmax.
void softmax_rows(torch::Tensor& scores, int64_t group, int64_t first_pos, float scale) {
  const int64_t R = scores.size(-2), s = scores.size(-1), rows = scores.numel() / s;
  dispatch(scores, [&](auto tag) {
    using T = decltype(tag);
    T* p = scores.data_ptr<T>();
    at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
      std::vector<float> buf(s);
      for (int64_t row = b; row < e; ++row) {
        T* pr = p + row * s;
        const int64_t valid = visible_keys(row, R, group, first_pos, s);
        float* x = load_into(pr, buf.data(), valid);
        const float mx = vec::max_value(x, valid);
        const float inv = 1.0f / vec::exp_scaled_sum(x, scale, mx * scale, valid);
        for (int64_t j = 0; j < valid; ++j) x[j] *= inv;
        store(x, pr, valid);
        std::fill(pr + valid, pr + s, T(0.0f));
      }
    });
  });
}

// dP -> dS in place, given the probabilities P.
void softmax_backward_rows(torch::Tensor& ds, const torch::Tensor& probs, int64_t group,
                           int64_t first_pos, float scale) {
  const int64_t R = ds.size(-2), s = ds.size(-1), rows = ds.numel() / s;
  dispatch(ds, [&](auto tag) {
    using T = decltype(tag);
    T* dp = ds.data_ptr<T>();
    const T* pp = probs.data_ptr<T>();
    at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
      std::vector<float> pbuf(s), dbuf(s);
      for (int64_t row = b; row < e; ++row) {
        T* dr = dp + row * s;
        // Probabilities past the causal limit are exactly 0, and so are their gradients.
        const int64_t valid = visible_keys(row, R, group, first_pos, s);
        const float* pr = load_into(pp + row * s, pbuf.data(), valid);
        float* d = load_into(dr, dbuf.data(), valid);
        const float dot = vec::dot(pr, d, valid);
        for (int64_t j = 0; j < valid; ++j) d[j] = pr[j] * (d[j] - dot) * scale;
        store(d, dr, valid);
        std::fill(dr + valid, dr + s, T(0.0f));
      }
    });
  });
}

// Calls fn(first_query, queries, keys) for each query block of t queries at q_offset.
template <typename Fn>
void for_each_query_block(int64_t t, int64_t q_offset, int64_t s, Fn&& fn) {
  for (int64_t i0 = 0; i0 < t; i0 += kQueryBlock) {
    const int64_t n = std::min(kQueryBlock, t - i0);
    fn(i0, n, std::min<int64_t>(s, q_offset + i0 + n));
  }
}

float attention_scale(const torch::Tensor& q) {
  return 1.0f / std::sqrt(static_cast<float>(q.size(-1)));
}

// Folded q [n, kvh, t * group, hd], k/v [n, kvh, s, hd] -> out [n, kvh, t * group, hd]; the
// probabilities of each query block are appended to probs (if given) for the backward pass.
// Without v, only the probabilities are computed (a backward recomputing them) and out is
// undefined.
torch::Tensor attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, int64_t t, int64_t q_offset,
                                std::vector<torch::Tensor>* probs) {
  const int64_t group = q.size(2) / t, s = k.size(2);
  std::vector<torch::Tensor> outs;
  for_each_query_block(t, q_offset, s, [&](int64_t i0, int64_t n, int64_t keys) {
    auto p =
        torch::matmul(q.narrow(2, i0 * group, n * group), k.narrow(2, 0, keys).transpose(-1, -2))
            .contiguous();
    softmax_rows(p, group, q_offset + i0, attention_scale(q));
    if (v.defined()) outs.push_back(torch::matmul(p, v.narrow(2, 0, keys)));
    if (probs != nullptr) probs->push_back(p);
  });
  if (outs.empty()) return {};
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 2);
}

// Gradients (dq, dk, dv) in the folded layout; probs are the blocks attention_forward saved,
// starting at index *next (advanced past them).
std::array<torch::Tensor, 3> attention_backward(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v,
                                                const std::vector<torch::Tensor>& probs,
                                                size_t* next, const torch::Tensor& dout, int64_t t,
                                                int64_t q_offset) {
  const int64_t group = q.size(2) / t, s = k.size(2);
  auto dq = torch::empty_like(q, at::MemoryFormat::Contiguous);
  auto dk = torch::zeros(k.sizes(), k.options()), dv = torch::zeros(v.sizes(), v.options());
  for_each_query_block(t, q_offset, s, [&](int64_t i0, int64_t n, int64_t keys) {
    const auto& p = probs[(*next)++];
    auto qb = q.narrow(2, i0 * group, n * group), dob = dout.narrow(2, i0 * group, n * group);
    auto kb = k.narrow(2, 0, keys), vb = v.narrow(2, 0, keys);
    dv.narrow(2, 0, keys).add_(torch::matmul(p.transpose(-1, -2), dob));
    auto ds = torch::matmul(dob, vb.transpose(-1, -2)).contiguous();
    softmax_backward_rows(ds, p, group, q_offset + i0, attention_scale(q));
    dq.narrow(2, i0 * group, n * group).copy_(torch::matmul(ds, kb));
    dk.narrow(2, 0, keys).add_(torch::matmul(ds.transpose(-1, -2), qb));
  });
  return {dq, dk, dv};
}

// One autograd node for the attention of every sample in a packed stream, so slicing the stream
// into samples and stitching the outputs back costs no autograd nodes (and no zero-filled
// slice gradients).
//
// Where the paged kernel serves the dtype and head size, the forward is that kernel's
// (paged_packed_attention), so that the trainer's and the validators' forwards give each token the
// bits the engine's decode gave it: the same attention in every forward is what keeps the trainer
// on the engine's policy (and FP8 would otherwise amplify the ulps between two attentions into
// whole E4M3 codes). The backward then recomputes the probabilities with the matmul path; it
// differs from the forward's by rounding only, which gradients do not notice. Elsewhere the forward
// is the matmul path and saves its probabilities.
struct PackedAttentionFn : torch::autograd::Function<PackedAttentionFn> {
  // q: [T, heads, hd]; k, v: [T, kv_heads, hd] -> [T, heads * hd]
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<int64_t>& seq_lens) {
    ctx->saved_data["seq_lens"] = seq_lens;
    if (paged_kernel_supports(q)) {
      ctx->save_for_backward({q, k, v});
      return paged_packed_attention(q, k, v, seq_lens);
    }
    const int64_t T = q.size(0), kvh = k.size(1);
    auto out = torch::empty({T, q.size(1), q.size(2)}, q.options());
    std::vector<torch::Tensor> saved = {q, k, v};
    int64_t start = 0;
    for (int64_t len : seq_lens) {
      auto qs = fold_queries(q.narrow(0, start, len).unsqueeze(0), kvh);
      auto ks = k.narrow(0, start, len).permute({1, 0, 2}).unsqueeze(0);
      auto vs = v.narrow(0, start, len).permute({1, 0, 2}).unsqueeze(0);
      auto o = attention_forward(qs, ks, vs, len, 0, &saved);
      out.narrow(0, start, len).copy_(unfold_queries(o, len).squeeze(0));
      start += len;
    }
    ctx->save_for_backward(saved);
    return out.view({T, -1});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto q = saved[0], k = saved[1], v = saved[2];
    auto seq_lens = ctx->saved_data["seq_lens"].toIntVector();
    const bool recompute = saved.size() == 3;  // the paged forward saved no probabilities
    const int64_t kvh = k.size(1);
    auto dout = grads[0].reshape(q.sizes());
    auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    int64_t start = 0;
    size_t next = 3;  // saved[3..] are the probability blocks, in forward order
    for (int64_t len : seq_lens) {
      auto qs = fold_queries(q.narrow(0, start, len).unsqueeze(0), kvh);
      auto ks = k.narrow(0, start, len).permute({1, 0, 2}).unsqueeze(0);
      auto vs = v.narrow(0, start, len).permute({1, 0, 2}).unsqueeze(0);
      auto dos = fold_queries(dout.narrow(0, start, len).unsqueeze(0), kvh);
      if (recompute) attention_forward(qs, ks, {}, len, 0, &saved);
      auto [gq, gk, gv] = attention_backward(qs, ks, vs, saved, &next, dos, len, 0);
      dq.narrow(0, start, len).copy_(unfold_queries(gq, len).squeeze(0));
      dk.narrow(0, start, len).copy_(gk.squeeze(0).permute({1, 0, 2}));
      dv.narrow(0, start, len).copy_(gv.squeeze(0).permute({1, 0, 2}));
      start += len;
    }
    return {dq, dk, dv, torch::Tensor()};
  }
};

// The attention kernels run on the CPU only.
bool use_kernels(const torch::Tensor& t) { return t.device().is_cpu(); }

// RMSNorm, SwiGLU and RoPE have CPU loops and, in a build with TRELLIS_CUDA_KERNELS, CUDA kernels
// for the two compute dtypes.
bool use_elementwise_kernels(const torch::Tensor& t) {
  if (t.device().is_cpu()) return true;
#ifdef TRELLIS_CUDA_KERNELS
  return t.is_cuda() && (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16);
#else
  return false;
#endif
}

// RMSNorm's CUDA backward keeps a row's weight gradient in shared memory, which bounds its width.
bool use_rms_norm_kernels(const torch::Tensor& x) {
  if (!use_elementwise_kernels(x)) return false;
#ifdef TRELLIS_CUDA_KERNELS
  if (x.is_cuda()) return x.size(-1) <= model::cuda::kRmsNormMaxDim;
#endif
  return true;
}

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!use_rms_norm_kernels(x)) return composed::rms_norm(x, weight, eps);
  return RmsNormFn::apply(x, weight, eps);
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!use_elementwise_kernels(gate)) return composed::swiglu(gate, up);
  return SwigluFn::apply(gate, up);
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!use_elementwise_kernels(x)) return composed::rope(x, cos, sin);
  return RopeFn::apply(x, cos, sin);
}

torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<int64_t>& seq_lens) {
  if (!use_kernels(q)) return composed::packed_attention(q, k, v, seq_lens);
  return PackedAttentionFn::apply(q, k, v, seq_lens);
}

torch::Tensor cached_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_offset) {
  const bool needs_grad = torch::GradMode::is_enabled() &&
                          (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!use_kernels(q) || needs_grad) return composed::cached_attention(q, k, v, q_offset);
  const int64_t B = q.size(0), t = q.size(1);
  auto out = attention_forward(fold_queries(q, k.size(1)), k, v, t, q_offset, nullptr);
  return unfold_queries(out, t).reshape({B, t, -1});
}

bool skinny_linear_supported(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 &&
         weight.scalar_type() == torch::kBFloat16 && x.numel() > 0 && x.numel() <= 4 * x.size(-1) &&
         vec::has_avx512_bf16();
}

torch::Tensor skinny_linear(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias) {
  TORCH_CHECK(
      skinny_linear_supported(x, weight) && weight.dim() == 2 && x.size(-1) == weight.size(1),
      "skinny_linear: bf16 CPU x [..., K] with at most 4 rows and weight [N, K] expected");
  const int64_t K = weight.size(1), N = weight.size(0), M = x.numel() / K;
  auto xc = x.reshape({M, K}).contiguous();
  auto w = weight.contiguous();
  auto out = torch::empty({M, N}, x.options().dtype(torch::kFloat32));
  const auto* xp = reinterpret_cast<const uint16_t*>(xc.data_ptr());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  float* op = out.data_ptr<float>();
  at::parallel_for(
      0, N, 64, [&](int64_t b, int64_t e) { vec::skinny_matmul_bf16(xp, M, wp, K, b, e, N, op); });
  if (bias.defined()) out += bias.to(torch::kFloat32);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(N);
  return out.to(x.scalar_type()).view(shape);
}

namespace composed {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto xf = x.to(torch::kFloat32);
  auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  return torch::silu(gate) * up;
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto c = cos.unsqueeze(-2).to(x.scalar_type());
  auto s = sin.unsqueeze(-2).to(x.scalar_type());
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

torch::Tensor cached_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_offset) {
  const int64_t B = q.size(0), t = q.size(1), s = k.size(2);
  // [t, s]: the keys past each query's position.
  const auto future = [&] {
    auto opts = torch::TensorOptions().device(q.device()).dtype(torch::kInt64);
    return torch::arange(s, opts).unsqueeze(0) > (torch::arange(t, opts) + q_offset).unsqueeze(1);
  };
#if TRELLIS_TORCH_SDPA
  // One fused kernel (flash or memory-efficient attention on a GPU), grouped-query heads and all.
  // Its causal flag puts query i at key i, which holds when the queries start the sequence;
  // otherwise the mask says which keys each query sees.
  const bool causal = q_offset == 0 && t == s;
  const auto out = at::scaled_dot_product_attention(
      q.transpose(1, 2), k, v, causal ? std::optional<torch::Tensor>() : future().logical_not(),
      /*dropout_p=*/0.0, /*is_causal=*/causal, /*scale=*/std::nullopt, /*enable_gqa=*/true);
  return out.transpose(1, 2).reshape({B, t, -1});
#else
  // Plain multi-head form: repeat each kv head for its query heads.
  const int64_t group = q.size(2) / k.size(1);
  auto kk = k.repeat_interleave(group, 1), vv = v.repeat_interleave(group, 1);  // [B, H, s, hd]
  auto scores = torch::matmul(q.transpose(1, 2), kk.transpose(-1, -2)).to(torch::kFloat32) /
                std::sqrt(static_cast<double>(q.size(-1)));  // [B, H, t, s]
  auto probs = torch::softmax(scores.masked_fill(future(), -INFINITY), -1).to(q.scalar_type());
  return torch::matmul(probs, vv).transpose(1, 2).reshape({B, t, -1});
#endif
}

torch::Tensor packed_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<int64_t>& seq_lens,
                               int64_t chunk_elements) {
  // Samples right-padded into batches, one attention per batch instead of one per sample (each a
  // dozen kernel launches on a GPU). A padded key lies after every real query of its sample, so
  // the causal mask hides it; padded queries are computed and dropped. Longest first, so that a
  // batch pads to little more than its own lengths.
  const int64_t T = q.size(0), heads = q.size(1);
  std::vector<int64_t> starts(seq_lens.size()), order;
  int64_t start = 0;
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    starts[i] = start;
    start += seq_lens[i];
    if (seq_lens[i] > 0) order.push_back(static_cast<int64_t>(i));
  }
  TORCH_CHECK(start == T, "packed_attention: seq_lens add up to ", start, ", not ", T, " tokens");
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return seq_lens[a] > seq_lens[b]; });
  // Row T of each padded source is the zero row that padding reads.
  const auto with_zero_row = [](const torch::Tensor& x) {
    return torch::cat({x, torch::zeros({1, x.size(1), x.size(2)}, x.options())});
  };
  const auto qz = with_zero_row(q), kz = with_zero_row(k), vz = with_zero_row(v);
  const auto index_opts = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<torch::Tensor> parts;
  std::vector<int64_t> token_of_row;  // packed token of each row of cat(parts)
  token_of_row.reserve(T);
  for (size_t first = 0; first < order.size();) {
    const int64_t L = seq_lens[order[first]];
    size_t end = first + 1;
    while (end < order.size() &&
           static_cast<int64_t>(end - first + 1) * heads * L * L <= chunk_elements)
      ++end;
    const int64_t n = static_cast<int64_t>(end - first);
    std::vector<int64_t> padded(n * L, T), kept;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t sample = order[first + j];
      for (int64_t i = 0; i < seq_lens[sample]; ++i) {
        padded[j * L + i] = starts[sample] + i;
        kept.push_back(j * L + i);
        token_of_row.push_back(starts[sample] + i);
      }
    }
    const auto rows = torch::tensor(padded, index_opts).to(q.device());
    const auto gather = [&](const torch::Tensor& x) {
      return x.index_select(0, rows).view({n, L, x.size(1), x.size(2)});
    };
    const auto out = cached_attention(gather(qz), gather(kz).transpose(1, 2),
                                      gather(vz).transpose(1, 2), 0);  // [n, L, heads * hd]
    parts.push_back(
        out.reshape({n * L, -1}).index_select(0, torch::tensor(kept, index_opts).to(q.device())));
    first = end;
  }
  if (parts.empty()) return torch::zeros({0, heads * q.size(2)}, q.options());
  std::vector<int64_t> row_of(T);  // the inverse of token_of_row
  for (int64_t r = 0; r < T; ++r) row_of[token_of_row[r]] = r;
  return torch::cat(parts).index_select(0, torch::tensor(row_of, index_opts).to(q.device()));
}

}  // namespace composed
}  // namespace trellis::model::fused
