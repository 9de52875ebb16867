#include "timeline_png.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "kit/errors.h"

namespace kit::plots {
namespace {

constexpr int kMaxRanks = 64;  // beyond this the rows are too thin to read
// Light enough for black text on top; blues and oranges stay apart for colour-blind eyes.
// One shade per chunk, cycling.
const char* const kForwardColors[] = {"#9ECAE1", "#C6DBEF", "#6BAED6", "#DEEBF7"};
const char* const kBackwardColors[] = {"#FDAE6B", "#FDD0A2", "#FD8D3C", "#FEE6CE"};
constexpr int kShades = 4;

using Box = std::tuple<double, double, double, double>;  // x centre, y, half width, half height

}  // namespace

namespace {

// Checks the boxes; returns (last end, shortest action).
std::pair<double, double> extent(const TimelinePicture& picture) {
  const int ranks = static_cast<int>(picture.ranks.size());
  if (ranks == 0) throw Error("timeline picture has no ranks: nothing to draw");
  if (ranks > kMaxRanks)
    throw Error("timeline picture has " + std::to_string(ranks) + " ranks: at most " + std::to_string(kMaxRanks) +
                " can be drawn readably");
  double makespan = 0, shortest = std::numeric_limits<double>::infinity();
  for (const auto& row : picture.ranks)
    for (const TimelineBox& b : row) {
      if (!(b.end >= b.start) || !std::isfinite(b.end))
        throw Error("timeline box '" + b.label + "' ends before it starts (or at no finite time)");
      makespan = std::max(makespan, b.end);
      if (b.end > b.start) shortest = std::min(shortest, b.end - b.start);
    }
  if (makespan <= 0 || !std::isfinite(shortest)) throw Error("timeline picture has no action that takes time");
  return {makespan, shortest};
}

// One plot command: the picture's boxes from 0 to xmax, labels where they fit.
void plot_timeline(Gnuplot& gp, const TimelinePicture& picture, double xmax, double px_per_unit, int font,
                   bool key) {
  const int ranks = static_cast<int>(picture.ranks.size());
  // One data set per (forward/backward, shade), so the key shows each colour once.
  const int shades = std::clamp(picture.virtual_chunks, 1, kShades);
  std::vector<std::vector<Box>> forward(static_cast<size_t>(shades)), backward(forward);
  std::vector<std::tuple<double, int, std::string>> labels;
  for (int r = 0; r < ranks; ++r)
    for (const TimelineBox& b : picture.ranks[static_cast<size_t>(r)]) {
      const double mid = (b.start + b.end) / 2, half = (b.end - b.start) / 2;
      const auto shade = static_cast<size_t>(((b.chunk % shades) + shades) % shades);
      (b.backward ? backward : forward)[shade].emplace_back(mid, r, half, 0.38);
      // A label only where it fits; the colour still tells F from B.
      const double fits = 0.62 * font * static_cast<double>(b.label.size()) + 4;
      if (!b.label.empty() && (b.end - b.start) * px_per_unit >= fits) labels.emplace_back(mid, r, b.label);
    }
  gp << "set title " << gp_quote(picture.title) << "\n"
     << "set xlabel " << gp_quote(picture.xlabel) << "\n"
     << "set xrange [0:" << xmax << "]\n"
     << "set yrange [" << ranks - 0.5 << ":-0.5]\n"  // reversed: rank 0 on top
     << "set xtics out nomirror\n"
     << "set grid xtics lc rgb \"#DDDDDD\"\n"
     << (key ? "set key outside top center horizontal\n" : "unset key\n");
  gp << "set ytics scale 0 nomirror (";
  for (int r = 0; r < ranks; ++r) gp << (r ? ", " : "") << "\"rank " << r << "\" " << r;
  gp << ")\n";
  std::vector<std::string> parts;
  std::vector<const std::vector<Box>*> data;
  for (const bool is_backward : {false, true})
    for (int c = 0; c < shades; ++c) {
      const auto& boxes = (is_backward ? backward : forward)[static_cast<size_t>(c)];
      if (boxes.empty()) continue;
      std::string title = is_backward ? "backward (B)" : "forward (F)";
      if (picture.virtual_chunks > 1)
        title = std::string(is_backward ? "B" : "F") + " chunk " + std::to_string(c) +
                (picture.virtual_chunks > shades && c == shades - 1 ? "+" : "");
      parts.push_back("'-' using 1:2:3:4 with boxxyerror fs solid 1.0 border lc rgb \"#404040\" lc rgb \"" +
                      std::string((is_backward ? kBackwardColors : kForwardColors)[c]) + "\" title " +
                      gp_quote(title));
      data.push_back(&boxes);
    }
  if (!labels.empty())
    parts.push_back("'-' using 1:2:(stringcolumn(3)) with labels font \"sans," + std::to_string(font) +
                    "\" notitle");
  gp << "plot ";
  for (size_t i = 0; i < parts.size(); ++i) gp << (i ? ", " : "") << parts[i];
  gp << "\n";
  for (const auto* boxes : data) gp.send1d(*boxes);
  if (!labels.empty()) gp.send1d(labels);
}

}  // namespace

void draw_timeline(const std::string& png_path, const TimelinePicture& picture, PngOptions png) {
  const auto [makespan, shortest] = extent(picture);
  const int ranks = static_cast<int>(picture.ranks.size());
  // Wide enough that the shortest box holds a short label, within a sensible page width.
  const double plot_px = std::clamp(34.0 * makespan / shortest, 600.0, 2400.0);
  const double px_per_unit = plot_px / makespan;
  png.width = static_cast<int>(plot_px) + 200;
  png.height = std::max(320, 200 + 54 * ranks);
  const int font = std::clamp(static_cast<int>(shortest * px_per_unit / 3), 8, 13);
  render_png(png_path, png, [&](Gnuplot& gp) { plot_timeline(gp, picture, makespan, px_per_unit, font, true); });
}

void draw_timeline_panels(const std::string& png_path, const std::string& title,
                          const std::vector<TimelinePicture>& panels, PngOptions png) {
  if (panels.empty()) throw Error("timeline panels: nothing to draw");
  if (panels.size() > 12) throw Error("timeline panels: at most 12 fit in one picture readably");
  double xmax = 0, shortest = std::numeric_limits<double>::infinity();
  int rows = 0;
  for (const auto& p : panels) {
    const auto [makespan, short_one] = extent(p);
    xmax = std::max(xmax, makespan);
    shortest = std::min(shortest, short_one);
    rows += static_cast<int>(p.ranks.size());
  }
  const double plot_px = std::clamp(34.0 * xmax / shortest, 900.0, 2000.0);
  const double px_per_unit = plot_px / xmax;
  const int font = std::clamp(static_cast<int>(shortest * px_per_unit / 3), 8, 12);
  png.width = static_cast<int>(plot_px) + 200;
  // Each panel: its title, its rows and its time axis; the first also holds the key.
  const int n = static_cast<int>(panels.size());
  png.height = 60 + 70 * n + 50 * rows + 40;
  render_png(png_path, png, [&](Gnuplot& gp) {
    gp << "set multiplot title " << gp_quote(title) << "\n";
    const double top = 1.0 - 60.0 / png.height, bottom = 20.0 / png.height;
    double y = top;
    const double per_row = (top - bottom) / (70.0 * n + 50.0 * rows + 40.0);
    for (int i = 0; i < n; ++i) {
      const auto& p = panels[static_cast<size_t>(i)];
      const double h = per_row * (70.0 + 50.0 * static_cast<double>(p.ranks.size()) + (i == 0 ? 40.0 : 0.0));
      gp << "set origin 0," << y - h << "\nset size 1," << h << "\n"
         << "set lmargin 12\nset rmargin 4\n";
      TimelinePicture panel = p;
      if (i + 1 < n) panel.xlabel.clear();  // the time axis is named once, at the bottom
      plot_timeline(gp, panel, xmax, px_per_unit, font, i == 0);
      y -= h;
    }
    gp << "unset multiplot\n";
  });
}

}  // namespace kit::plots
