// The machine's measured matrix-multiply rate: what doctor reports and what the
// benchmarks divide by to get MFU (model FLOPs utilisation).
#pragma once
#include <cstdint>

namespace kit {

// Float32 GEMM rate, in GFLOP/s, of n x n products on the current intra-op thread
// count, measured for about `seconds` after one warm-up product.
double measure_gemm_gflops(int64_t n = 512, double seconds = 1.0);

}  // namespace kit
