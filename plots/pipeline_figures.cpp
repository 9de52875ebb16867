#include "pipeline_figures.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "figures.h"
#include "kit/errors.h"
#include "summary_json.h"
#include "timeline_png.h"

namespace kit::plots {
namespace {

using nlohmann::json;

const SummaryReader kSummary{"bench/pipeline_schedules.py's summary.json", "python3 bench/pipeline_schedules.py (or scripts/pipeline_job.sh)"};

// A timeline in simulate.h's JSON form ("timeline": one list of actions per rank), times
// in seconds, drawn in milliseconds.
TimelinePicture picture_of(const json& t, const std::string& title, const std::string& where) {
  TimelinePicture p;
  p.title = title;
  p.xlabel = "time (ms)";
  p.virtual_chunks = kSummary.field(t, "virtual_chunks", where).get<int>();
  for (const json& row : kSummary.field(t, "timeline", where)) {
    std::vector<TimelineBox> boxes;
    for (const json& a : row) {
      const bool backward = kSummary.field(a, "op", where).get<std::string>() == "B";
      const int chunk = kSummary.field(a, "chunk", where).get<int>();
      std::string label = (backward ? "B" : "F") + std::to_string(kSummary.field(a, "microbatch", where).get<int>());
      if (p.virtual_chunks > 1) label += "." + std::to_string(chunk);
      boxes.push_back({label, backward, chunk, 1e3 * kSummary.field(a, "start", where).get<double>(),
                       1e3 * kSummary.field(a, "end", where).get<double>()});
    }
    p.ranks.push_back(std::move(boxes));
  }
  return p;
}

std::string ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f ms", 1e3 * seconds);
  return b;
}

}  // namespace

std::vector<std::string> draw_pipeline_figures(const std::string& runs_dir, const std::string& out_dir,
                                               const PngOptions& png) {
  const std::string path = runs_dir + "/summary.json";
  std::ifstream f(path);
  if (!f)
    throw Error("cannot read " + path + ": run python3 bench/pipeline_schedules.py --out " + runs_dir + " first");
  json s;
  try {
    s = json::parse(f);
  } catch (const std::exception& e) {
    throw Error(path + " is not JSON: " + e.what());
  }
  const json& settings = kSummary.field(s, "settings", path);
  char setup[200];
  std::snprintf(setup, sizeof setup, "%s, batch %d x %d tokens, m = %d micro-batches, p = %d ranks, %d thread(s) each",
                kSummary.field(settings, "preset", path).get<std::string>().c_str(), kSummary.field(settings, "batch_size", path).get<int>(),
                kSummary.field(settings, "seq_len", path).get<int>(), kSummary.field(settings, "microbatches", path).get<int>(),
                kSummary.field(settings, "stages", path).get<int>(), kSummary.field(settings, "threads", path).get<int>());

  std::vector<TimelinePicture> panels;
  for (const json& sch : kSummary.field(s, "schedules", path)) {
    const std::string name = kSummary.field(sch, "name", path).get<std::string>();
    const double predicted = kSummary.field(sch, "predicted_step_s", path).get<double>();
    const double measured = kSummary.field(sch, "measured_step_s", path).get<double>();
    char ratio[64];
    std::snprintf(ratio, sizeof ratio, "predicted / measured = %.2f", predicted / measured);
    panels.push_back(picture_of(kSummary.field(sch, "simulated", path),
                                name + ", simulated from the measured per-stage F and B times: step " + ms(predicted),
                                path));
    panels.push_back(picture_of(kSummary.field(sch, "measured", path),
                                name + ", measured (mean step " + ms(measured) + ", " + ratio + ")", path));
  }
  const std::string timelines = out_dir + "/" + kPipelineTimelinesFile;
  draw_timeline_panels(timelines,
                       std::string("Pipeline schedules: simulated above measured, one time axis\n") + setup +
                           "; F3 = forward of micro-batch 3 (F3.1: on chunk 1); blank = idle (the bubble)",
                       panels, png);

  BarChart chart;
  chart.title = std::string("Training throughput, the same batch everywhere\n") + setup +
                "; mean ± std over the timed steps";
  chart.ylabel = "tokens per second";
  for (const json& r : kSummary.field(s, "throughput", path))
    chart.bars.push_back({kSummary.field(r, "label", path).get<std::string>(),
                          {kSummary.field(r, "tokens_per_s", path).get<double>(), r.value("tokens_per_s_std", 0.0), 1}});
  const std::string throughput = out_dir + "/" + kPipelineThroughputFile;
  PngOptions bars = png;
  bars.width = 1300;
  bars.height = 620;
  draw_bar_chart(throughput, chart, bars);
  return {timelines, throughput};
}

}  // namespace kit::plots
