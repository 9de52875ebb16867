// The figures are real PNG files after a run on synthetic data; missing runs skip their
// figures with a note; gnuplot's own failures come back as errors; the schedule picture
// follows the clock-cycle formula.
#include <gtest/gtest.h>

#include <gnuplot-iostream.h>

#include <cstdint>
#include <fstream>

#include "figures.h"
#include "gnuplot_png.h"
#include "kit/errors.h"
#include "make_figures.h"
#include "plots_test_util.h"
#include "schedule_grid.h"

namespace {
using namespace plots_test;
using namespace kit::plots;

struct PngHeader {
  bool ok = false;
  uint32_t width = 0, height = 0;
};

// The 8-byte signature, then the IHDR chunk with the image size (big-endian).
PngHeader read_png_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[24] = {};
  if (!in.read(reinterpret_cast<char*>(b), 24)) return {};
  const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  for (int i = 0; i < 8; ++i)
    if (b[i] != sig[i]) return {};
  if (std::string(reinterpret_cast<char*>(b + 12), 4) != "IHDR") return {};
  auto be32 = [&](int at) {
    return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) | b[at + 3];
  };
  return {true, be32(16), be32(20)};
}

void expect_png(const std::string& path, uint32_t width = 0, uint32_t height = 0) {
  ASSERT_TRUE(fs::exists(path)) << path << " was not written";
  EXPECT_GT(fs::file_size(path), 1000u) << path << " is too small to hold a figure";
  const PngHeader h = read_png_header(path);
  ASSERT_TRUE(h.ok) << path << " does not start with the PNG signature and an IHDR chunk";
  EXPECT_TRUE(is_png_file(path));
  if (width) {
    EXPECT_EQ(h.width, width) << path;
  }
  if (height) {
    EXPECT_EQ(h.height, height) << path;
  }
}

// Every kind of run, with three epochs each; world 2 has two rank files.
// run_pipeline's forward-only (validation) tokens/s of epochs 1, 2, ...
json forward_only(const std::vector<double>& tokens_per_sec) {
  json out = json::array();
  for (size_t e = 0; e < tokens_per_sec.size(); ++e)
    out.push_back({{"epoch", e + 1}, {"seconds", 1.0}, {"tokens_per_sec", tokens_per_sec[e]}});
  return out;
}

FigureOptions synthetic_runs(const TempDir& dir) {
  const std::vector<double> losses = {4.0, 3.5, 3.2, 3.0};
  write_json(dir / "runs/w1/rank0.json",
             run_file("run_data_parallel", 1, 64,
                      {epoch(1, 0, 1, 30, 800, losses), epoch(2, 0, 1, 20, 1000, losses),
                       epoch(3, 0, 1, 22, 950, losses)}));
  for (int r = 0; r < 2; ++r)
    write_json(dir / ("runs/w2/rank" + std::to_string(r) + ".json"),
               run_file("run_data_parallel", 2, 128,
                        {epoch(1, r, 2, 18, 700, {4.0, 3.3}), epoch(2, r, 2, 11 + r, 900, {3.1, 2.9}),
                         epoch(3, r, 2, 12 + r, 880, {2.8, 2.7})}));
  json mp = run_file("run_pipeline", 1, 32,
                     {epoch(1, 0, 1, 50, 300, losses), epoch(2, 0, 1, 40, 400, losses), epoch(3, 0, 1, 41, 390, losses)},
                     "model_parallel");
  mp["run"]["forward_only"] = forward_only({100, 200, 220});
  write_json(dir / "runs/mp.json", mp);
  json pp = run_file("run_pipeline", 1, 32,
                     {epoch(1, 0, 1, 35, 450, losses), epoch(2, 0, 1, 25, 640, losses), epoch(3, 0, 1, 26, 615, losses)},
                     "pipeline_parallel");
  pp["run"]["stages"] = 2;
  pp["run"]["microbatches"] = 4;
  pp["run"]["forward_only"] = forward_only({150, 300, 320});
  write_json(dir / "runs/pp.json", pp);
  write_json(dir / "runs/train.json",
             run_file("train", 1, 64, {epoch(1, 0, 1, 29, 820, losses), epoch(2, 0, 1, 21, 990, losses),
                                       epoch(3, 0, 1, 21, 980, losses)}));
  FigureOptions o;
  o.dp_single = {dir / "runs/w1", true};
  o.dp_multi = {dir / "runs/w2", true};
  o.model_parallel = {dir / "runs/mp.json", true};
  o.pipeline = {dir / "runs/pp.json", true};
  o.single = {dir / "runs/train.json", true};
  o.out_dir = dir / "submit_figures";
  return o;
}

TEST(PlotsFigures, AllSevenFiguresAreRealPngFiles) {
  TempDir dir;
  const FigureOptions o = synthetic_runs(dir);
  const Summary s = make_figures(o);
  EXPECT_EQ(s.notes.size(), 1u) << "only the note on the schedule's size is expected";
  EXPECT_EQ(s.figures.size(), 7u);
  for (const char* name : {kDpTimeFigure, kDpThroughputFigure, kPpTimeFigure, kPpThroughputFigure, kPpForwardFigure})
    expect_png(dir / ("submit_figures/" + std::string(name)), 800, 600);
  expect_png(dir / "submit_figures/loss_curves.png", 1000, 600);
  expect_png(dir / "submit_figures/schedule.png");
}

TEST(PlotsFigures, SummaryJsonHoldsTheNumbersOfTheTable) {
  TempDir dir;
  make_figures(synthetic_runs(dir));
  const json j = json::parse(read_text(dir / "submit_figures/summary.json"));
  // World 2, epochs 2-3: time (11+12)/2 = 11.5 and (12+13)/2 = 12.5 -> 12; tokens/s 1800 and 1760 -> 1780.
  EXPECT_DOUBLE_EQ(j["runs"]["dp_multi"]["training_time"]["mean"].get<double>(), 12.0);
  EXPECT_DOUBLE_EQ(j["runs"]["dp_multi"]["tokens_per_sec"]["mean"].get<double>(), 1780.0);
  EXPECT_EQ(j["runs"]["dp_multi"]["epochs_used"], json::array({2, 3}));
  // World 1: tokens/s 1000 and 950 -> 975; ratio 1780 / 975.
  EXPECT_DOUBLE_EQ(j["runs"]["dp_single"]["tokens_per_sec"]["mean"].get<double>(), 975.0);
  EXPECT_NEAR(j["speedups"]["dp_tokens_per_sec_ratio"].get<double>(), 1780.0 / 975.0, 1e-12);
  // Pipeline 627.5 vs model parallel 395 tokens/s.
  EXPECT_NEAR(j["speedups"]["pp_tokens_per_sec_ratio"].get<double>(), 627.5 / 395.0, 1e-12);
  // The schedule picture follows the pipeline run: 4 micro-batches on 2 stages, 5 clocks.
  EXPECT_EQ(j["schedule"]["micro_batches"].get<int>(), 4);
  EXPECT_EQ(j["schedule"]["stages"].get<int>(), 2);
  EXPECT_EQ(j["schedule"]["clocks"].get<int>(), 5);
  EXPECT_EQ(j["runs"]["pipeline"]["configuration"], "pipeline parallel, 2 stages, batch 32 in 4 micro-batches");
  EXPECT_EQ(j["figures"].size(), 7u);
}

TEST(PlotsFigures, AGivenScheduleSizeWins) {
  TempDir dir;
  FigureOptions o = synthetic_runs(dir);
  o.schedule = {3, 3};
  o.schedule_given = true;
  const Summary s = make_figures(o);
  EXPECT_EQ(s.schedule.micro_batches, 3);
  EXPECT_EQ(s.schedule.stages, 3);
}

TEST(PlotsFigures, ForwardOnlyThroughputIsComparedWithTheScheduleIdeal) {
  TempDir dir;
  const Summary s = make_figures(synthetic_runs(dir));
  // Epoch 1 dropped: model parallel (200 + 220) / 2 = 210, pipeline (300 + 320) / 2 = 310.
  ASSERT_TRUE(s.speedups.pp_forward_tokens_per_sec_ratio.has_value());
  EXPECT_NEAR(*s.speedups.pp_forward_tokens_per_sec_ratio, 310.0 / 210.0, 1e-12);
  ASSERT_TRUE(s.speedups.pp_forward_ideal_speedup.has_value());
  EXPECT_NEAR(*s.speedups.pp_forward_ideal_speedup, 4.0 * 2 / (4 + 2 - 1), 1e-12) << "m·p/(m+p-1), m 4, p 2";
  expect_png(dir / "submit_figures/pp_forward_tokens_per_sec.png", 800, 600);
  const json j = json::parse(read_text(dir / "submit_figures/summary.json"));
  EXPECT_NEAR(j["speedups"]["pp_forward_ideal_speedup"].get<double>(), 1.6, 1e-12);
  EXPECT_NEAR(j["runs"]["pipeline"]["forward_only_tokens_per_sec"]["mean"].get<double>(), 310.0, 1e-9);
}

TEST(PlotsFigures, MissingRunsSkipTheirFiguresWithANote) {
  TempDir dir;
  FigureOptions o = synthetic_runs(dir);
  o.model_parallel = {dir / "runs/not_run_yet.json", false};  // a default path that does not exist
  o.single = {dir / "runs/no_train.json", false};
  const Summary s = make_figures(o);
  expect_png(dir / "submit_figures/dp_training_time.png");
  expect_png(dir / "submit_figures/loss_curves.png");
  EXPECT_FALSE(fs::exists(dir / "submit_figures/pp_training_time.png"));
  EXPECT_FALSE(fs::exists(dir / "submit_figures/pp_tokens_per_sec.png"));
  std::string notes;
  for (const auto& n : s.notes) notes += n + "\n";
  EXPECT_NE(notes.find("--model-parallel"), std::string::npos) << notes;
  EXPECT_NE(notes.find("skipped pp_training_time.png"), std::string::npos) << notes;
  EXPECT_FALSE(s.speedups.pp_tokens_per_sec_ratio.has_value());
  const json j = json::parse(read_text(dir / "submit_figures/summary.json"));
  EXPECT_TRUE(j["speedups"]["pp_tokens_per_sec_ratio"].is_null());
}

TEST(PlotsFigures, AnOlderFigureThatWasNotRedrawnIsPointedOut) {
  TempDir dir;
  FigureOptions o = synthetic_runs(dir);
  make_figures(o);
  o.pipeline = {dir / "runs/deleted.json", false};
  const Summary s = make_figures(o);
  std::string notes;
  for (const auto& n : s.notes) notes += n + "\n";
  EXPECT_NE(notes.find("pp_tokens_per_sec.png is from an earlier run"), std::string::npos) << notes;
}

TEST(PlotsFigures, ScheduleFollowsTheClockFormula) {
  // The example from the assignment: m = 4, n = 3.
  const std::vector<std::vector<std::pair<int, int>>> expected = {
      {{0, 0}}, {{1, 0}, {0, 1}}, {{2, 0}, {1, 1}, {0, 2}}, {{3, 0}, {2, 1}, {1, 2}}, {{3, 1}, {2, 2}}, {{3, 2}}};
  EXPECT_EQ(schedule_clocks(4, 3), expected);
  EXPECT_EQ(schedule_clocks(1, 1).size(), 1u);
  EXPECT_EQ(schedule_clocks(2, 5).size(), 6u);
}

TEST(PlotsFigures, SchedulePictureIsAPng) {
  TempDir dir;
  draw_schedule(dir / "s.png", 4, 3, PngOptions{});
  expect_png(dir / "s.png");
  draw_schedule(dir / "big.png", 16, 8, PngOptions{});
  expect_png(dir / "big.png");
}

TEST(PlotsFigures, GnuplotErrorsComeBackAsErrorsAndLeaveNoFile) {
  TempDir dir;
  const std::string png = dir / "bad.png";
  const std::string msg = message_of<kit::Error>([&] {
    render_png(png, PngOptions{}, [](Gnuplot& gp) { gp << "plot sin(x) with no_such_style\n"; });
  });
  EXPECT_NE(msg.find("gnuplot failed to draw"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no_such_style"), std::string::npos) << "gnuplot's own message should be passed on:\n" << msg;
  EXPECT_FALSE(fs::exists(png));
}

TEST(PlotsFigures, AStaleFigureNeverPassesForANewOne) {
  TempDir dir;
  const std::string png = dir / "old.png";
  draw_schedule(png, 2, 2, PngOptions{});
  ASSERT_TRUE(is_png_file(png));
  EXPECT_THROW(render_png(png, PngOptions{}, [](Gnuplot& gp) { gp << "plot nonsense_function(x)\n"; }), kit::Error);
  EXPECT_FALSE(fs::exists(png)) << "the figure from before the failed run is still there";
}

TEST(PlotsFigures, MissingGnuplotSaysHowToInstallIt) {
  TempDir dir;
  PngOptions png;
  png.gnuplot = dir / "no_gnuplot_here";
  const std::string msg = message_of<kit::Error>([&] { draw_schedule(dir / "s.png", 4, 3, png); });
  EXPECT_NE(msg.find("apt-get install gnuplot-nox"), std::string::npos) << msg;
}

TEST(PlotsFigures, NotAPng) {
  TempDir dir;
  write_text(dir / "fake.png", "this is text, not an image");
  EXPECT_FALSE(is_png_file(dir / "fake.png"));
  EXPECT_FALSE(is_png_file(dir / "absent.png"));
}

TEST(PlotsFigures, ValueLabelsKeepThreeSignificantDigits) {
  EXPECT_EQ(format_mean_std({12.345, 0.4321, 2}), "12.3 ± 0.4");
  EXPECT_EQ(format_mean_std({5123.4, 80.2, 2}), "5123 ± 80");
  EXPECT_EQ(format_mean_std({0.05234, 0.001, 2}), "0.0523 ± 0.0010");
  EXPECT_EQ(format_mean_std({102.4, 0, 1}), "102 (1 epoch)") << "one epoch has no spread: no \"± 0\"";
}

}  // namespace
