// The figure of the 3D grid sweep (Problem 6, bench/grid.py):
//   grid_sweep.png  per preset, for every (d, p, t) factorisation and the one-process run:
//                   tokens/s as bars (top), and the communication seconds per step stacked
//                   by kind, data, tensor, pipeline and embedding, with the step time marked
//                   (below it); each bar labelled "d=2 p=1 t=2"
// It comes from the benchmark's summary.json, so drawing needs no LibTorch.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

inline constexpr const char* kGridSweepFigureFile = "grid_sweep.png";

// Reads `runs_dir`/summary.json and writes the PNG into `out_dir`; returns its path.
// kit::Error naming the file, the missing field and the command that writes the file when
// the summary is missing or not the benchmark's.
std::vector<std::string> draw_grid_figures(const std::string& runs_dir, const std::string& out_dir,
                                           const PngOptions& png);

}  // namespace kit::plots
