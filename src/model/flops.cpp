#include "model/flops.h"

#include <algorithm>

#include "common/clock.h"

namespace trellis::model {

double measure_matmul_flops(const Compute& compute, int64_t n) {
  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(compute.dtype).device(compute.device);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto c = torch::matmul(a, b);  // warm-up: oneDNN picks and caches its kernel here
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    synchronize(compute);
    double t0 = monotonic_seconds();
    c = torch::matmul(a, b);
    synchronize(compute);
    best = std::min(best, monotonic_seconds() - t0);
  }
  return 2.0 * n * n * n / best;
}

double train_flops(const HfConfig& c, int64_t tokens, double sum_sq_lens) {
  const int64_t q = c.num_attention_heads * c.head_dim;
  return 6.0 * static_cast<double>(c.num_matmul_parameters()) * tokens +
         6.0 * c.num_hidden_layers * q * sum_sq_lens;  // 2 matmuls x 2 FLOPs x 3 passes x 1/2
}

}  // namespace trellis::model
