// The figures of the planner judged against the measured sweep (Problem 8, bench/planner.py):
//   planner_accuracy.png   for every (d, p, t) of the sweep and the one-process run, the
//                          planner's predicted step time against the measured one, one
//                          labelled point each, the y = x line (a perfect prediction), and
//                          the Spearman rank correlation in the title (AMP's measure: the
//                          order matters more than the seconds)
//   planner_clusters.png   per example cluster (starter/planner/clusters/), its best
//                          strategies as horizontal bars of predicted step time, the
//                          pipeline term and the data-parallel all-reduce stacked, each bar
//                          labelled with the strategy ("d=8 p=4 t=1 mb=1 1f1b zero1")
// They come from the benchmark's summary.json, so drawing needs no LibTorch.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

inline constexpr const char* kPlannerAccuracyFile = "planner_accuracy.png";
inline constexpr const char* kPlannerClustersFile = "planner_clusters.png";

// Reads `runs_dir`/summary.json and writes the two PNGs into `out_dir`; returns their paths.
// kit::Error naming the file, the missing field and the command that writes the file when
// the summary is missing or not the benchmark's; nothing is drawn then.
std::vector<std::string> draw_planner_figures(const std::string& runs_dir, const std::string& out_dir,
                                              const PngOptions& png);

}  // namespace kit::plots
