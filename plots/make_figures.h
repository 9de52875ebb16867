// Everything plot_figures does, callable from tests: load the runs, check them, draw the
// figures that their inputs allow, write summary.json.
//
// Each input is a metrics file or a directory of per-rank files. An input left at its
// default path that does not exist is skipped with a note (with the figures that need
// it); one the user named must exist. Every input is loaded and checked before anything
// is drawn, so a bad file stops the run with nothing half-written.
#pragma once
#include <string>

#include "gnuplot_png.h"
#include "schedule_grid.h"
#include "summary.h"

namespace kit::plots {

struct InputPath {
  std::string path;
  bool given = false;  // named by the user (must exist), or a default (may be absent)
};

struct FigureOptions {
  // The defaults are where the programs write by default.
  InputPath dp_single{"runs/data_parallel/world1"};
  InputPath dp_multi{"runs/data_parallel/world2"};
  InputPath model_parallel{"runs/pipeline/model_parallel.json"};
  InputPath pipeline{"runs/pipeline/pipeline_parallel.json"};
  InputPath single{"runs/train.json"};
  std::string out_dir = "submit_figures";
  ScheduleSize schedule;
  bool schedule_given = false;  // else the --pipeline run's micro-batches x stages, when it has them
  PngOptions png;
};

// The file names inside out_dir.
inline const char* const kDpTimeFigure = "dp_training_time.png";
inline const char* const kDpThroughputFigure = "dp_tokens_per_sec.png";
inline const char* const kPpTimeFigure = "pp_training_time.png";
inline const char* const kPpThroughputFigure = "pp_tokens_per_sec.png";
inline const char* const kPpForwardFigure = "pp_forward_tokens_per_sec.png";  // with the ideal m·p/(m+p-1)
inline const char* const kLossFigure = "loss_curves.png";
inline const char* const kScheduleFigure = "schedule.png";
inline const char* const kSummaryFile = "summary.json";

// Throws kit::Error (naming file and field) for bad input or a figure gnuplot could not draw.
Summary make_figures(const FigureOptions& options);

}  // namespace kit::plots
