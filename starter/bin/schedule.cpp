// schedule: print a pipeline schedule, no tensors. Without --kind, Assignment 1's clock-cycle
// table (Problem 2.1); with --kind, a training schedule of Assignment 2 (Problem 3.1) replayed
// by the simulator, as a table, JSON, a PNG or a Chrome trace; --timeline-json shows a saved one.
//   ./build/schedule -m 4 -n 3
//   ./build/schedule --kind interleaved -p 4 -m 8 -v 2 --png interleaved.png
//   ./build/schedule --kind 1f1b -p 4 -m 8 --trace runs/1f1b.trace.json   # open in ui.perfetto.dev
//   ./build/schedule --timeline-json measured.json --png measured.png
// Options: --help; formats: pipeline_training/simulate.h, pipeline_training/trace_events.h.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "kit/errors.h"
#include "kit/trace.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"
#include "pipeline_training/timeline_report.h"
// plots/ (LibTorch-free, built when gnuplot-iostream is found) is on the include path
// exactly when this program is linked with it.
#if __has_include("timeline_png.h")
#include "timeline_png.h"
#define KIT_HAVE_PLOTS 1
#endif

namespace {

void draw(const kit::pp::Timeline& t, const std::string& heading, const std::string& xlabel, const std::string& png) {
#ifdef KIT_HAVE_PLOTS
  kit::plots::TimelinePicture picture;
  char summary[160];
  std::snprintf(summary, sizeof summary, "makespan %g, bubble %.1f%%", t.makespan, 100 * t.bubble_fraction);
  picture.title = heading + "\n" + summary + "; F3 = forward of micro-batch 3" +
                  (t.shape.virtual_chunks > 1 ? ", F3.1 = on chunk 1" : "") + "; blank = idle (the bubble)";
  picture.xlabel = xlabel;
  picture.virtual_chunks = static_cast<int>(t.shape.virtual_chunks);
  for (const auto& row : t.ranks) {
    std::vector<kit::plots::TimelineBox> boxes;
    for (const kit::pp::TimedAction& a : row)
      boxes.push_back({kit::pp::to_string(a.action), a.action.op == kit::pp::Op::Backward,
                       static_cast<int>(a.action.chunk), a.start, a.end});
    picture.ranks.push_back(boxes);
  }
  kit::plots::draw_timeline(png, picture);
  std::cerr << "wrote " << png << "\n";  // stderr: stdout may be JSON
#else
  (void)t, (void)heading, (void)xlabel;
  throw kit::Error("--png " + png + ": this build has no plotting (plots/ needs gnuplot-iostream and Boost; "
                   "Debian/Ubuntu: apt-get install libgnuplot-iostream-dev gnuplot-nox, then rebuild)");
#endif
}

// What --png and --trace need besides the timeline.
struct Outputs {
  std::string png, trace;
  nlohmann::json trace_info;  // the trace's otherData: program, schedule, costs
};

void show(const kit::pp::Timeline& t, const std::string& heading, const std::string& xlabel, bool json,
          const Outputs& out) {
  if (json) {
    std::cout << kit::pp::timeline_to_json(t).dump() << "\n";
  } else {
    std::cout << heading << "\n\n" << kit::pp::format_timeline(t);
  }
  if (!out.png.empty()) draw(t, heading, xlabel, out.png);
  if (!out.trace.empty()) kit::pp::write_timeline_trace(t, out.trace, out.trace_info, "--trace");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Print a pipeline schedule. Without --kind: Assignment 1's clock-cycle schedule, which micro-batch (i) "
               "runs on which partition (j) at each clock. With --kind: a training schedule (GPipe, 1F1B or "
               "interleaved 1F1B) on p ranks, replayed by the simulator: its timeline per rank, makespan, bubble "
               "and peak in-flight micro-batches, as a table, JSON, a PNG or a Chrome trace (Perfetto)."};
  int64_t m = 4, n = 3, p = 4, v = 1;
  bool json = false;
  std::string kind, timeline_json;
  Outputs out;
  kit::pp::Costs costs;
  app.add_option("-m,--microbatches", m, "Number of micro-batches")->capture_default_str();
  auto* n_opt =
      app.add_option("-n,--partitions,--stages", n, "Number of partitions (clock-cycle table only)")->capture_default_str();
  app.add_flag("--json", json, "Print JSON instead of a table");
  auto* kind_opt = app.add_option("--kind", kind, "Training schedule to simulate: gpipe, 1f1b or interleaved");
  auto* p_opt = app.add_option("-p,--ranks", p, "Pipeline ranks (with --kind)")->capture_default_str();
  auto* v_opt = app.add_option("-v,--virtual", v, "Model chunks v per rank (with --kind interleaved, >= 2; default 2 there)")->capture_default_str();
  // --chunks is the micro-batch count m in the training programs (GPipe's word): refused here.
  kit::refuse_option(app, "--chunks",
                     "schedule takes the model chunks per rank v as --virtual (-v), as train_parallel does, "
                     "and the micro-batches m as -m; --chunks is m in the training programs");
  auto* f_opt = app.add_option("--forward", costs.forward,
                               "Time of one micro-batch's forward through one rank's share of the model (with "
                               "--kind; one chunk's action costs this / v)")->capture_default_str();
  auto* b_opt = app.add_option("--backward", costs.backward, "Same for the backward (with --kind)")->capture_default_str();
  auto* c_opt = app.add_option("--comm", costs.comm, "Time of one message between ranks (with --kind)")->capture_default_str();
  auto* fs_opt = app.add_option("--forward-per-stage", costs.forward_per_stage,
                                "Measured F time of each virtual stage, comma-separated, one per stage (v * p; "
                                "replaces --forward)")
                     ->delimiter(',');
  auto* bs_opt = app.add_option("--backward-per-stage", costs.backward_per_stage,
                                "Same for B (replaces --backward)")
                     ->delimiter(',');
  auto* png_opt = app.add_option("--png", out.png, "Also draw the timeline into this PNG file (with --kind or --timeline-json)");
  auto* trace_opt = app.add_option(
      "--trace", out.trace,
      "Also write the timeline as Chrome trace-event JSON here (with --kind or --timeline-json): one track per "
      "rank, F/B as complete events, the time unit as one second; open it in https://ui.perfetto.dev or "
      "chrome://tracing");
  auto* tj_opt = app.add_option("--timeline-json", timeline_json,
                                "Show a timeline saved as JSON (the --kind --json format, or a measured one) instead");
  return kit::guarded_main(argc, argv, app, [&] {
    if (!timeline_json.empty()) {
      for (auto* o : {kind_opt, p_opt, v_opt, f_opt, b_opt, c_opt, fs_opt, bs_opt, n_opt})
        if (o->count() > 0) throw kit::Error(o->get_name() + " does not apply to --timeline-json: the file has the timeline");
      if (!out.trace.empty()) kit::trace::check_trace_path(out.trace, "--trace");
      const kit::pp::Timeline t = kit::pp::read_timeline_file(timeline_json, "--timeline-json");
      const std::string heading = timeline_json + ": p = " + std::to_string(t.shape.ranks) + ", m = " +
                                  std::to_string(t.shape.microbatches) + ", v = " + std::to_string(t.shape.virtual_chunks);
      out.trace_info = {{"program", "schedule"}, {"timeline_json", timeline_json},
                        {"time_unit", "the file's (seconds for a measured timeline)"}};
      show(t, heading, "time", json, out);
      return 0;
    }
    if (kind.empty()) {
      for (auto* o : {p_opt, v_opt, f_opt, b_opt, c_opt, fs_opt, bs_opt, png_opt, trace_opt})
        if (o->count() > 0)
          throw kit::Error(o->get_name() + " needs --kind gpipe|1f1b|interleaved (without --kind this prints "
                           "Assignment 1's clock-cycle table of -m and -n)");
      const kit::Schedule schedule = kit::clock_cycles(m, n);
      std::cout << (json ? kit::schedule_to_json(schedule, m, n).dump() + "\n"
                         : kit::format_schedule_report(schedule, m, n));
      return 0;
    }
    if (n_opt->count() > 0) throw kit::Error("-n is the clock-cycle table's; with --kind give the ranks as -p");
    if (!out.trace.empty()) kit::trace::check_trace_path(out.trace, "--trace");  // before the work
    const kit::pp::ScheduleKind k = kit::pp::parse_schedule_kind(kind);
    if (k == kit::pp::ScheduleKind::Interleaved && v_opt->count() == 0 && p > 1) v = 2;
    const kit::pp::PipelineShape shape{p, m, v};
    const kit::pp::Timeline t = kit::pp::simulate(kit::pp::make_schedule(k, shape), shape, costs);
    const std::string heading = kit::pp::simulated_heading(k, shape, costs);
    out.trace_info = {{"program", "schedule"}, {"schedule", kit::pp::to_string(k)}, {"world", p},
                      {"forward", costs.forward},  {"backward", costs.backward},        {"comm", costs.comm},
                      {"time_unit", "one unit of --forward/--backward, shown as one second"}};
    show(t, heading, "time (units of --forward/--backward)", json, out);
    return 0;
  });
}
