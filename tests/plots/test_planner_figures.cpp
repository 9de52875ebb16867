// plot_figures --planner-runs: the planner's two figures from bench/planner.py's summary.json,
// and a message naming the file, the field and the command that writes it when that file is
// missing or wrong.
#include <gtest/gtest.h>

#include "gnuplot_png.h"
#include "kit/errors.h"
#include "planner_figures.h"
#include "plots_test_util.h"

namespace {
using namespace plots_test;
using namespace kit::plots;

json record(const std::string& label, bool reference, double measured, double predicted) {
  return {{"label", label}, {"reference", reference}, {"measured_s", measured}, {"predicted_s", predicted}};
}

json strategy(const std::string& label, double pipeline, double data) {
  return {{"label", label}, {"pipeline_s", pipeline}, {"data_s", data}, {"total_s", pipeline + data}};
}

// What bench/planner.py writes, reduced to the fields the figures read.
json summary() {
  return {{"machine", {{"cores", 2}, {"gemm_gflops", 100.0}}},
          {"records", {record("d=1 p=1 t=1", true, 0.02, 0.018), record("d=2 p=1 t=1", false, 0.015, 0.012),
                       record("d=1 p=2 t=1", false, 0.017, 0.016), record("d=1 p=1 t=2", false, 0.03, 0.02)}},
          {"accuracy", {{"spearman", 0.8}, {"measured_best", "d=2 p=1 t=1"}, {"measured_best_predicted_rank", 1},
                        {"mean_abs_relative_error", 0.15}}},
          {"clusters",
           {{{"name", "v100_node"}, {"cluster", "one node of 8 V100"}, {"model", "GPT-2 124M"}, {"batch", 512},
             {"seq_len", 1024},
             {"strategies", {strategy("d=8 p=1 t=1 mb=2 1f1b", 1.2, 0.1), strategy("d=4 p=2 t=1 mb=2 1f1b", 1.3, 0.05)}}},
            {{"name", "mixed"}, {"cluster", "mixed generations"}, {"model", "GPT-2 124M"}, {"batch", 512},
             {"seq_len", 1024}, {"strategies", {strategy("d=4 p=4 t=1 mb=1 1f1b", 0.4, 0.002)}}}}}};
}

std::string draw_error(const std::string& runs_dir) {
  return message_of<kit::Error>([&] { draw_planner_figures(runs_dir, runs_dir + "/figures", PngOptions{}); });
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "the message should mention \"" << part << "\"; it is:\n" << text;
}

TEST(PlannerFigures, DrawsBothPngs) {
  TempDir dir;
  write_json(dir / "summary.json", summary());
  const auto files = draw_planner_figures(dir.path(), dir / "figures", PngOptions{});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], dir / "figures/planner_accuracy.png");
  EXPECT_EQ(files[1], dir / "figures/planner_clusters.png");
  for (const auto& f : files) EXPECT_TRUE(is_png_file(f)) << f;
}

// Fewer than two distinct records give no Spearman: null, drawn as n/a.
TEST(PlannerFigures, NoSpearmanIsDrawnAsNotAvailable) {
  TempDir dir;
  json s = summary();
  s["accuracy"]["spearman"] = nullptr;
  write_json(dir / "summary.json", s);
  EXPECT_EQ(draw_planner_figures(dir.path(), dir / "figures", PngOptions{}).size(), 2u);
}

TEST(PlannerFigures, MissingSummaryNamesFileAndCommand) {
  TempDir dir;
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, dir / "summary.json");
  expect_contains(msg, "python3 bench/planner.py --out " + dir.path());
}

TEST(PlannerFigures, MissingPredictionNamesRecordAndField) {
  TempDir dir;
  json s = summary();
  s["records"][2].erase("predicted_s");
  write_json(dir / "summary.json", s);
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "records[2]");
  expect_contains(msg, "\"predicted_s\"");
  expect_contains(msg, "bench/planner.py");
  EXPECT_FALSE(fs::exists(dir / "figures/planner_accuracy.png"));
}

TEST(PlannerFigures, ClusterWithoutStrategiesNamesIt) {
  TempDir dir;
  json s = summary();
  s["clusters"][1]["strategies"] = json::array();
  write_json(dir / "summary.json", s);
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "clusters[1]");
  expect_contains(msg, "\"strategies\" is not a non-empty list");
  EXPECT_FALSE(fs::exists(dir / "figures/planner_accuracy.png"));
}

// Another benchmark's summary.json (here bench/grid.py's) is refused, not drawn as nothing.
TEST(PlannerFigures, AnotherBenchmarksSummaryIsRefused) {
  TempDir dir;
  write_json(dir / "summary.json",
             {{"settings", {{"world_size", 2}}},
              {"records", {{{"label", "d=1 p=1 t=1"}, {"reference", true}, {"step_time_s", 0.5}}}}});
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "\"measured_s\"");
  expect_contains(msg, "is it bench/planner.py's summary.json?");
}

TEST(PlannerFigures, ATextWhereANumberBelongs) {
  TempDir dir;
  json s = summary();
  s["accuracy"]["spearman"] = "high";
  write_json(dir / "summary.json", s);
  expect_contains(draw_error(dir.path()), "\"spearman\" is not a number");
}

}  // namespace
