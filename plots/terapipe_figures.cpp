#include "terapipe_figures.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "kit/errors.h"
#include "summary_json.h"
#include "timeline_png.h"

namespace kit::plots {
namespace {

using nlohmann::json;

const SummaryReader kTerapipeSummary{"bench/terapipe.py's summary.json", "python3 bench/terapipe.py"};


// One run of summary.json's records: a sequence length cut by one slicing.
struct Run {
  int seq_len = 0, slices = 0;
  std::string slicing;  // "none", "uniform:8", "dp"
  std::vector<int> lengths;
  double measured_s = 0, predicted_s = 0;
  std::vector<std::string> metrics;  // the rank files, rank order
  std::string where;                 // "summary.json: records[3]", for messages
};

// The records grouped by sequence length, in the order they first appear.
std::vector<std::pair<int, std::vector<Run>>> read_runs(const json& s, const std::string& path) {
  const json& records = kTerapipeSummary.field(s, "records", path);
  if (!records.is_array() || records.empty())
    throw Error(path + " holds no record: run " + kTerapipeSummary.make_it + " again");
  std::vector<std::pair<int, std::vector<Run>>> by_length;
  for (size_t i = 0; i < records.size(); ++i) {
    const json& r = records[i];
    Run run;
    run.where = path + ": records[" + std::to_string(i) + "]";
    run.seq_len = kTerapipeSummary.integer(r, "seq_len", run.where);
    run.slicing = kTerapipeSummary.text(r, "slicing", run.where);
    run.slices = kTerapipeSummary.integer(r, "slices", run.where);
    for (const json& l : kTerapipeSummary.list(r, "lengths", run.where)) {
      if (!l.is_number_integer()) throw Error(run.where + ": \"lengths\" holds something that is not a whole number");
      run.lengths.push_back(l.get<int>());
    }
    run.measured_s = kTerapipeSummary.number(r, "measured_s", run.where);
    run.predicted_s = kTerapipeSummary.number(r, "predicted_s", run.where);
    for (const json& m : kTerapipeSummary.list(r, "metrics", run.where)) {
      if (!m.is_string()) throw Error(run.where + ": \"metrics\" holds something that is not a file name");
      run.metrics.push_back(m.get<std::string>());
    }
    auto it = std::find_if(by_length.begin(), by_length.end(), [&](const auto& p) { return p.first == run.seq_len; });
    if (it == by_length.end()) it = by_length.insert(by_length.end(), {run.seq_len, {}});
    it->second.push_back(std::move(run));
  }
  return by_length;
}

std::string ms_text(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, seconds < 0.1 ? "%.1f ms" : "%.0f ms", 1e3 * seconds);
  return b;
}

// "32+32+24+16" for a title, cut short when long.
std::string joined(const std::vector<int>& lengths) {
  std::string out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (i == 12) return out + "+...";
    out += (i ? "+" : "") + std::to_string(lengths[i]);
  }
  return out;
}

// ---- terapipe_slicing.png ----------------------------------------------------------------

const char* const kNoneColor = "#999999";     // GPipe, the sequence whole
const char* const kUniformColor = "#4C72B0";  // uniform slicings
const char* const kDpColor = "#DD8452";       // TeraPipe's dynamic program
constexpr int kNoneRgb = 0x999999, kUniformRgb = 0x4C72B0, kDpRgb = 0xDD8452;

int rgb_of(const std::string& slicing) {
  if (slicing == "dp") return kDpRgb;
  if (slicing == "none") return kNoneRgb;
  return kUniformRgb;
}

void draw_length(Gnuplot& gp, int seq_len, const std::vector<Run>& runs) {
  double top = 0;
  for (const Run& r : runs) top = std::max({top, 1e3 * r.measured_s, 1e3 * r.predicted_s});
  std::string title = "L = " + std::to_string(seq_len) + " tokens";
  const auto dp = std::find_if(runs.begin(), runs.end(), [](const Run& r) { return r.slicing == "dp"; });
  if (dp != runs.end()) title += "\nDP slicing: " + joined(dp->lengths);
  gp << "set title " << gp_quote(title) << "\n"
     << "set ylabel \"pipeline time (ms)\"\n"
     << "set yrange [0:" << (top > 0 ? 1.18 * top : 1.0) << "]\n"
     << "set xrange [-0.7:" << runs.size() - 0.3 << "]\n"
     << "unset label\n"
     << "set xtics nomirror scale 0 (";
  for (size_t i = 0; i < runs.size(); ++i) {
    const int n = runs[i].slices;
    gp << (i ? ", " : "") << gp_quote(runs[i].slicing + "\n" + std::to_string(n) + (n == 1 ? " slice" : " slices"))
       << " " << i;
  }
  gp << ")\n";
  std::vector<std::tuple<double, double, int>> bars;  // x, measured ms, colour
  std::vector<std::pair<double, double>> predicted;   // x, predicted ms
  for (size_t i = 0; i < runs.size(); ++i) {
    const double measured = 1e3 * runs[i].measured_s, model = 1e3 * runs[i].predicted_s;
    char value[32];
    std::snprintf(value, sizeof value, measured < 100 ? "%.1f" : "%.0f", measured);
    gp << "set label " << i + 1 << " " << gp_quote(value) << " at " << i << "," << std::max(measured, model)
       << " center offset 0,1 front\n";
    bars.emplace_back(i, measured, rgb_of(runs[i].slicing));
    predicted.emplace_back(i, model);
  }
  gp << "plot '-' using 1:2:3 with boxes lc rgb variable notitle, "
     << "NaN with boxes lc rgb " << gp_quote(kNoneColor) << " title \"none (GPipe)\", "
     << "NaN with boxes lc rgb " << gp_quote(kUniformColor) << " title \"uniform\", "
     << "NaN with boxes lc rgb " << gp_quote(kDpColor) << " title \"dp (TeraPipe)\", "
     << "'-' using 1:2 with points pt 13 ps 1.8 lc rgb \"#000000\" title \"predicted\"\n";
  gp.send1d(bars);
  gp.send1d(predicted);
}

void draw_slicing(const std::string& out, const std::string& setup,
                         const std::vector<std::pair<int, std::vector<Run>>>& by_length, PngOptions png) {
  const int n = static_cast<int>(by_length.size());
  const int cols = std::min(n, 3), rows = (n + cols - 1) / cols;  // three panels a row at most
  size_t widest = 0;
  for (const auto& l : by_length) widest = std::max(widest, l.second.size());
  png.width = std::max(1100, cols * (95 * static_cast<int>(widest) + 160));
  png.height = 130 + 520 * rows;
  render_png(out, png, [&](Gnuplot& gp) {
    gp << "set multiplot layout " << rows << "," << cols << " title "
       << gp_quote("TeraPipe: pipeline time by slicing, measured (bars) and predicted by the fitted model (diamonds)\n" +
                   setup)
       << "\n"
       << "set border 3\nset grid ytics lc rgb \"#DDDDDD\"\nset ytics nomirror\n"
       << "set style fill solid 0.85 border rgb \"#333333\"\nset boxwidth 0.7\n"
       << "set key below horizontal samplen 2\nset tmargin 5\nset bmargin 6\n";
    for (const auto& [seq_len, runs] : by_length) draw_length(gp, seq_len, runs);
    gp << "unset multiplot\n";
  });
}

// ---- terapipe_timeline.png ---------------------------------------------------------------

// The rank file as recorded, or else where bench/terapipe.py puts it under `runs_dir`
// (L<L>/<slicing>/rank<r>.json: the last three parts of the recorded path), so that a
// moved or copied runs directory still draws. "" when neither exists; `moved` is set.
std::string find_rank_file(const std::string& recorded, const std::string& runs_dir, std::string& moved) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path tail;
  const fs::path path(recorded);
  const std::vector<fs::path> parts(path.begin(), path.end());
  for (size_t i = parts.size() >= 3 ? parts.size() - 3 : 0; i < parts.size(); ++i) tail /= parts[i];
  moved = (fs::path(runs_dir) / tail).string();
  if (fs::is_regular_file(recorded, ec)) return recorded;
  return fs::is_regular_file(moved, ec) ? moved : "";
}

// A run's measured timelines, one row per rank, in milliseconds. Units are u = i * n + s for
// micro-batch i and slice s of n = the rank file's lengths; a box reads F<s> (F<i>.<s> with
// more than one micro-batch).
TimelinePicture picture_of(const Run& run, const std::string& runs_dir, const std::string& heading) {
  TimelinePicture p;
  // No axis label: draw_timeline_panels would take its room from the last panel's rows,
  // and with two or four stages that squeezes them; the picture's title names the unit.
  p.xlabel.clear();
  double span = 0;
  for (size_t r = 0; r < run.metrics.size(); ++r) {
    std::string moved;
    const std::string path = find_rank_file(run.metrics[r], runs_dir, moved);
    if (path.empty())
      throw Error("cannot read " + run.metrics[r] + " (" + run.where + ".metrics[" + std::to_string(r) +
                  "], train_parallel --slices's metrics of rank " + std::to_string(r) + "), nor " + moved + ": run " + kTerapipeSummary.make_it +
                  " --out " + runs_dir + " again");
    const json m = kTerapipeSummary.read(path, runs_dir);
    const int n = static_cast<int>(kTerapipeSummary.list(m, "lengths", path).size());
    const int micro = kTerapipeSummary.integer(m, "microbatches", path);
    std::vector<TimelineBox> boxes;
    const json& timeline = kTerapipeSummary.list(m, "timeline", path);
    for (size_t k = 0; k < timeline.size(); ++k) {
      const json& a = timeline[k];
      const std::string where = path + ": timeline[" + std::to_string(k) + "]";
      if (!a.is_array() || a.size() < 5 || !std::all_of(a.begin(), a.end(), [](const json& x) { return x.is_number(); }))
        throw Error(where + " is not [op, unit, stage, start, end, recv] (numbers): run " + kTerapipeSummary.make_it + " again");
      const int op = a[0].get<int>(), unit = a[1].get<int>();
      if (op != 0 && op != 1) throw Error(where + ": op " + std::to_string(op) + " is not 0 (forward) or 1 (backward)");
      if (unit < 0 || unit >= micro * n)
        throw Error(where + ": unit " + std::to_string(unit) + " is not one of the run's " + std::to_string(micro) +
                    " micro-batch(es) x " + std::to_string(n) + " slice(s) (0 to " + std::to_string(micro * n - 1) +
                    "): is the file from train_parallel --slices? Run " + kTerapipeSummary.make_it + " --out " + runs_dir + " again");
      const int i = unit / n, s = unit % n;
      std::string label = (op ? "B" : "F") + (micro > 1 ? std::to_string(i) + "." : std::string()) + std::to_string(s);
      // An action first waits for its input (the 6th number: seconds in P2P receives), then
      // computes: the box is the computing, so the wait shows as the bubble it is.
      const double wait = a.size() > 5 ? std::max(0.0, a[5].get<double>()) : 0.0;
      const double start = std::min(a[3].get<double>() + wait, a[4].get<double>());
      boxes.push_back({label, op == 1, 0, 1e3 * start, 1e3 * a[4].get<double>()});
      span = std::max(span, a[4].get<double>());
    }
    p.ranks.push_back(std::move(boxes));
  }
  p.title = heading + ": this step " + ms_text(span) + "; median over the timed steps " + ms_text(run.measured_s) +
            ", predicted " + ms_text(run.predicted_s);
  return p;
}

// The two panels at the largest L: no slicing above the DP's slicing.
std::vector<TimelinePicture> timeline_panels(const std::string& runs_dir, const std::pair<int, std::vector<Run>>& longest) {
  const auto& [seq_len, runs] = longest;
  const auto find = [&](const char* slicing) -> const Run& {
    const auto it = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.slicing == slicing; });
    if (it == runs.end())
      throw Error(runs_dir + "/summary.json has no \"" + slicing + "\" record at L = " + std::to_string(seq_len) +
                  ": run " + kTerapipeSummary.make_it + " --out " + runs_dir + " again (it runs none, uniform and dp at every L)");
    return *it;
  };
  const Run& none = find("none");
  const Run& dp = find("dp");
  return {picture_of(none, runs_dir, "GPipe, no slicing (each micro-batch's " + std::to_string(seq_len) + " tokens whole)"),
          picture_of(dp, runs_dir, "TeraPipe, the DP's " + std::to_string(dp.slices) + " slices (" + joined(dp.lengths) + ")")};
}

}  // namespace

std::vector<std::string> draw_terapipe_figures(const std::string& runs_dir, const std::string& out_dir,
                                               const PngOptions& png) {
  const std::string path = runs_dir + "/summary.json";
  const json s = kTerapipeSummary.read(path, runs_dir);
  const auto by_length = read_runs(s, path);  // first: another benchmark's summary has no such records
  const json& st = kTerapipeSummary.field(s, "settings", path);
  const int chunks = kTerapipeSummary.integer(st, "chunks", path);
  char setup[320];
  std::snprintf(setup, sizeof setup,
                "%s, K = %d stages (one process each), batch %d rows in %d micro-batch%s, %d thread(s) per process; "
                "%s",
                kTerapipeSummary.text(st, "preset", path).c_str(), kTerapipeSummary.integer(st, "stages", path), kTerapipeSummary.integer(st, "batch_size", path), chunks,
                chunks == 1 ? "" : "es", kTerapipeSummary.integer(st, "threads", path),
                kTerapipeSummary.text(kTerapipeSummary.field(s, "machine", path), "note", path + ": machine").c_str());
  const auto longest = std::max_element(by_length.begin(), by_length.end(),
                                        [](const auto& a, const auto& b) { return a.first < b.first; });
  // Every file read before anything is drawn: bad input leaves no half of the figures.
  const std::vector<TimelinePicture> panels = timeline_panels(runs_dir, *longest);
  const std::string slicing = out_dir + "/" + kTerapipeSlicingFile;
  draw_slicing(slicing,
               std::string(setup) + "\nmeasured: the schedule's span on the slowest rank, median over the timed steps; "
                                    "predicted: m sum t(l, c) + (K - 1) max t(l, c)",
               by_length, png);
  const std::string timeline = out_dir + "/" + kTerapipeTimelineFile;
  draw_timeline_panels(timeline,
                       "Token-sliced pipelining next to GPipe's, the same batch: L = " + std::to_string(longest->first) +
                           " tokens, the last step as measured on each rank, one time axis in ms\n" + setup +
                           "\nF3 = forward of slice 3" + (chunks > 1 ? " (F1.3: micro-batch 1's slice 3)" : "") +
                           "; blank = idle (the bubble)",
                       panels, png);
  return {slicing, timeline};
}

}  // namespace kit::plots
