// The three kinds of picture: benchmark bars with error bars, loss curves, and the
// clock-cycle schedule. Each writes one PNG through gnuplot (gnuplot_png.h).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "gnuplot_png.h"
#include "statistics.h"

namespace kit::plots {

struct Bar {
  std::string label;  // under the bar; '\n' breaks the line
  MeanStd value;
};

struct BarChart {
  std::string title;   // '\n' breaks the line
  std::string ylabel;  // with the unit, e.g. "training time per epoch (seconds)"
  std::string unit;    // after each value label, e.g. "s" (may be empty)
  std::vector<Bar> bars;
};

// Bars at the means, error bars of one standard deviation, "mean ± std unit" above each.
void draw_bar_chart(const std::string& png_path, const BarChart& chart, PngOptions png);

struct LossSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (epoch, loss)
};

// One line per series, drawn thickest first with different dash patterns, so curves
// that coincide (equal training) stay visible on top of each other.
void draw_loss_curves(const std::string& png_path, const std::vector<LossSeries>& series, PngOptions png);

// The GPipe schedule as a grid: clock (x) by stage (y, stage 0 on top), each busy cell
// labelled with its micro-batch index, idle cells (the bubble) left blank.
void draw_schedule(const std::string& png_path, int micro_batches, int stages, PngOptions png);

// "12.3 ± 0.4": three significant digits for the mean, the std to the same decimals;
// "102 (1 epoch)" for one value (no spread), "1.60" for none (n = 0: an ideal, not measured).
std::string format_mean_std(const MeanStd& v);

}  // namespace kit::plots
