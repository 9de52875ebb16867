// Bad metrics files stop plot_figures with a message that names the file and the field,
// never a crash and never a figure that is quietly wrong.
#include <gtest/gtest.h>

#include "kit/errors.h"
#include "make_figures.h"
#include "plots_test_util.h"
#include "run_metrics.h"
#include "schedule_grid.h"
#include "statistics.h"

namespace {
using namespace plots_test;
using namespace kit::plots;

// The message load_run throws for `path`, or a failure when it throws none.
std::string load_error(const std::string& path) {
  const std::string msg = message_of<kit::Error>([&] { load_run(path); });
  EXPECT_FALSE(msg.empty()) << "load_run(" << path << ") accepted a bad input";
  return msg;
}

// make_figures' options with every input an absent file that the user did not name (so it is
// skipped) and the figures going to dir/figures; a test names the inputs it is about.
FigureOptions nothing_given(const TempDir& dir) {
  FigureOptions o;
  for (InputPath* in : {&o.dp_single, &o.dp_multi, &o.model_parallel, &o.pipeline, &o.single})
    *in = {dir / "absent", false};
  o.out_dir = dir / "figures";
  return o;
}

json good_file() { return run_file("train", 1, 64, {epoch(1, 0, 1, 2, 100), epoch(2, 0, 1, 2, 110)}); }

TEST(PlotsInputErrors, TruncatedJsonNamesTheFile) {
  TempDir dir;
  const std::string path = dir / "cut.json";
  write_text(path, good_file().dump().substr(0, 40));
  const std::string msg = load_error(path);
  expect_contains(msg, path);
  expect_contains(msg, "not valid JSON");
}

TEST(PlotsInputErrors, MissingFieldNamesFileEpochAndField) {
  TempDir dir;
  json j = good_file();
  j["epochs"][1].erase("tokens_per_sec");
  write_json(dir / "m.json", j);
  const std::string msg = load_error(dir / "m.json");
  expect_contains(msg, dir / "m.json");
  expect_contains(msg, "epochs[1].tokens_per_sec is missing");
}

TEST(PlotsInputErrors, WrongTypeSaysWhatWasExpected) {
  TempDir dir;
  json j = good_file();
  j["epochs"][0]["training_time"] = "fast";
  write_json(dir / "t.json", j);
  const std::string msg = load_error(dir / "t.json");
  expect_contains(msg, "epochs[0].training_time should be a number");
  expect_contains(msg, "\"fast\"");
}

TEST(PlotsInputErrors, MissingRunHeader) {
  TempDir dir;
  json j = good_file();
  j.erase("run");
  write_json(dir / "r.json", j);
  expect_contains(load_error(dir / "r.json"), "run is missing");
  j = good_file();
  j["run"].erase("world_size");
  write_json(dir / "w.json", j);
  expect_contains(load_error(dir / "w.json"), "run.world_size is missing");
}

TEST(PlotsInputErrors, OptionalRunFieldsAreCheckedWhenPresent) {
  TempDir dir;
  json j = good_file();
  j["run"]["stages"] = "two";
  write_json(dir / "s.json", j);
  expect_contains(load_error(dir / "s.json"), "run.stages should be an integer");
}

TEST(PlotsInputErrors, NegativeTimeIsRejected) {
  TempDir dir;
  json j = good_file();
  j["epochs"][1]["training_time"] = -1.0;
  write_json(dir / "n.json", j);
  expect_contains(load_error(dir / "n.json"), "epochs[1].training_time");
}

TEST(PlotsInputErrors, EmptyEpochList) {
  TempDir dir;
  write_json(dir / "e.json", run_file("train", 1, 64, {}));
  expect_contains(load_error(dir / "e.json"), "epochs is empty");
}

TEST(PlotsInputErrors, MissingPathAndEmptyDirectory) {
  TempDir dir;
  expect_contains(load_error(dir / "nothing_here"), "does not exist");
  fs::create_directories(dir / "empty");
  expect_contains(load_error(dir / "empty"), "holds no .json files");
}

// One rank's file on its own would halve the summed tokens/s without a trace.
TEST(PlotsInputErrors, AMissingRankIsAnErrorNotAHalvedThroughput) {
  TempDir dir;
  write_json(dir / "w2/rank0.json",
             run_file("run_data_parallel", 2, 128, {epoch(1, 0, 2, 1, 10), epoch(2, 0, 2, 1, 10)}));
  const std::string from_file = load_error(dir / "w2/rank0.json");
  expect_contains(from_file, "no numbers from rank 1");
  expect_contains(from_file, "Pass the directory");
  expect_contains(load_error(dir / "w2"), "no numbers from rank 1");
}

TEST(PlotsInputErrors, AnEpochMissingOnOneRank) {
  TempDir dir;
  write_json(dir / "w2/rank0.json",
             run_file("run_data_parallel", 2, 128, {epoch(1, 0, 2, 1, 10), epoch(2, 0, 2, 1, 10)}));
  write_json(dir / "w2/rank1.json", run_file("run_data_parallel", 2, 128, {epoch(1, 1, 2, 1, 10)}));
  const std::string msg = load_error(dir / "w2");
  expect_contains(msg, "epoch 2 has no numbers from rank 1");
}

TEST(PlotsInputErrors, TheSameRankTwice) {
  TempDir dir;
  write_json(dir / "w2/a.json", run_file("run_data_parallel", 2, 128, {epoch(1, 0, 2, 1, 10)}));
  write_json(dir / "w2/b.json", run_file("run_data_parallel", 2, 128, {epoch(1, 0, 2, 1, 10)}));
  const std::string msg = load_error(dir / "w2");
  expect_contains(msg, "appears twice");
  expect_contains(msg, dir / "w2/a.json");
  expect_contains(msg, dir / "w2/b.json");
}

TEST(PlotsInputErrors, FilesOfDifferentRunsInOneDirectory) {
  TempDir dir;
  write_json(dir / "mixed/w1.json", run_file("run_data_parallel", 1, 64, {epoch(1, 0, 1, 1, 10)}));
  write_json(dir / "mixed/w2.json", run_file("run_data_parallel", 2, 128, {epoch(1, 0, 2, 1, 10)}));
  const std::string msg = load_error(dir / "mixed");
  expect_contains(msg, "not from the same run");
  expect_contains(msg, "world_size");
}

TEST(PlotsInputErrors, RankOutsideTheWorld) {
  TempDir dir;
  write_json(dir / "r.json", run_file("run_data_parallel", 2, 128, {epoch(1, 5, 2, 1, 10)}));
  expect_contains(load_error(dir / "r.json"), "epochs[0].rank is 5");
}

TEST(PlotsInputErrors, RanksWithDifferentStepCountsInTheLossCurve) {
  TempDir dir;
  write_json(dir / "w2/rank0.json", run_file("run_data_parallel", 2, 4, {epoch(1, 0, 2, 1, 1, {1, 2, 3})}));
  write_json(dir / "w2/rank1.json", run_file("run_data_parallel", 2, 4, {epoch(1, 1, 2, 1, 1, {1, 2})}));
  const kit::plots::Run run = load_run(dir / "w2");
  const std::string msg = message_of<kit::Error>([&] { loss_curve(run); });
  expect_contains(msg, "rank 1");
  expect_contains(msg, "2 batch losses but rank 0 has 3");
}

TEST(PlotsInputErrors, BadScheduleSizes) {
  expect_contains(message_of<kit::Error>([] { parse_schedule_size("4by3"); }), "write e.g. 4x3");
  expect_contains(message_of<kit::Error>([] { parse_schedule_size("x3"); }), "write e.g. 4x3");
  expect_contains(message_of<kit::Error>([] { parse_schedule_size("0x3"); }), "at least 1 micro-batch");
  expect_contains(message_of<kit::Error>([] { parse_schedule_size("500x3"); }), "too large");
  const ScheduleSize s = parse_schedule_size("8x4");
  EXPECT_EQ(s.micro_batches, 8);
  EXPECT_EQ(s.stages, 4);
}

// A bad file stops everything before anything is drawn.
TEST(PlotsInputErrors, MakeFiguresStopsBeforeDrawing) {
  TempDir dir;
  write_json(dir / "w1/rank0.json", run_file("run_data_parallel", 1, 64, {epoch(1, 0, 1, 1, 10)}));
  write_text(dir / "w2/rank0.json", "{\"run\": ");
  FigureOptions o = nothing_given(dir);
  o.dp_single = {dir / "w1", true};
  o.dp_multi = {dir / "w2", true};
  const std::string msg = message_of<kit::Error>([&] { make_figures(o); });
  expect_contains(msg, dir / "w2/rank0.json");
  EXPECT_FALSE(fs::exists(dir / "figures/dp_training_time.png"));
  EXPECT_FALSE(fs::exists(dir / "figures/schedule.png"));
  EXPECT_FALSE(fs::exists(dir / "figures/summary.json"));
}

TEST(PlotsInputErrors, AGivenPathMustExist) {
  TempDir dir;
  FigureOptions o = nothing_given(dir);
  o.dp_single = {dir / "typo", true};
  expect_contains(message_of<kit::Error>([&] { make_figures(o); }), dir / "typo");
}

// Swapped pipeline runs would draw an inverted but convincing figure.
TEST(PlotsInputErrors, SwappedPipelineModesAreCaught) {
  TempDir dir;
  write_json(dir / "mp.json", run_file("run_pipeline", 1, 32, {epoch(1, 0, 1, 1, 10)}, "model_parallel"));
  write_json(dir / "pp.json", run_file("run_pipeline", 1, 32, {epoch(1, 0, 1, 1, 10)}, "pipeline_parallel"));
  FigureOptions o = nothing_given(dir);
  o.model_parallel = {dir / "pp.json", true};
  o.pipeline = {dir / "mp.json", true};
  const std::string msg = message_of<kit::Error>([&] { make_figures(o); });
  expect_contains(msg, dir / "pp.json");
  expect_contains(msg, "did you swap");
}

}  // namespace
