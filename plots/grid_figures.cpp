#include "grid_figures.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "kit/errors.h"
#include "summary_json.h"

namespace kit::plots {
namespace {

using nlohmann::json;

const SummaryReader kSummary{"bench/grid.py's summary.json", "python3 bench/grid.py"};


// The kinds of communication, bottom to top of a stacked bar, and their colours.
const char* const kKinds[] = {"data", "tensor", "pipeline", "embedding"};
const char* const kKindTitles[] = {"data (gradient all-reduce)", "tensor (the blocks' all-reduces)",
                                   "pipeline (P2P receives, bubble included)", "embedding (tied wte gradient)"};
const char* const kKindColors[] = {"#4C72B0", "#DD8452", "#55A868", "#8172B3"};
const char* const kGridColor = "#4C72B0";  // the same colours as numbers, for lc rgb variable
const char* const kReferenceColor = "#999999";
constexpr int kGridRgb = 0x4C72B0, kReferenceRgb = 0x999999;

// One bar: a factorisation's numbers, read from a record of summary.json.
struct Bar {
  std::string label;
  bool reference = false;
  double tokens_per_s = 0, step_time_s = 0;
  double comm[4] = {0, 0, 0, 0};
};

// The records grouped by preset, in the order they first appear.
std::vector<std::pair<std::string, std::vector<Bar>>> read_bars(const json& s, const std::string& path) {
  const json& records = kSummary.field(s, "records", path);
  if (!records.is_array() || records.empty())
    throw Error(path + " holds no record: run " + kSummary.make_it + " again");
  std::vector<std::pair<std::string, std::vector<Bar>>> presets;
  for (size_t i = 0; i < records.size(); ++i) {
    const json& r = records[i];
    const std::string where = path + ": records[" + std::to_string(i) + "]";
    Bar b;
    b.label = kSummary.text(r, "label", where);
    b.reference = kSummary.boolean(r, "reference", where);
    b.tokens_per_s = kSummary.number(r, "tokens_per_s", where);
    b.step_time_s = kSummary.number(r, "step_time_s", where);
    const json& comm = kSummary.field(r, "comm_s_per_step", where);
    for (int k = 0; k < 4; ++k) b.comm[k] = kSummary.number(comm, kKinds[k], where + ".comm_s_per_step");
    const std::string& preset = kSummary.text(r, "preset", where);
    auto it = std::find_if(presets.begin(), presets.end(), [&](const auto& p) { return p.first == preset; });
    if (it == presets.end()) it = presets.insert(presets.end(), {preset, {}});
    it->second.push_back(b);
  }
  return presets;
}

void xtics(Gnuplot& gp, const std::vector<Bar>& bars) {
  gp << "set xrange [-0.7:" << bars.size() - 0.3 << "]\n"
     << "set xtics nomirror scale 0 (";
  for (size_t i = 0; i < bars.size(); ++i) gp << (i ? ", " : "") << gp_quote(bars[i].label) << " " << i;
  gp << ")\n";
}

void draw_tokens(Gnuplot& gp, const std::string& preset, const std::vector<Bar>& bars) {
  double top = 0;
  for (const auto& b : bars) top = std::max(top, b.tokens_per_s);
  gp << "set title " << gp_quote(preset + ": throughput (the global batch's tokens per second)") << "\n"
     << "set ylabel \"tokens per second\"\n"
     << "set yrange [0:" << (top > 0 ? 1.2 * top : 1.0) << "]\n"
     << "unset label\n";
  xtics(gp, bars);
  std::vector<std::tuple<double, double, int>> rows;  // x, tokens/s, colour
  for (size_t i = 0; i < bars.size(); ++i) {
    char text[32];
    std::snprintf(text, sizeof text, "%.0f", bars[i].tokens_per_s);
    gp << "set label " << i + 1 << " " << gp_quote(text) << " at " << i << "," << bars[i].tokens_per_s
       << " center offset 0,0.8 front\n";
    rows.emplace_back(i, bars[i].tokens_per_s, bars[i].reference ? kReferenceRgb : kGridRgb);
  }
  gp << "plot '-' using 1:2:3 with boxes lc rgb variable notitle, "
     << "NaN with boxes lc rgb " << gp_quote(kGridColor) << " title \"a grid of W ranks\", "
     << "NaN with boxes lc rgb " << gp_quote(kReferenceColor) << " title \"one process (the reference)\"\n";
  gp.send1d(rows);
}

void draw_comm(Gnuplot& gp, const std::string& preset, const std::vector<Bar>& bars) {
  // rows: x, the cumulative tops of the four kinds, the step time.
  std::vector<std::tuple<double, double, double, double, double, double>> rows;
  double top = 0;
  for (size_t i = 0; i < bars.size(); ++i) {
    double cum[4], at = 0;
    for (int k = 0; k < 4; ++k) cum[k] = (at += bars[i].comm[k]);
    rows.emplace_back(i, cum[0], cum[1], cum[2], cum[3], bars[i].step_time_s);
    top = std::max({top, cum[3], bars[i].step_time_s});
  }
  gp << "set title " << gp_quote(preset + ": communication seconds per step, by kind\n(each kind: the largest over "
                                          "the ranks; diamond: the step time, the slowest rank's)")
     << "\n"
     << "set ylabel \"seconds per step\"\n"
     << "set yrange [0:" << (top > 0 ? 1.15 * top : 1.0) << "]\n"
     << "unset label\n";
  xtics(gp, bars);
  // Tallest first: each later box covers the bottom of the one before, so they stack.
  gp << "plot ";
  for (int k = 3; k >= 0; --k)
    gp << "'-' using 1:" << k + 2 << " with boxes lc rgb " << gp_quote(kKindColors[k]) << " title "
       << gp_quote(kKindTitles[k]) << ", ";
  gp << "'-' using 1:6 with points pt 13 ps 2 lc rgb \"#000000\" title \"step time\"\n";
  for (int i = 0; i < 5; ++i) gp.send1d(rows);
}

}  // namespace

std::vector<std::string> draw_grid_figures(const std::string& runs_dir, const std::string& out_dir,
                                           const PngOptions& png) {
  const std::string path = runs_dir + "/summary.json";
  const json s = kSummary.read(path, runs_dir);
  const auto presets = read_bars(s, path);  // first: another benchmark's summary has no records
  const json& st = kSummary.field(s, "settings", path);
  const json& machine = kSummary.field(s, "machine", path);
  char setup[320];
  std::snprintf(setup, sizeof setup,
                "Every (d, p, t) factorisation of W = %d ranks (data, pipeline, tensor), %s, %d micro-batches per "
                "replica\nglobal batch %d x %d tokens, %d thread(s) per process, %d cores%s",
                static_cast<int>(kSummary.number(st, "world_size", path)),
                kSummary.text(st, "schedule", path).c_str(), static_cast<int>(kSummary.number(st, "chunks", path)),
                static_cast<int>(kSummary.number(st, "batch_size", path)), static_cast<int>(kSummary.number(st, "seq_len", path)),
                static_cast<int>(kSummary.number(st, "threads", path)), static_cast<int>(kSummary.number(machine, "cores", path)),
                kSummary.boolean(machine, "oversubscribed", path) ? " (oversubscribed: ranks share cores)" : "");
  const std::string out = out_dir + "/" + kGridSweepFigureFile;
  size_t widest = 0;
  for (const auto& p : presets) widest = std::max(widest, p.second.size());
  // The two panels of a preset one above the other: the full width for the bars' labels.
  PngOptions size = png;
  size.width = std::max(1400, 150 * static_cast<int>(widest) + 200);
  size.height = 80 + 2 * 470 * static_cast<int>(presets.size());
  render_png(out, size, [&](Gnuplot& gp) {
    gp << "set multiplot layout " << 2 * presets.size() << ",1 title " << gp_quote(std::string("3D grid sweep\n") + setup)
       << "\n"
       << "set border 3\nset grid ytics lc rgb \"#DDDDDD\"\nset ytics nomirror\n"
       << "set style fill solid 0.85 border rgb \"#333333\"\nset boxwidth 0.7\n"
       << "set key below horizontal\nset tmargin 4\n";
    for (const auto& [preset, bars] : presets) {
      draw_tokens(gp, preset, bars);
      draw_comm(gp, preset, bars);
    }
    gp << "unset multiplot\n";
  });
  return {out};
}

}  // namespace kit::plots
