#include "tp_figures.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "kit/errors.h"
#include "summary_json.h"

namespace kit::plots {
namespace {

using nlohmann::json;

const SummaryReader kSummary{"bench/tensor_parallel.py's summary.json", "python3 bench/tensor_parallel.py"};

// One colour per kind of run, the same in both panels and every preset.
const int kRunColors[] = {0x4C72B0, 0xDD8452, 0x55A868};

struct Panel {
  std::string title, ylabel, format;  // format: printf of the value label
  std::vector<std::tuple<double, double, int, std::string>> bars;  // x, value, colour, label
  std::vector<std::pair<double, std::string>> tics;                // x, preset name
};

// Bars grouped by preset: x = 4 * preset + run, a gap between presets.
void draw_panel(Gnuplot& gp, const Panel& p) {
  double top = 0;
  for (const auto& b : p.bars) top = std::max(top, std::get<1>(b));
  gp << "set title " << gp_quote(p.title) << "\n"
     << "set ylabel " << gp_quote(p.ylabel) << "\n"
     << "set yrange [0:" << (top > 0 ? 1.2 * top : 1.0) << "]\n"
     << "set xrange [-0.8:" << 4 * p.tics.size() - 1.2 << "]\n"
     << "unset label\n";
  gp << "set xtics nomirror scale 0 (";
  for (size_t i = 0; i < p.tics.size(); ++i) gp << (i ? ", " : "") << gp_quote(p.tics[i].second) << " " << p.tics[i].first;
  gp << ")\n";
  int n = 0;
  for (const auto& [x, v, colour, label] : p.bars) {
    char text[64];
    std::snprintf(text, sizeof text, p.format.c_str(), v);
    gp << "set label " << ++n << " " << gp_quote(text) << " at " << x << "," << v << " center offset 0,0.8 front\n";
  }
  std::vector<std::tuple<double, double, int>> rows;
  for (const auto& [x, v, colour, label] : p.bars) rows.emplace_back(x, v, colour);
  gp << "plot '-' using 1:2:3 with boxes lc rgb variable notitle";
  // The legend: one invisible point per kind of run, in its colour.
  for (int k = 0; k < 3; ++k) {
    std::string name;
    for (const auto& b : p.bars)
      if (std::get<2>(b) == kRunColors[k]) name = std::get<3>(b);
    gp << ", NaN with boxes lc rgb " << gp_quote([&] {
      char c[16];
      std::snprintf(c, sizeof c, "#%06X", kRunColors[k]);
      return std::string(c);
    }()) << " title " << gp_quote(name);
  }
  gp << "\n";
  gp.send1d(rows);
}

}  // namespace

std::vector<std::string> draw_tp_figures(const std::string& runs_dir, const std::string& out_dir,
                                         const PngOptions& png) {
  const std::string path = runs_dir + "/summary.json";
  std::ifstream f(path);
  if (!f) throw Error("cannot read " + path + ": run python3 bench/tensor_parallel.py --out " + runs_dir + " first");
  json s;
  try {
    s = json::parse(f);
  } catch (const std::exception& e) {
    throw Error(path + " is not JSON: " + e.what());
  }
  const json& st = kSummary.field(s, "settings", path);
  char setup[200];
  std::snprintf(setup, sizeof setup, "global batch %d x %d tokens, %d thread(s) per process, %d cores",
                kSummary.field(st, "batch_size", path).get<int>(), kSummary.field(st, "seq_len", path).get<int>(),
                kSummary.field(st, "threads", path).get<int>(), kSummary.field(st, "cores", path).get<int>());
  Panel tokens{"Throughput", "tokens per second", "%.0f", {}, {}};
  Panel comm{"Communication per step\n(TP: time blocked in the group's all-reduces; DP: in average_gradients)",
             "seconds per step", "%.3f", {}, {}};
  int i = 0;
  for (const json& preset : kSummary.field(s, "presets", path)) {
    const std::string name = kSummary.field(preset, "preset", path).get<std::string>();
    int k = 0;
    for (const json& r : kSummary.field(preset, "runs", path)) {
      const double x = 4.0 * i + k;
      const int colour = kRunColors[k % 3];
      const std::string label = kSummary.field(r, "label", path).get<std::string>();
      tokens.bars.emplace_back(x, kSummary.field(r, "tokens_per_s", path).get<double>(), colour, label);
      comm.bars.emplace_back(x, kSummary.field(r, "comm_s_per_step", path).get<double>(), colour, label);
      ++k;
    }
    tokens.tics.emplace_back(4.0 * i + 1, name);
    comm.tics.emplace_back(4.0 * i + 1, name);
    ++i;
  }
  if (i == 0) throw Error(path + " holds no preset: run python3 bench/tensor_parallel.py again");
  const std::string out = out_dir + "/" + kTpFigureFile;
  PngOptions size = png;
  size.width = 1400;
  size.height = 620;
  render_png(out, size, [&](Gnuplot& gp) {
    gp << "set multiplot layout 1,2 title "
       << gp_quote(std::string("Tensor parallelism (t = 2) against one process and data parallelism (2 ranks)\n") +
                   setup)
       << "\n"
       << "set border 3\nset grid ytics lc rgb \"#DDDDDD\"\nset ytics nomirror\n"
       << "set style fill solid 0.85 border rgb \"#333333\"\nset boxwidth 0.8\n"
       << "set key below horizontal\nset tmargin 5\n";
    draw_panel(gp, tokens);
    draw_panel(gp, comm);
    gp << "unset multiplot\n";
  });
  return {out};
}

}  // namespace kit::plots
