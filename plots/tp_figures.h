// The figure of the tensor-parallel benchmark (Problem 4, bench/tensor_parallel.py):
//   tp_throughput_communication.png  per preset, tokens/s (left) and communication seconds
//                                    per step (right) of one process, tensor parallelism
//                                    with t = 2 and data parallelism with 2 ranks
// It comes from the benchmark's summary.json, so drawing needs no LibTorch.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

inline constexpr const char* kTpFigureFile = "tp_throughput_communication.png";

// Reads `runs_dir`/summary.json and writes the PNG into `out_dir`; returns its path.
// kit::Error naming the file and the missing field when the summary is not the benchmark's.
std::vector<std::string> draw_tp_figures(const std::string& runs_dir, const std::string& out_dir,
                                         const PngOptions& png);

}  // namespace kit::plots
