#include "model/token_logprobs.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include "model/vec_math.h"

#ifdef TRELLIS_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/cuda/token_logprobs.h"
#endif

namespace trellis::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Softmax sums are fp32 over this many columns, added up in double: pairwise-like accuracy over a
// 152k vocabulary without slowing the vector loop.
constexpr int64_t kSumChunk = 4096;

// What the kernels need: contiguous logits [N, V], int64 targets [N], fp32 1 / T [N].
struct Inputs {
  torch::Tensor logits, targets, inv_temperature;
  int64_t limit = 0;  // the softmax's columns
};

Inputs check_inputs(const torch::Tensor& logits, const torch::Tensor& targets,
                    const torch::Tensor& inv_temperature, int64_t vocab_limit) {
  TORCH_CHECK(logits.dim() == 2, "token_logprobs: logits must be [N, V], got ", logits.sizes());
  TORCH_CHECK(logits.scalar_type() == torch::kFloat32 || logits.scalar_type() == torch::kBFloat16,
              "token_logprobs: logits must be float32 or bfloat16, got ", logits.scalar_type());
  const int64_t n = logits.size(0), v = logits.size(1);
  Inputs in;
  in.logits = logits.contiguous();
  in.targets = targets.to(logits.device(), torch::kInt64).reshape({-1}).contiguous();
  in.inv_temperature =
      inv_temperature.to(logits.device(), torch::kFloat32).reshape({-1}).contiguous();
  TORCH_CHECK(in.targets.numel() == n && in.inv_temperature.numel() == n, "token_logprobs: ", n,
              " rows of logits, ", in.targets.numel(), " targets and ", in.inv_temperature.numel(),
              " temperatures");
  in.limit = vocab_limit > 0 && vocab_limit < v ? vocab_limit : v;
  TORCH_CHECK(in.limit > 0, "token_logprobs: logits have no columns");
  return in;
}

// Calls fn(const T* logits, T* grad) typed for the logits' dtype; grad may be an undefined tensor.
template <typename Fn>
void with_dtype(const torch::Tensor& logits, torch::Tensor grad, Fn&& fn) {
  if (logits.scalar_type() == torch::kFloat32) {
    fn(logits.data_ptr<float>(), grad.defined() ? grad.data_ptr<float>() : nullptr);
  } else {
    using BF16 = c10::BFloat16;
    fn(logits.data_ptr<BF16>(), grad.defined() ? grad.data_ptr<BF16>() : nullptr);
  }
}

// Row r of the logits as floats: the row itself (fp32), or converted into buf (bf16).
inline const float* row_floats(const float* logits, int64_t r, int64_t v, std::vector<float>&) {
  return logits + r * v;
}
inline const float* row_floats(const c10::BFloat16* logits, int64_t r, int64_t v,
                               std::vector<float>& buf) {
  vec::bf16_to_float(reinterpret_cast<const uint16_t*>(logits + r * v), buf.data(),
                     static_cast<int64_t>(buf.size()));
  return buf.data();
}

// logp, lse and entropy, fp32 [N] each.
std::array<torch::Tensor, 3> forward_cpu(const Inputs& in) {
  const int64_t n = in.logits.size(0), v = in.logits.size(1), limit = in.limit;
  if (n > 0) {
    const int64_t lo = in.targets.min().item<int64_t>(), hi = in.targets.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < limit, "token_logprobs: target ids span [", lo, ", ", hi,
                "], outside the softmax's ", limit, " ids");
  }
  auto opts = in.logits.options().dtype(torch::kFloat32);
  auto logp = torch::empty({n}, opts), lse = torch::empty({n}, opts),
       entropy = torch::empty({n}, opts);
  const int64_t* targets = in.targets.data_ptr<int64_t>();
  const float* inv_t = in.inv_temperature.data_ptr<float>();
  float *lp = logp.data_ptr<float>(), *ls = lse.data_ptr<float>(), *en = entropy.data_ptr<float>();
  with_dtype(in.logits, {}, [&](const auto* logits, auto*) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(logits)>>;
    at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      std::vector<float> buf(std::is_same_v<T, float> ? 0 : limit);  // bf16 rows as floats
      for (int64_t r = b; r < e; ++r) {
        const float* x = row_floats(logits, r, v, buf);
        const float scale = inv_t[r], shift = vec::max_value(x, limit) * scale;
        double sum = 0, weighted = 0;  // Σ exp(z - shift), Σ exp(z - shift) x
        for (int64_t c = 0; c < limit; c += kSumChunk) {
          float w = 0;
          sum += vec::exp_scaled_sums(x + c, scale, shift, std::min(kSumChunk, limit - c), &w);
          weighted += w;
        }
        const double l = shift + std::log(sum);
        ls[r] = static_cast<float>(l);
        lp[r] = static_cast<float>(x[targets[r]] * scale - l);
        en[r] = static_cast<float>(l - scale * weighted / sum);
      }
    });
  });
  return {logp, lse, entropy};
}

// The gradient of the logits given those of logp and entropy (contiguous fp32, or undefined: zero).
torch::Tensor backward_cpu(const Inputs& in, const torch::Tensor& lse, const torch::Tensor& entropy,
                           const torch::Tensor& grad_logp, const torch::Tensor& grad_entropy) {
  const int64_t n = in.logits.size(0), v = in.logits.size(1), limit = in.limit;
  auto grad = torch::empty_like(in.logits);
  const float* glp = grad_logp.defined() ? grad_logp.data_ptr<float>() : nullptr;
  const float* gep = grad_entropy.defined() ? grad_entropy.data_ptr<float>() : nullptr;
  const int64_t* targets = in.targets.data_ptr<int64_t>();
  const float* inv_t = in.inv_temperature.data_ptr<float>();
  const float *ls = lse.data_ptr<float>(), *en = entropy.data_ptr<float>();
  with_dtype(in.logits, grad, [&](const auto* logits, auto* grads) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(logits)>>;
    at::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
      // bf16 rows are converted to floats and back; fp32 rows are read and written in place.
      const int64_t converted = std::is_same_v<T, float> ? 0 : limit;
      std::vector<float> buf(converted), out(converted);
      for (int64_t r = b; r < e; ++r) {
        const float* x = row_floats(logits, r, v, buf);
        T* g = grads + r * v;
        float* o = std::is_same_v<T, float> ? reinterpret_cast<float*>(g) : out.data();
        const float scale = inv_t[r], g_logp = glp ? glp[r] : 0.0f, g_ent = gep ? gep[r] : 0.0f;
        // d logp / dz = onehot - p and d entropy / dz = -p (z - lse + entropy): see
        // cuda/token_logprobs.cu, which computes the same.
        vec::softmax_logit_grad(x, o, scale, ls[r], g_logp + g_ent * (en[r] - ls[r]), g_ent, limit);
        o[targets[r]] += scale * g_logp;
        if constexpr (!std::is_same_v<T, float>) {
          vec::float_to_bf16(o, reinterpret_cast<uint16_t*>(g), limit);
        }
        std::fill(g + limit, g + v, T(0.0f));
      }
    });
  });
  return grad;
}

#ifdef TRELLIS_CUDA_KERNELS
void check_launch(const char* error, const char* what) {
  TORCH_CHECK(error == nullptr, "token_logprobs: the CUDA ", what, " kernel failed: ", error);
}

std::array<torch::Tensor, 3> forward_cuda(const Inputs& in) {
  const c10::cuda::CUDAGuard on_the_device(in.logits.device());
  const int64_t n = in.logits.size(0);
  auto opts = in.logits.options().dtype(torch::kFloat32);
  auto logp = torch::empty({n}, opts), lse = torch::empty({n}, opts),
       entropy = torch::empty({n}, opts);
  cuda::TokenLogprobsArgs a;
  a.logits = in.logits.data_ptr();
  a.targets = in.targets.data_ptr<int64_t>();
  a.inv_temperature = in.inv_temperature.data_ptr<float>();
  a.logp = logp.data_ptr<float>();
  a.lse = lse.data_ptr<float>();
  a.entropy = entropy.data_ptr<float>();
  a.rows = n;
  a.vocab = in.logits.size(1);
  a.limit = in.limit;
  a.bf16 = in.logits.scalar_type() == torch::kBFloat16;
  a.stream = c10::cuda::getCurrentCUDAStream(in.logits.device().index()).stream();
  check_launch(cuda::token_logprobs_forward(a), "forward");
  return {logp, lse, entropy};
}

torch::Tensor backward_cuda(const Inputs& in, const torch::Tensor& lse,
                            const torch::Tensor& entropy, const torch::Tensor& grad_logp,
                            const torch::Tensor& grad_entropy) {
  const c10::cuda::CUDAGuard on_the_device(in.logits.device());
  auto grad = torch::empty_like(in.logits);
  cuda::TokenLogprobsBackwardArgs a;
  a.logits = in.logits.data_ptr();
  a.targets = in.targets.data_ptr<int64_t>();
  a.inv_temperature = in.inv_temperature.data_ptr<float>();
  a.lse = lse.data_ptr<float>();
  a.entropy = entropy.data_ptr<float>();
  a.grad_logp = grad_logp.defined() ? grad_logp.data_ptr<float>() : nullptr;
  a.grad_entropy = grad_entropy.defined() ? grad_entropy.data_ptr<float>() : nullptr;
  a.grad_logits = grad.data_ptr();
  a.rows = in.logits.size(0);
  a.vocab = in.logits.size(1);
  a.limit = in.limit;
  a.bf16 = in.logits.scalar_type() == torch::kBFloat16;
  a.stream = c10::cuda::getCurrentCUDAStream(in.logits.device().index()).stream();
  check_launch(cuda::token_logprobs_backward(a), "backward");
  return grad;
}
#endif

struct TokenLogprobsFn : torch::autograd::Function<TokenLogprobsFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, const torch::Tensor& inv_temperature,
                               int64_t vocab_limit) {
    const Inputs in = check_inputs(logits, targets, inv_temperature, vocab_limit);
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined: zero
#ifdef TRELLIS_CUDA_KERNELS
    auto [logp, lse, entropy] = in.logits.is_cuda() ? forward_cuda(in) : forward_cpu(in);
#else
    auto [logp, lse, entropy] = forward_cpu(in);
#endif
    ctx->save_for_backward({in.logits, in.targets, in.inv_temperature, lse, entropy});
    ctx->saved_data["limit"] = in.limit;
    return {logp, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    Inputs in{saved[0], saved[1], saved[2], ctx->saved_data["limit"].toInt()};
    for (auto& g : grads) {
      if (g.defined()) g = g.to(torch::kFloat32).contiguous();
    }
#ifdef TRELLIS_CUDA_KERNELS
    auto grad = in.logits.is_cuda() ? backward_cuda(in, saved[3], saved[4], grads[0], grads[1])
                                    : backward_cpu(in, saved[3], saved[4], grads[0], grads[1]);
#else
    auto grad = backward_cpu(in, saved[3], saved[4], grads[0], grads[1]);
#endif
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool has_kernel(const torch::Tensor& logits) {
#ifdef TRELLIS_CUDA_KERNELS
  if (logits.is_cuda()) return true;
#endif
  return logits.device().is_cpu();
}

}  // namespace

TokenLogprobs token_logprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                             const torch::Tensor& inv_temperature, int64_t vocab_limit) {
  if (!has_kernel(logits)) {
    return composed::token_logprobs(logits, targets, inv_temperature, vocab_limit);
  }
  auto out = TokenLogprobsFn::apply(logits, targets, inv_temperature, vocab_limit);
  return {out[0], out[1]};
}

namespace composed {

TokenLogprobs token_logprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                             const torch::Tensor& inv_temperature, int64_t vocab_limit) {
  auto z = logits.to(torch::kFloat32);
  if (vocab_limit > 0 && vocab_limit < z.size(1)) z = z.narrow(1, 0, vocab_limit);
  z = z * inv_temperature.to(z.device(), torch::kFloat32).reshape({-1, 1});
  const auto logsm = torch::log_softmax(z, 1);
  return {logsm.gather(1, targets.to(z.device(), torch::kInt64).reshape({-1, 1})).squeeze(1),
          -(logsm.exp() * logsm).sum(1)};
}

}  // namespace composed
}  // namespace trellis::model
