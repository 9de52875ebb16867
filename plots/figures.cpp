#include "figures.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "schedule_grid.h"

namespace kit::plots {
namespace {

// Colour-blind-friendly (Okabe-Ito), darker first: bars and lines.
const char* const kLineColors[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000"};
constexpr int kNumLineColors = sizeof(kLineColors) / sizeof(kLineColors[0]);
// solid, dashed, dash-dot, dash-dot-dot, dotted: dotted last, as thick dots look like beads.
const int kDashTypes[] = {1, 2, 4, 5, 3};
constexpr int kNumDashTypes = sizeof(kDashTypes) / sizeof(kDashTypes[0]);
const int kBarColors[] = {0x4C72B0, 0xDD8452, 0x55A868, 0xC44E52, 0x8172B3, 0x937860};
constexpr int kNumBarColors = sizeof(kBarColors) / sizeof(kBarColors[0]);
// Light enough for black digits on top: one per micro-batch, cycling.
const int kCellColors[] = {0xA6CEE3, 0xB2DF8A, 0xFDBF6F, 0xCAB2D6, 0xFB9A99, 0xFFFF99, 0x8DD3C7, 0xD9D9D9};
constexpr int kNumCellColors = sizeof(kCellColors) / sizeof(kCellColors[0]);

}  // namespace

std::string format_mean_std(const MeanStd& v) {
  int decimals = 2;
  if (std::isfinite(v.mean) && v.mean != 0)
    decimals = std::clamp(2 - static_cast<int>(std::floor(std::log10(std::fabs(v.mean)))), 0, 6);
  char buf[96];
  if (v.n == 0)  // not measured (an ideal, a bound): the number alone
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v.mean);
  else if (v.n == 1)  // one value has no spread: "± 0" would claim a measured one
    std::snprintf(buf, sizeof buf, "%.*f (1 epoch)", decimals, v.mean);
  else
    std::snprintf(buf, sizeof buf, "%.*f ± %.*f", decimals, v.mean, decimals, v.std);
  return buf;
}

void draw_bar_chart(const std::string& png_path, const BarChart& chart, PngOptions png) {
  double top = 0;
  for (const auto& b : chart.bars) top = std::max(top, b.value.mean + b.value.std);
  top = top > 0 ? top * 1.2 : 1.0;  // headroom for the value labels
  const int n = static_cast<int>(chart.bars.size());
  render_png(png_path, png, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote(chart.title) << "\n"
       << "set ylabel " << gp_quote(chart.ylabel) << "\n"
       << "unset key\n"
       << "set border 3\n"
       << "set grid ytics lc rgb \"#DDDDDD\"\n"
       << "set ytics nomirror\n"
       << "set style fill solid 0.85 border rgb \"#333333\"\n"
       << "set boxwidth 0.55\n"
       << "set bmargin 6\n"
       << "set xrange [-0.7:" << n - 0.3 << "]\n"
       << "set yrange [0:" << top << "]\n";
    gp << "set xtics nomirror scale 0 (";
    for (int i = 0; i < n; ++i) gp << (i ? ", " : "") << gp_quote(chart.bars[i].label) << " " << i;
    gp << ")\n";
    for (int i = 0; i < n; ++i) {
      const MeanStd& v = chart.bars[i].value;
      const std::string text = format_mean_std(v) + (chart.unit.empty() ? "" : " " + chart.unit);
      gp << "set label " << i + 1 << " " << gp_quote(text) << " at " << i << "," << v.mean + v.std
         << " center offset 0,1.2 front\n";
    }
    std::vector<std::tuple<int, double, double, int>> rows;
    for (int i = 0; i < n; ++i)
      rows.emplace_back(i, chart.bars[i].value.mean, chart.bars[i].value.std, kBarColors[i % kNumBarColors]);
    gp << "plot '-' using 1:2:3:4 with boxerrorbars lc rgb variable lw 1.5\n";
    gp.send1d(rows);
  });
}

void draw_loss_curves(const std::string& png_path, const std::vector<LossSeries>& series, PngOptions png) {
  render_png(png_path, png, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote("Training loss\n(runs that train the same way draw the same curve)") << "\n"
       << "set xlabel \"epoch (each epoch's batches spread evenly over it)\"\n"
       << "set ylabel \"training loss (cross-entropy, nats)\"\n"
       << "set key top right box opaque\n"
       << "set grid lc rgb \"#DDDDDD\"\n"
       << "set xrange [0:*]\n"
       << "plot ";
    // Thickest first: a later, thinner line lies inside an equal earlier one.
    const int k = static_cast<int>(series.size());
    for (int i = 0; i < k; ++i) {
      const bool few = series[i].points.size() < 30;  // per-epoch points: mark them
      const double width = 1.5 + 1.2 * (k - 1 - i);
      gp << (i ? ", " : "") << "'-' using 1:2 with " << (few ? "linespoints pt 7 ps 1.2" : "lines") << " lw "
         << width << " dt " << kDashTypes[i % kNumDashTypes] << " lc rgb \"" << kLineColors[i % kNumLineColors] << "\" title "
         << gp_quote(series[i].label);
    }
    gp << "\n";
    for (const auto& s : series) gp.send1d(s.points);
  });
}

void draw_schedule(const std::string& png_path, int m, int n, PngOptions png) {
  const int clocks = m + n - 1;
  // Square-ish cells, big enough for two digits; very large schedules get smaller ones.
  const int cell = std::clamp(3000 / std::max(clocks, 1), 40, 90);
  png.width = std::max(760, 180 + cell * clocks);
  png.height = std::max(320, 200 + cell * n);
  const int font = std::clamp(cell / 4, 9, 18);
  const double bubble = 100.0 * (n - 1) / clocks;

  std::vector<std::tuple<int, int>> all_cells;
  std::vector<std::tuple<int, int, int, int>> busy;  // clock, stage, micro-batch, colour
  for (int k = 0; k < clocks; ++k)
    for (int j = 0; j < n; ++j) all_cells.emplace_back(k, j);
  const auto schedule = schedule_clocks(m, n);
  for (int k = 0; k < clocks; ++k)
    for (const auto& [i, j] : schedule[k]) busy.emplace_back(k, j, i, kCellColors[i % kNumCellColors]);

  char title[256];
  std::snprintf(title, sizeof title,
                "GPipe clock-cycle schedule: m = %d micro-batch%s on n = %d stage%s, %d clock%s\n"
                "cell = micro-batch index; blank cells are the bubble (%.0f%% of each stage's time)",
                m, m == 1 ? "" : "es", n, n == 1 ? "" : "s", clocks, clocks == 1 ? "" : "s", bubble);
  render_png(png_path, png, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote(title) << "\n"
       << "set xlabel \"clock cycle\"\n"
       << "set ylabel \"stage (device)\"\n"
       << "unset key\n"
       << "set xrange [-0.5:" << clocks - 0.5 << "]\n"
       << "set yrange [" << n - 0.5 << ":-0.5]\n"  // reversed: stage 0 on top, as in GPipe's figure
       << "set xtics 0,1," << clocks - 1 << " scale 0 out nomirror\n"
       << "set size ratio -1\n";
    gp << "set ytics scale 0 nomirror (";
    for (int j = 0; j < n; ++j) gp << (j ? ", " : "") << "\"stage " << j << "\" " << j;
    gp << ")\n";
    gp << "plot '-' using 1:2:(0.5):(0.5) with boxxyerror fs empty lc rgb \"#999999\" lw 1, "
       << "'-' using 1:2:(0.46):(0.46):4 with boxxyerror fs solid 1.0 noborder lc rgb variable, "
       << "'-' using 1:2:(sprintf(\"%d\", $3)) with labels font \"sans," << font << "\"\n";
    gp.send1d(all_cells);
    gp.send1d(busy);
    gp.send1d(busy);
  });
}

}  // namespace kit::plots
