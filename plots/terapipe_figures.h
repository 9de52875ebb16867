// The figures of TeraPipe measured (Problem 7, bench/terapipe.py):
//   terapipe_slicing.png   per sequence length L, every slicing (none, uniform:K, dp): the
//                          measured pipeline time as a bar, the fitted model's prediction as
//                          a marker on it, the DP's bar in its own colour
//   terapipe_timeline.png  at the largest L, the last step's measured timeline of the run
//                          without slicing (GPipe: each micro-batch whole) above the DP's
//                          token-sliced one, one row per stage, on one time axis
// They come from the benchmark's summary.json and train_parallel --slices's per-rank metrics files, so
// drawing needs no LibTorch.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

inline constexpr const char* kTerapipeSlicingFile = "terapipe_slicing.png";
inline constexpr const char* kTerapipeTimelineFile = "terapipe_timeline.png";

// Reads `runs_dir`/summary.json and the rank files its records name, writes the two PNGs
// into `out_dir` and returns their paths. A rank file whose recorded path does not exist
// (the runs were moved) is looked for under `runs_dir` as bench/terapipe.py lays it out,
// L<L>/<slicing>/rank<r>.json. kit::Error naming the file, the missing field and the command
// that writes the file when something is missing or not the benchmark's.
std::vector<std::string> draw_terapipe_figures(const std::string& runs_dir, const std::string& out_dir,
                                               const PngOptions& png);

}  // namespace kit::plots
