#include "zero_figures.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "kit/errors.h"
#include "summary_json.h"

namespace kit::plots {
namespace {

using nlohmann::json;

const SummaryReader kSummary{"bench/zero.py's summary.json", "python3 bench/zero.py"};

constexpr double kMiB = 1024.0 * 1024.0;

// The four parts of a bar, bottom to top, and their colours.
const char* const kParts[] = {"parameters", "gradients", "optimizer_state", "activations"};
const char* const kPartTitles[] = {"parameters", "gradients (kept between steps)", "optimizer state",
                                   "activations (held after forward)"};
const char* const kPartColors[] = {"#4C72B0", "#DD8452", "#55A868", "#C44E52"};

std::string human_bytes(double b) {
  char text[32];
  if (b >= kMiB) std::snprintf(text, sizeof text, "%.0fM", b / kMiB);
  else if (b >= 1024) std::snprintf(text, sizeof text, "%.0fK", b / 1024);
  else std::snprintf(text, sizeof text, "%.0f", b);
  return text;
}

// A parameter count: 31.6K, 5.03M, 124.4M (powers of 1000).
std::string human_count(double n) {
  char text[32];
  if (n >= 1e6) std::snprintf(text, sizeof text, "%.1fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(text, sizeof text, "%.1fK", n / 1e3);
  else std::snprintf(text, sizeof text, "%.0f", n);
  return text;
}

void draw_memory(const json& s, const std::string& path, const std::string& out, const PngOptions& png) {
  const json& presets = kSummary.field(s, "presets", path);
  if (!presets.is_array() || presets.empty())
    throw Error(path + " holds no preset: run python3 bench/zero.py again");
  const json& st = kSummary.field(s, "settings", path);
  const int W = static_cast<int>(kSummary.number(st, "world_size", path));
  PngOptions size = png;
  size.width = std::max(1150, 650 * static_cast<int>(presets.size()) + 200);
  size.height = 680;
  render_png(out, size, [&](Gnuplot& gp) {
    gp << "set multiplot layout 1," << presets.size() << " title "
       << gp_quote("Memory per rank: plain data parallelism (DP, AdamW) against ZeRO-1 and ZeRO-2, " +
                   std::to_string(W) + " ranks, fp32\nbars: bytes counted from the tensors; diamond: the ZeRO "
                   "paper's formula for parameters + gradients + optimizer state;\nunder each bar: the process's "
                   "peak RSS in MiB or GiB (LibTorch itself, the model built from the seed, everything)")
       << "\n"
       << "set border 3\nset grid ytics lc rgb \"#DDDDDD\"\nset ytics nomirror\n"
       << "set style fill solid 0.85 border rgb \"#333333\"\nset boxwidth 0.75\n"
       << "set key below horizontal maxrows 3\nset tmargin 7\nset bmargin 11\n"
       << "set ylabel \"MiB per rank\"\n";
    size_t panel = 0;
    for (const json& preset : presets) {
      // One legend, under the last panel.
      gp << (++panel == presets.size() ? "set key below horizontal maxrows 3\n" : "unset key\n");
      const std::string name = kSummary.field(preset, "preset", path).get<std::string>();
      const json& runs = kSummary.field(preset, "runs", path);
      // rows: x, then the cumulative tops of the four parts, the formula.
      std::vector<std::tuple<double, double, double, double, double, double>> rows;
      std::vector<std::pair<double, std::string>> tics;
      double top = 0;
      int k = 0;
      for (const json& r : runs) {
        const std::string label = kSummary.field(r, "label", path).get<std::string>();
        const double formula = kSummary.number(kSummary.field(r, "formula_bytes", path), "total", path) / kMiB;
        int rank = 0;
        for (const json& m : kSummary.field(r, "memory_per_rank", path)) {
          double cum[4], at = 0;
          for (int p = 0; p < 4; ++p) cum[p] = (at += kSummary.number(m, kParts[p], path) / kMiB);
          char rss[48];
          const double rss_mib = kSummary.number(m, "peak_rss", path) / kMiB;
          if (rss_mib >= 1024) std::snprintf(rss, sizeof rss, "\\nRSS %.1fG", rss_mib / 1024);
          else std::snprintf(rss, sizeof rss, "\\nRSS %.0fM", rss_mib);
          const double x = k * (W + 1) + rank;
          rows.emplace_back(x, cum[0], cum[1], cum[2], cum[3], formula);
          tics.emplace_back(x, label + "\\nrank " + std::to_string(rank) + rss);
          top = std::max({top, cum[3], formula});
          ++rank;
        }
        ++k;
      }
      gp << "set title " << gp_quote(name + " (P = " + human_count(kSummary.number(preset, "parameter_count", path)) +
                                     " parameters)")
         << "\n"
         << "set yrange [0:" << (top > 0 ? 1.15 * top : 1.0) << "]\n"
         << "set xrange [-0.8:" << k * (W + 1) - 1.2 << "]\n";
      gp << "set xtics nomirror scale 0 (";
      for (size_t i = 0; i < tics.size(); ++i) gp << (i ? ", " : "") << "\"" << tics[i].second << "\" " << tics[i].first;
      gp << ")\n";
      // Tallest first: each later box covers the bottom of the one before, so they stack.
      gp << "plot ";
      for (int p = 3; p >= 0; --p)
        gp << "'-' using 1:" << p + 2 << " with boxes lc rgb " << gp_quote(kPartColors[p]) << " title "
           << gp_quote(kPartTitles[p]) << ", ";
      gp << "'-' using 1:6 with points pt 13 ps 2.2 lc rgb \"#000000\" title \"formula: 4P + 4P + 8P (DP), 4P + 4P + "
            "8P/n (ZeRO-1), 4P + 12P/n (ZeRO-2)\"\n";
      for (int i = 0; i < 5; ++i) gp.send1d(rows);
    }
    gp << "unset multiplot\n";
  });
}

void draw_bandwidth(const json& s, const std::string& path, const std::string& out, const PngOptions& png) {
  const json& c = kSummary.field(s, "collectives", path);
  const json& sizes = kSummary.field(c, "sizes", path);
  if (!sizes.is_array() || sizes.empty()) throw Error(path + ": \"collectives\" holds no size: run bench/zero.py again");
  std::vector<std::tuple<double, double, double>> rows;  // size, ring busbw, built-in busbw
  std::vector<std::pair<double, std::string>> tics;
  double ratio64 = -1;
  for (const json& r : sizes) {
    const double b = kSummary.number(r, "bytes", path);
    rows.emplace_back(b, kSummary.number(r, "ring_busbw_GBps", path), kSummary.number(r, "builtin_busbw_GBps", path));
    tics.emplace_back(b, human_bytes(b));
    if (b == 64 * kMiB) ratio64 = kSummary.number(r, "ratio_ring_to_builtin", path);
  }
  const int W = static_cast<int>(kSummary.number(c, "world_size", path));
  std::string title = "All-reduce bus bandwidth, " + std::to_string(W) + " ranks (" +
                      kSummary.field(c, "backend", path).get<std::string>() + "), float32\nbusbw = 2(n-1)/n x bytes / time";
  if (ratio64 > 0) {
    char text[96];
    std::snprintf(text, sizeof text, "; at 64M the ring takes %.2f x the built-in's time (goal <= 1.5)", ratio64);
    title += text;
  }
  PngOptions size = png;
  size.width = 1000;
  size.height = 620;
  render_png(out, size, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote(title) << "\n"
       << "set logscale x 2\nset logscale y 10\nset border 3\nset grid lc rgb \"#DDDDDD\"\nset ytics nomirror\n"
       << "set xlabel \"tensor size (bytes)\"\nset ylabel \"bus bandwidth (GB/s, log scale)\"\n"
       << "set key bottom right box opaque\n"
       << "set xrange [" << std::get<0>(rows.front()) / 1.5 << ":" << std::get<0>(rows.back()) * 1.5 << "]\n";
    gp << "set xtics nomirror out (";
    for (size_t i = 0; i < tics.size(); ++i) gp << (i ? ", " : "") << gp_quote(tics[i].second) << " " << tics[i].first;
    gp << ")\n";
    gp << "plot '-' using 1:2 with linespoints pt 7 lw 2 lc rgb \"#4C72B0\" title \"ring all-reduce (send/recv, "
          "Problem 5.1)\", "
       << "'-' using 1:3 with linespoints pt 5 lw 2 lc rgb \"#DD8452\" title \"built-in all-reduce (dist::all_reduce)\"\n";
    gp.send1d(rows);
    gp.send1d(rows);
  });
}

}  // namespace

std::vector<std::string> draw_zero_figures(const std::string& runs_dir, const std::string& out_dir,
                                           const PngOptions& png) {
  const std::string path = runs_dir + "/summary.json";
  const json s = kSummary.read(path, runs_dir);
  const std::string memory = out_dir + "/" + kZeroMemoryFigureFile;
  const std::string bandwidth = out_dir + "/" + kRingBandwidthFigureFile;
  draw_memory(s, path, memory, png);
  draw_bandwidth(s, path, bandwidth, png);
  return {memory, bandwidth};
}

}  // namespace kit::plots
