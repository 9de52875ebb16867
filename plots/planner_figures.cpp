#include "planner_figures.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <tuple>

#include "kit/errors.h"
#include "summary_json.h"

namespace kit::plots {
namespace {

using nlohmann::json;

const SummaryReader kSummary{"bench/planner.py's summary.json", "python3 bench/planner.py"};

const char* const kGridColor = "#4C72B0";       // a grid of W ranks
const char* const kReferenceColor = "#999999";  // the one-process run
const char* const kBestColor = "#C44E52";       // the measured best
constexpr int kGridRgb = 0x4C72B0, kReferenceRgb = 0x999999, kBestRgb = 0xC44E52;
const char* const kPipelineColor = "#4C72B0";   // the pipeline term of a strategy's step
const char* const kDataColor = "#DD8452";       // its data-parallel all-reduce

// One record of summary.json: a grid measured and predicted.
struct Point {
  std::string label;
  bool reference = false;
  double measured_s = 0, predicted_s = 0;
};

std::vector<Point> read_points(const json& s, const std::string& path) {
  const json& records = kSummary.field(s, "records", path);
  if (!records.is_array() || records.empty())
    throw Error(path + " holds no record: run " + kSummary.make_it + " again");
  std::vector<Point> points;
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string where = path + ": records[" + std::to_string(i) + "]";
    const json& r = records[i];
    points.push_back({kSummary.text(r, "label", where), kSummary.boolean(r, "reference", where),
                      kSummary.number(r, "measured_s", where), kSummary.number(r, "predicted_s", where)});
  }
  return points;
}

// One example cluster's best strategies.
struct Bar {
  std::string label;
  double pipeline_s = 0, data_s = 0, total_s = 0;
};
struct Panel {
  std::string name, title;
  std::vector<Bar> bars;  // the best first
};

std::vector<Panel> read_panels(const json& s, const std::string& path) {
  std::vector<Panel> panels;
  const json& clusters = kSummary.list(s, "clusters", path);
  for (size_t i = 0; i < clusters.size(); ++i) {
    const std::string where = path + ": clusters[" + std::to_string(i) + "]";
    const json& c = clusters[i];
    Panel p;
    p.name = kSummary.text(c, "name", where);
    char workload[160];
    std::snprintf(workload, sizeof workload, "%s, batch %d x %d tokens", kSummary.text(c, "model", where).c_str(),
                  kSummary.integer(c, "batch", where), kSummary.integer(c, "seq_len", where));
    p.title = p.name + ": " + kSummary.text(c, "cluster", where) + "\n" + workload;
    const json& strategies = kSummary.list(c, "strategies", where);
    for (size_t k = 0; k < strategies.size(); ++k) {
      const std::string at = where + ".strategies[" + std::to_string(k) + "]";
      const json& x = strategies[k];
      p.bars.push_back({kSummary.text(x, "label", at), kSummary.number(x, "pipeline_s", at),
                        kSummary.number(x, "data_s", at), kSummary.number(x, "total_s", at)});
    }
    panels.push_back(std::move(p));
  }
  return panels;
}

std::string ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, seconds >= 1 ? "%.2f s" : seconds < 0.1 ? "%.1f ms" : "%.0f ms",
                seconds >= 1 ? seconds : 1e3 * seconds);
  return b;
}

// ---- planner_accuracy.png ---------------------------------------------------------------

void draw_accuracy(const std::string& out, const std::vector<Point>& points, const std::string& heading,
                   PngOptions png) {
  double top = 0;
  size_t best = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    top = std::max({top, 1e3 * points[i].measured_s, 1e3 * points[i].predicted_s});
    if (points[i].measured_s < points[best].measured_s) best = i;
  }
  top = top > 0 ? 1.15 * top : 1.0;
  // Labels beside their points, in the order of height alternately below and above, and every
  // other pair on the left, so points close together push their labels apart.
  std::vector<size_t> by_height(points.size());
  for (size_t i = 0; i < points.size(); ++i) by_height[i] = i;
  std::sort(by_height.begin(), by_height.end(),
            [&](size_t a, size_t b) { return points[a].predicted_s < points[b].predicted_s; });
  png.width = 1100;
  png.height = 980;
  render_png(out, png, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote(heading) << "\n"
       << "set border 3\nset grid lc rgb \"#DDDDDD\"\nset xtics nomirror\nset ytics nomirror\n"
       << "set size ratio -1\nset key top left\n"
       << "set xlabel \"measured step time (ms): the sweep's, the slowest rank's mean\"\n"
       << "set ylabel \"predicted step time (ms): plan's pipeline + data terms\"\n"
       << "set xrange [0:" << top << "]\nset yrange [0:" << top << "]\n";
    std::vector<std::tuple<double, double, int>> rows;  // measured ms, predicted ms, colour
    for (size_t k = 0; k < by_height.size(); ++k) {
      const size_t i = by_height[k];
      const Point& p = points[i];
      const double x = 1e3 * p.measured_s, y = 1e3 * p.predicted_s;
      const bool left = (k / 2) % 2 == 1;
      gp << "set label " << k + 1 << " " << gp_quote(std::to_string(i + 1)) << " at " << x << "," << y
         << (left ? " right offset -0.8," : " left offset 0.8,") << (k % 2 ? "0.5" : "-0.5") << " front\n";
      rows.emplace_back(x, y, i == best ? kBestRgb : p.reference ? kReferenceRgb : kGridRgb);
    }
    gp << "plot x with lines dt 2 lw 1.5 lc rgb \"#555555\" title \"y = x (predicted = measured)\", "
       << "'-' using 1:2:3 with points pt 7 ps 2 lc rgb variable notitle, "
       << "NaN with points pt 7 ps 2 lc rgb " << gp_quote(kGridColor) << " title \"a grid of W ranks\", "
       << "NaN with points pt 7 ps 2 lc rgb " << gp_quote(kReferenceColor) << " title \"one process (1,1,1)\", "
       << "NaN with points pt 7 ps 2 lc rgb " << gp_quote(kBestColor) << " title \"the measured best\"";
    // The numbers beside the points, spelled out in the key (close points would hide long labels).
    for (size_t i = 0; i < points.size(); ++i)
      gp << ", NaN with points pt -1 title "
         << gp_quote(std::to_string(i + 1) + ": " + points[i].label + (points[i].reference ? " (one process)" : "") +
                     ", " + ms(points[i].measured_s) + " measured, " + ms(points[i].predicted_s) +
                     " predicted");
    gp << "\n";
    gp.send1d(rows);
  });
}

// ---- planner_clusters.png ---------------------------------------------------------------

void draw_panel(Gnuplot& gp, const Panel& p) {
  const size_t n = p.bars.size();
  double top = 0;
  for (const Bar& b : p.bars) top = std::max(top, b.total_s);
  const bool seconds = top >= 1;
  const double unit = seconds ? 1.0 : 1e3;
  gp << "set title " << gp_quote(p.title) << "\n"
     << "set xlabel \"predicted step time (" << (seconds ? "s" : "ms") << ")\"\n"
     << "set xrange [0:" << (top > 0 ? 1.3 * unit * top : 1.0) << "]\n"
     << "set yrange [-0.7:" << n - 0.3 << "]\n"
     << "unset label\n"
     << "set ytics nomirror scale 0 (";
  // The best at the top.
  for (size_t i = 0; i < n; ++i)
    gp << (i ? ", " : "") << gp_quote(std::to_string(i + 1) + ". " + p.bars[i].label) << " " << n - 1 - i;
  gp << ")\n";
  std::vector<std::tuple<double, double, double, double, double, double>> pipeline, data;  // x y xlo xhi ylo yhi
  for (size_t i = 0; i < n; ++i) {
    const Bar& b = p.bars[i];
    const double y = static_cast<double>(n - 1 - i), x0 = unit * b.pipeline_s, x1 = unit * (b.pipeline_s + b.data_s);
    pipeline.emplace_back(x0 / 2, y, 0, x0, y - 0.35, y + 0.35);
    data.emplace_back((x0 + x1) / 2, y, x0, x1, y - 0.35, y + 0.35);
    gp << "set label " << i + 1 << " " << gp_quote(ms(b.total_s)) << " at " << unit * b.total_s << "," << y
       << " left offset 0.6,0 front\n";
  }
  gp << "plot '-' using 1:2:3:4:5:6 with boxxyerror fc rgb " << gp_quote(kPipelineColor)
     << " title \"pipeline ((m - 1) max T + sum T)\", "
     << "'-' using 1:2:3:4:5:6 with boxxyerror fc rgb " << gp_quote(kDataColor)
     << " title \"data-parallel all-reduce\"\n";
  gp.send1d(pipeline);
  gp.send1d(data);
}

void draw_clusters(const std::string& out, const std::vector<Panel>& panels, PngOptions png) {
  const int n = static_cast<int>(panels.size());
  const int cols = std::min(n, 2), rows = (n + cols - 1) / cols;
  size_t tallest = 0;
  for (const Panel& p : panels) tallest = std::max(tallest, p.bars.size());
  png.width = 1000 * cols;
  png.height = 110 + rows * (200 + 45 * static_cast<int>(tallest));
  render_png(out, png, [&](Gnuplot& gp) {
    gp << "set multiplot layout " << rows << "," << cols << " title "
       << gp_quote("The planner's best strategies for the example clusters (starter/planner/clusters/), fastest on top\n"
                   "bar: the predicted step time, the pipeline term and the data-parallel all-reduce after it")
       << "\n"
       << "set border 3\nset grid xtics lc rgb \"#DDDDDD\"\nset xtics nomirror\n"
       << "set style fill solid 0.85 border rgb \"#333333\"\n"
       << "set key below horizontal samplen 2\nset tmargin 4\nset lmargin 40\n";
    for (const Panel& p : panels) draw_panel(gp, p);
    gp << "unset multiplot\n";
  });
}

}  // namespace

std::vector<std::string> draw_planner_figures(const std::string& runs_dir, const std::string& out_dir,
                                              const PngOptions& png) {
  const std::string path = runs_dir + "/summary.json";
  const json s = kSummary.read(path, runs_dir);
  // Everything read before anything is drawn: bad input leaves no half of the figures.
  const std::vector<Point> points = read_points(s, path);
  const std::vector<Panel> panels = read_panels(s, path);
  const json& acc = kSummary.field(s, "accuracy", path);
  const json& rho = kSummary.field(acc, "spearman", path + ": accuracy");
  if (!rho.is_null() && !rho.is_number()) throw Error(path + ": accuracy: \"spearman\" is not a number (nor null)");
  char spearman[32] = "n/a";
  if (!rho.is_null()) std::snprintf(spearman, sizeof spearman, "%.3f", rho.get<double>());
  const json& machine = kSummary.field(s, "machine", path);
  char heading[512];
  std::snprintf(heading, sizeof heading,
                "The planner against the measured sweep: Spearman %s over %zu runs\n"
                "the measured best (%s) predicted #%d; mean |predicted - measured| / measured %.0f %%\n"
                "this machine: %d cores, GEMM %.1f GFLOP/s per process; W processes share the cores",
                spearman, points.size(), kSummary.text(acc, "measured_best", path + ": accuracy").c_str(),
                kSummary.integer(acc, "measured_best_predicted_rank", path + ": accuracy"),
                100 * kSummary.number(acc, "mean_abs_relative_error", path + ": accuracy"),
                kSummary.integer(machine, "cores", path + ": machine"),
                kSummary.number(machine, "gemm_gflops", path + ": machine"));
  const std::string accuracy = out_dir + "/" + kPlannerAccuracyFile;
  draw_accuracy(accuracy, points, heading, png);
  const std::string clusters = out_dir + "/" + kPlannerClustersFile;
  draw_clusters(clusters, panels, png);
  return {accuracy, clusters};
}

}  // namespace kit::plots
