// The figures of the ZeRO benchmark (Problem 5, bench/zero.py):
//   zero_memory.png     per preset, stacked bars per rank: the bytes of parameters,
//                       gradients, optimizer state and activations each rank holds, for
//                       plain data parallelism (AdamW), ZeRO-1 and ZeRO-2, with the ZeRO
//                       paper's fp32 formula (parameters + gradients + optimizer state)
//                       marked on each bar and the process's peak RSS beside it
//   ring_bandwidth.png  bus bandwidth (nccl-tests' busbw = 2(n-1)/n x bytes / time) of the
//                       ring all-reduce and the dist layer's built-in all-reduce against
//                       the tensor's size (log scale)
// They come from the benchmark's summary.json, so drawing needs no LibTorch.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

inline constexpr const char* kZeroMemoryFigureFile = "zero_memory.png";
inline constexpr const char* kRingBandwidthFigureFile = "ring_bandwidth.png";

// Reads `runs_dir`/summary.json and writes both PNGs into `out_dir`; returns their paths.
// kit::Error naming the file and the missing field when the summary is not the benchmark's.
std::vector<std::string> draw_zero_figures(const std::string& runs_dir, const std::string& out_dir,
                                           const PngOptions& png);

}  // namespace kit::plots
