// pass@k (see pass_at_k.h).
#include "env/pass_at_k.h"

#include "common/error.h"

namespace trellis::env {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n) {
    fail("pass_at_k", "needs 0 <= c <= n and 1 <= k <= n, got n={} c={} k={}", n, c, k);
  }
  if (n - c < k) return 1.0;  // every draw of k samples includes a passing one
  // C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i)
  double fail_all = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) fail_all *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - fail_all;
}

}  // namespace trellis::env
