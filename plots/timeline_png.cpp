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

void draw_timeline(const std::string& png_path, const TimelinePicture& picture, PngOptions png) {
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

  // Wide enough that the shortest box holds a short label, within a sensible page width.
  const double plot_px = std::clamp(34.0 * makespan / shortest, 600.0, 2400.0);
  const double px_per_unit = plot_px / makespan;
  png.width = static_cast<int>(plot_px) + 200;
  png.height = std::max(320, 200 + 54 * ranks);
  const int font = std::clamp(static_cast<int>(shortest * px_per_unit / 3), 8, 13);

  // One data set per (forward/backward, shade), so the key shows each colour once.
  const int shades = std::clamp(picture.chunks, 1, kShades);
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

  render_png(png_path, png, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote(picture.title) << "\n"
       << "set xlabel " << gp_quote(picture.xlabel) << "\n"
       << "set xrange [0:" << makespan << "]\n"
       << "set yrange [" << ranks - 0.5 << ":-0.5]\n"  // reversed: rank 0 on top
       << "set xtics out nomirror\n"
       << "set grid xtics lc rgb \"#DDDDDD\"\n"
       << "set key outside top center horizontal\n";
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
        if (picture.chunks > 1)
          title = std::string(is_backward ? "B" : "F") + " chunk " + std::to_string(c) +
                  (picture.chunks > shades && c == shades - 1 ? "+" : "");
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
  });
}

}  // namespace kit::plots
