// pass@k, the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on
// Code", §2.1): with n samples of which c pass, pass@k = 1 - C(n-c, k) / C(n, k), the chance that k
// of the n samples drawn without replacement include a passing one. Computed as a product so that
// it stays exact-ish for large n instead of overflowing binomials.
#pragma once

#include <cstdint>

namespace trellis::env {

// Requires 0 <= c <= n and 1 <= k <= n (Error otherwise).
double pass_at_k(int64_t n, int64_t c, int64_t k);

}  // namespace trellis::env
