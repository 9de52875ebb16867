// plot_figures: the benchmark figures of Problems 1.3 and 2.3, the loss curves, the
// clock-cycle schedule picture, and a summary table and JSON, from the runs' metrics; the
// pipeline schedules' and TeraPipe's figures, whose timelines this program draws, from their
// benchmark's directory (--pipeline-runs, --terapipe-runs); and the handout's pictures
// (subcommands `schedule` and `grid`). The other benchmarks draw their own figures
// (bench/tensor_parallel.py, zero.py, grid.py, planner.py with bench/gnuplot_png.py).
//   ./build/plot_figures                                   # the programs' default --out paths
//   ./build/plot_figures --dp-single runs/dp_w1 --dp-multi runs/dp_w2 --model-parallel runs/mp.json
//                        --pipeline runs/pp.json --single runs/train.json --out submit_figures
//   ./build/plot_figures schedule 4x3 -o handout/figures/schedule_4x3.png
//   ./build/plot_figures grid 2,2,4 --gpus-per-node 4 -o handout/figures/grid_w16_d2_p2_t4.png   # Problem 6.1
//   ./build/plot_figures --pipeline-runs runs/pipeline_training --out submit_figures   # Problem 3 only
//   ./build/plot_figures --terapipe-runs runs/terapipe --out submit_figures              # Problem 7 only
#include <CLI/CLI.hpp>
#include <iostream>

#include "figures.h"
#include "grid_picture.h"
#include "kit/errors.h"
#include "make_figures.h"
#include "pipeline_figures.h"
#include "terapipe_figures.h"

namespace {

int draw_schedule_only(const std::string& size_text, std::string out, const kit::plots::PngOptions& png) {
  const auto size = kit::plots::parse_schedule_size(size_text);
  if (out.empty())
    out = "schedule_" + std::to_string(size.micro_batches) + "x" + std::to_string(size.stages) + ".png";
  kit::plots::draw_schedule(out, size.micro_batches, size.stages, png);
  std::cout << "wrote " << out << "\n";
  return 0;
}

// Draws the grid first, so a grid too large to draw prints nothing, then prints its groups.
int draw_grid_only(const std::string& shape_text, int gpus_per_node, std::string out,
                   const kit::plots::PngOptions& png) {
  const auto shape = kit::plots::parse_grid_shape(shape_text);
  kit::plots::check_gpus_per_node(gpus_per_node);
  if (out.empty()) out = kit::plots::grid_png_name(shape);
  kit::plots::draw_grid(out, shape, gpus_per_node, png);
  kit::plots::print_grid(std::cout, shape, gpus_per_node);
  std::cout << "wrote " << out << "\n";
  return 0;
}

int draw_all(const kit::plots::FigureOptions& options) {
  const auto summary = kit::plots::make_figures(options);
  kit::plots::print_table(std::cout, summary);
  std::cout << "\n";
  for (const auto& w : summary.warnings) std::cerr << "warning: " << w << "\n";
  for (const auto& n : summary.notes) std::cout << "note: " << n << "\n";
  for (const auto& f : summary.figures) std::cout << "wrote " << f << "\n";
  std::cout << "wrote " << (options.out_dir + "/" + kit::plots::kSummaryFile) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Draw the benchmark figures (data parallel: world 1 vs world 2; model vs pipeline parallel), the loss curves "
      "and the clock-cycle schedule from the runs' metrics JSON, and print the numbers. Each run is a metrics file "
      "or a directory of per-rank files; a run left at its default path that does not exist is skipped. Subcommands "
      "draw the handout's pictures: schedule (the clock-cycle schedule) and grid (the 3D process grid)."};
  kit::plots::FigureOptions o;
  std::string schedule = "4x3";
  app.add_option("--dp-single", o.dp_single.path, "Data-parallel run at world size 1 (batch 64)")
      ->capture_default_str();
  app.add_option("--dp-multi", o.dp_multi.path, "Data-parallel run at world size 2 (batch 128)")
      ->capture_default_str();
  app.add_option("--model-parallel", o.model_parallel.path, "run_pipeline run in model-parallel mode")
      ->capture_default_str();
  app.add_option("--pipeline", o.pipeline.path, "run_pipeline run in pipeline-parallel mode")->capture_default_str();
  app.add_option("--single", o.single.path,
                 "Single-process run (train), for the loss curves; read only when given (the setup check writes "
                 "runs/train.json too)")
      ->capture_default_str();
  app.add_option("--out", o.out_dir, "Directory for the figures and summary.json")->capture_default_str();
  app.add_option("--schedule", schedule,
                 "Size of the schedule picture, MxN: M micro-batches on N stages (default: the --pipeline run's, "
                 "else 4x3)");
  std::string pipeline_runs;
  app.add_option("--pipeline-runs", pipeline_runs,
                 "Draw only the pipeline-schedule figures (pp_schedule_timelines.png, pp_schedule_throughput.png) "
                 "from DIR/summary.json of bench/pipeline_schedules.py");
  std::string terapipe_runs;
  app.add_option("--terapipe-runs", terapipe_runs,
                 "Draw only the TeraPipe figures (terapipe_slicing.png: measured and predicted time per slicing; "
                 "terapipe_timeline.png: GPipe's and the DP slicing's timelines at the largest L) from DIR/summary.json "
                 "of bench/terapipe.py and the rank files it names");
  app.add_option("--gnuplot", o.png.gnuplot, "The gnuplot program to run")->capture_default_str();

  std::string schedule_size = "4x3", schedule_out;
  auto* only_schedule =
      app.add_subcommand("schedule", "Draw only the clock-cycle schedule picture (for the handout)")->fallthrough();
  only_schedule->add_option("size", schedule_size, "MxN: M micro-batches on N stages")->capture_default_str();
  only_schedule->add_option("-o,--out", schedule_out, "PNG file to write (default: schedule_MxN.png)");

  std::string grid_shape = "2,2,4", grid_out;
  int gpus_per_node = 4;
  auto* only_grid = app.add_subcommand("grid",
                                       "Draw only the 3D process grid of Problem 6.1 (for the handout) and print its "
                                       "tensor, data and pipeline groups and each rank's node")
                        ->fallthrough();
  only_grid->add_option("shape", grid_shape, "D,P,T: data, pipeline and tensor sizes (W = D*P*T ranks)")
      ->capture_default_str();
  only_grid->add_option("--gpus-per-node", gpus_per_node, "Ranks per node (ranks fill the nodes in order)")
      ->capture_default_str();
  only_grid->add_option("-o,--out", grid_out, "PNG file to write (default: grid_wW_dD_pP_tT.png)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*only_schedule) return draw_schedule_only(schedule_size, schedule_out, o.png);
    if (*only_grid) return draw_grid_only(grid_shape, gpus_per_node, grid_out, o.png);
    if (!pipeline_runs.empty()) {
      for (const auto& f : kit::plots::draw_pipeline_figures(pipeline_runs, o.out_dir, o.png))
        std::cout << "wrote " << f << "\n";
      return 0;
    }
    if (!terapipe_runs.empty()) {
      for (const auto& f : kit::plots::draw_terapipe_figures(terapipe_runs, o.out_dir, o.png))
        std::cout << "wrote " << f << "\n";
      return 0;
    }
    o.dp_single.given = app.count("--dp-single") > 0;
    o.dp_multi.given = app.count("--dp-multi") > 0;
    o.model_parallel.given = app.count("--model-parallel") > 0;
    o.pipeline.given = app.count("--pipeline") > 0;
    o.single.given = app.count("--single") > 0;
    o.schedule_given = app.count("--schedule") > 0;
    o.schedule = kit::plots::parse_schedule_size(schedule);
    return draw_all(o);
  } catch (const std::exception& e) {  // kit::Error carries the fix; anything else is still reported
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
