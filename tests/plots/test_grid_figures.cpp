// plot_figures --grid-runs: the grid sweep's figure from bench/grid.py's summary.json, and a
// message naming the file and the command that writes it when that file is missing or wrong.
#include <gtest/gtest.h>

#include "gnuplot_png.h"
#include "grid_figures.h"
#include "kit/errors.h"
#include "plots_test_util.h"

namespace {
using namespace plots_test;
using namespace kit::plots;

json record(const std::string& label, int d, int p, int t, double tokens, json comm) {
  return {{"preset", "tiny"}, {"label", label}, {"dp", d}, {"pp", p}, {"tp", t}, {"reference", d * p * t == 1},
          {"tokens_per_s", tokens}, {"step_time_s", 0.5}, {"comm_s_per_step", comm}};
}

json comm(double data, double tensor, double pipeline) {
  return {{"data", data}, {"tensor", tensor}, {"pipeline", pipeline}, {"embedding", 0.01}};
}

// What bench/grid.py writes, reduced to the fields the figure reads.
json summary() {
  return {{"settings", {{"world_size", 2}, {"schedule", "1f1b"}, {"chunks", 2}, {"batch_size", 4}, {"seq_len", 16},
                        {"threads", 1}}},
          {"machine", {{"cores", 2}, {"oversubscribed", false}}},
          {"records", {record("d=1 p=1 t=1", 1, 1, 1, 1000, comm(0, 0.001, 0)),
                       record("d=2 p=1 t=1", 2, 1, 1, 1500, comm(0.05, 0.001, 0)),
                       record("d=1 p=2 t=1", 1, 2, 1, 1200, comm(0, 0.001, 0.1))}}};
}

std::string draw_error(const std::string& runs_dir) {
  return message_of<kit::Error>([&] { draw_grid_figures(runs_dir, runs_dir + "/figures", PngOptions{}); });
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "the message should mention \"" << part << "\"; it is:\n" << text;
}

TEST(GridFigures, DrawsThePng) {
  TempDir dir;
  write_json(dir / "summary.json", summary());
  const auto files = draw_grid_figures(dir.path(), dir / "figures", PngOptions{});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], dir / "figures/grid_sweep.png");
  EXPECT_TRUE(is_png_file(files[0]));
}

TEST(GridFigures, MissingSummaryNamesFileAndCommand) {
  TempDir dir;
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, dir / "summary.json");
  expect_contains(msg, "python3 bench/grid.py --out " + dir.path());
}

TEST(GridFigures, TruncatedSummaryIsNotJson) {
  TempDir dir;
  write_text(dir / "summary.json", summary().dump().substr(0, 50));
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, dir / "summary.json");
  expect_contains(msg, "is not JSON");
}

TEST(GridFigures, MissingCommunicationKindNamesRecordAndField) {
  TempDir dir;
  json s = summary();
  s["records"][2]["comm_s_per_step"].erase("pipeline");
  write_json(dir / "summary.json", s);
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "records[2].comm_s_per_step");
  expect_contains(msg, "\"pipeline\"");
  expect_contains(msg, "bench/grid.py");
}

// Another benchmark's summary.json (here bench/zero.py's) is refused, not drawn as nothing.
TEST(GridFigures, AnotherBenchmarksSummaryIsRefused) {
  TempDir dir;
  write_json(dir / "summary.json", {{"settings", {{"world_size", 2}}}, {"presets", json::array()}});
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "\"records\"");
  expect_contains(msg, "is it bench/grid.py's summary.json?");
}

TEST(GridFigures, ATextWhereANumberBelongs) {
  TempDir dir;
  json s = summary();
  s["records"][1]["tokens_per_s"] = "fast";
  write_json(dir / "summary.json", s);
  expect_contains(draw_error(dir.path()), "\"tokens_per_s\" is not a number");
}

}  // namespace
