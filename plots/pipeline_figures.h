// The figures of the pipeline-training benchmark (Problem 3, bench/pipeline_schedules.py):
//   pp_schedule_timelines.png   each schedule's timeline as the simulator predicts it from
//                               the measured per-stage F and B times, above the measured one
//   pp_schedule_throughput.png  tokens/s of one process, Assignment 1's model-parallel and
//                               Pipe runs, and the three schedules across processes
// Both come from the benchmark's summary.json, so drawing needs no LibTorch.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

inline constexpr const char* kPipelineTimelinesFile = "pp_schedule_timelines.png";
inline constexpr const char* kPipelineThroughputFile = "pp_schedule_throughput.png";

// Reads `runs_dir`/summary.json and writes both PNGs into `out_dir`; returns their paths.
// kit::Error naming the file and the missing field when the summary is not the benchmark's.
std::vector<std::string> draw_pipeline_figures(const std::string& runs_dir, const std::string& out_dir,
                                               const PngOptions& png);

}  // namespace kit::plots
