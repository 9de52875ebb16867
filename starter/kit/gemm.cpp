#include "kit/gemm.h"

#include <torch/torch.h>

#include <chrono>

namespace kit {

double measure_gemm_gflops(int64_t n, double seconds) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  auto c = torch::mm(a, b);  // warm-up: BLAS thread pools, page faults
  int64_t reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    c = torch::mm(a, b);
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return 2.0 * n * n * n * reps / elapsed / 1e9;
}

}  // namespace kit
