// plot_figures --terapipe-runs: TeraPipe's two figures from bench/terapipe.py's summary.json and
// train_parallel --slices's rank files, and a message naming the file and the command that writes it when
// one is missing or wrong.
#include <gtest/gtest.h>

#include <algorithm>

#include "gnuplot_png.h"
#include "kit/errors.h"
#include "plots_test_util.h"
#include "terapipe_figures.h"

namespace {
using namespace plots_test;
using namespace kit::plots;

constexpr int kStages = 2;

// A GPipe-order timeline of `n` equal slices on rank `r` of two: forwards in slice order,
// then backwards in reverse, each forward 1 ms and each backward 2 ms, rank 1 a step behind.
json timeline(int n, int r) {
  json t = json::array();
  double at = 1e-3 * r;
  for (int s = 0; s < n; ++s, at += 1e-3) t.push_back({0, s, r, at, at + 1e-3});
  at += 2e-3 * (1 - r);
  for (int s = n - 1; s >= 0; --s, at += 2e-3) t.push_back({1, s, r, at, at + 2e-3});
  return t;
}

// One run: its rank files written under dir/L<L>/<slicing>/, recorded as `root`/L<L>/... .
json record(const TempDir& dir, const std::string& root, int L, const std::string& slicing, int n) {
  std::string sub = slicing;
  sub.erase(std::remove(sub.begin(), sub.end(), ':'), sub.end());
  const std::vector<int> lengths(static_cast<size_t>(n), L / n);
  json metrics = json::array();
  for (int r = 0; r < kStages; ++r) {
    const std::string file = "L" + std::to_string(L) + "/" + sub + "/rank" + std::to_string(r) + ".json";
    write_json(dir / file, {{"program", "train_parallel"}, {"rank", r}, {"stages", kStages}, {"microbatches", 1},
                            {"seq_len", L}, {"slicing", slicing}, {"lengths", lengths}, {"timeline", timeline(n, r)}});
    metrics.push_back(root + "/" + file);
  }
  const double span = 1e-3 * (3 * n + 1);
  return {{"seq_len", L}, {"slicing", slicing}, {"lengths", lengths}, {"slices", n}, {"measured_s", span},
          {"spread", 0.05}, {"step_s", 1.2 * span}, {"predicted_s", 0.95 * span}, {"prediction_error", 0.05},
          {"metrics", metrics}};
}

// What bench/terapipe.py writes, reduced to what the figures read; the rank files recorded
// under `root` (dir itself, or a path that does not exist: the runs were moved).
json summary(const TempDir& dir, const std::string& root) {
  json records = json::array();
  for (int L : {16, 32})
    for (const auto& [slicing, n] : {std::pair<std::string, int>{"none", 1}, {"uniform:2", 2}, {"dp", 4}})
      records.push_back(record(dir, root, L, slicing, n));
  return {{"settings", {{"preset", "tiny"}, {"stages", kStages}, {"batch_size", 1}, {"chunks", 1}, {"threads", 1}}},
          {"machine", {{"cores", 2}, {"note", "2 cores; each run has 2 processes x 1 thread(s)"}}},
          {"records", records}};
}

std::string draw_error(const std::string& runs_dir) {
  return message_of<kit::Error>([&] { draw_terapipe_figures(runs_dir, runs_dir + "/figures", PngOptions{}); });
}

TEST(TerapipeFigures, DrawsBothPngs) {
  TempDir dir;
  write_json(dir / "summary.json", summary(dir, dir.path()));
  const auto files = draw_terapipe_figures(dir.path(), dir / "figures", PngOptions{});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], dir / "figures/terapipe_slicing.png");
  EXPECT_EQ(files[1], dir / "figures/terapipe_timeline.png");
  for (const auto& f : files) EXPECT_TRUE(is_png_file(f)) << f;
}

// The summary records the rank files where the benchmark ran (runs/terapipe/L16/...): a
// copied runs directory still draws from its own L<L>/<slicing>/ files.
TEST(TerapipeFigures, MovedRunsDirectoryFindsItsRankFiles) {
  TempDir dir;
  write_json(dir / "summary.json", summary(dir, "/nonexistent/runs/terapipe"));
  const auto files = draw_terapipe_figures(dir.path(), dir / "figures", PngOptions{});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_TRUE(is_png_file(files[1]));
}

TEST(TerapipeFigures, MissingSummaryNamesFileAndCommand) {
  TempDir dir;
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, dir / "summary.json");
  expect_contains(msg, "python3 bench/terapipe.py --out " + dir.path());
}

// Everything is read before anything is drawn: a missing rank file leaves no figure behind.
TEST(TerapipeFigures, MissingRankFileNamesRecordAndCommand) {
  TempDir dir;
  write_json(dir / "summary.json", summary(dir, dir.path()));
  fs::remove(dir / "L32/dp/rank1.json");
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "L32/dp/rank1.json");
  expect_contains(msg, "records[5].metrics[1]");
  expect_contains(msg, "python3 bench/terapipe.py --out " + dir.path());
  EXPECT_FALSE(fs::exists(dir / "figures/terapipe_slicing.png"));
}

TEST(TerapipeFigures, MissingFieldNamesRecordAndField) {
  TempDir dir;
  json s = summary(dir, dir.path());
  s["records"][2].erase("predicted_s");
  write_json(dir / "summary.json", s);
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "records[2]");
  expect_contains(msg, "\"predicted_s\"");
  expect_contains(msg, "bench/terapipe.py");
}

TEST(TerapipeFigures, NoDpRunAtTheLargestLengthIsAnError) {
  TempDir dir;
  json s = summary(dir, dir.path());
  s["records"].erase(5);  // L = 32's dp
  write_json(dir / "summary.json", s);
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "no \"dp\" record at L = 32");
}

TEST(TerapipeFigures, TimelineUnitOutOfRangeNamesTheAction) {
  TempDir dir;
  write_json(dir / "summary.json", summary(dir, dir.path()));
  json m = json::parse(read_text(dir / "L32/none/rank0.json"));
  m["timeline"][0][1] = 3;  // one slice: unit 3 does not exist
  write_json(dir / "L32/none/rank0.json", m);
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "L32/none/rank0.json: timeline[0]: unit 3");
}

// Another benchmark's summary.json (here bench/zero.py's) is refused, not drawn as nothing.
TEST(TerapipeFigures, AnotherBenchmarksSummaryIsRefused) {
  TempDir dir;
  write_json(dir / "summary.json", {{"settings", {{"world_size", 2}}}, {"presets", json::array()}});
  const std::string msg = draw_error(dir.path());
  expect_contains(msg, "\"records\"");
  expect_contains(msg, "is it bench/terapipe.py's summary.json?");
}

}  // namespace
