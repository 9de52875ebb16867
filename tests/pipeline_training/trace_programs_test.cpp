// --trace of the programs: `schedule --kind ... --trace` against the simulator's own timeline,
// and one train_parallel --pp 2 run whose per-rank files hold each rank's F/B
// events and receives. Both run the student's schedules (and the run the student's steps):
// labelled needs_a2 (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "build_programs.h"
#include "process_harness.h"
#include "judge/judge.h"
#include "pipeline_training/schedule_test_util.h"  // schedules in records
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"
#include "pipeline_training/trace_events.h"

namespace {
using nlohmann::json;

json load(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no trace at " << path;
  return in ? json::parse(in) : json::object();
}

// The complete events of each track (tid), in the order of their start.
std::map<int64_t, std::vector<json>> events_by_track(const json& trace, const std::string& category = "") {
  std::map<int64_t, std::vector<json>> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && (category.empty() || e.at("cat") == category)) out[e.at("tid").get<int64_t>()].push_back(e);
  for (auto& [tid, events] : out)
    std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) { return a["ts"] < b["ts"]; });
  return out;
}

std::map<int64_t, std::string> thread_names(const json& trace) {
  std::map<int64_t, std::string> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") out[e.at("tid").get<int64_t>()] = e.at("args").at("name");
  return out;
}

// `schedule --kind` with --trace: each rank's track holds exactly the simulator's actions of
// that rank, at its start and end (one time unit shown as one second). The program and
// make_schedule run the student's schedules: the subject part runs them and records the trace
// and the schedule; the judge simulates the recorded schedule and compares (tests/judge/judge.h).
void expect_schedule_trace(const std::string& kind, const kit::pp::PipelineShape& shape) {
  const kit::judge::Record rec = kit::judge::subject(
      [&](kit::judge::Record& out) {
        kit_test::TempDir dir("schedule_trace");
        const std::string path = dir / "trace.json";
        const auto r = kit_test::run_kit_program({kit_test::build_program("schedule"), "--kind", kind, "-p",
                                                 std::to_string(shape.ranks), "-m", std::to_string(shape.microbatches),
                                                 "-v", std::to_string(shape.virtual_chunks), "--trace", path},
                                                dir / "run.log", {}, 30);
        out.put("exitcode", r.exitcode);
        out.put("run", kit_test::describe_run(r));
        out.put("path", path);
        out.put("trace", kit_test::read_file(path));
        out.put("schedule", kit::pp::make_schedule(kit::pp::parse_schedule_kind(kind), shape));
      },
      "schedule --kind " + kind + " --trace");
  if (!kit::judge::judging()) return;
  ASSERT_EQ(rec.get<int>("exitcode"), 0) << rec.get<std::string>("run");
  const std::string text = rec.get<std::string>("trace");
  EXPECT_FALSE(text.empty()) << "no trace at " << rec.get<std::string>("path");
  const json trace = text.empty() ? json::object() : json::parse(text);
  const kit::pp::Timeline want = kit::pp::simulate(rec.get<kit::pp::Schedules>("schedule"), shape);
  const auto tracks = events_by_track(trace);
  ASSERT_EQ(static_cast<int64_t>(tracks.size()), shape.ranks);
  const auto names = thread_names(trace);
  for (int64_t rank = 0; rank < shape.ranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(names.at(rank), "rank " + std::to_string(rank));
    const auto& got = tracks.at(rank);
    const int64_t actions = shape.microbatches * shape.virtual_chunks;
    EXPECT_EQ(std::count_if(got.begin(), got.end(), [](const json& e) { return e["cat"] == "forward"; }), actions);
    EXPECT_EQ(std::count_if(got.begin(), got.end(), [](const json& e) { return e["cat"] == "backward"; }), actions);
    const auto& row = want.ranks[static_cast<size_t>(rank)];
    ASSERT_EQ(got.size(), row.size());
    for (size_t i = 0; i < row.size(); ++i) {
      EXPECT_EQ(got[i]["name"], kit::pp::trace_name(row[i].action, {shape.virtual_chunks, 1})) << "action " << i;
      EXPECT_NEAR(got[i]["ts"].get<double>(), row[i].start * 1e6, 1e-3) << got[i].dump();
      EXPECT_NEAR(got[i]["dur"].get<double>(), (row[i].end - row[i].start) * 1e6, 1e-3) << got[i].dump();
      EXPECT_EQ(got[i]["args"]["microbatch"], row[i].action.microbatch);
      EXPECT_EQ(got[i]["args"]["chunk"], row[i].action.chunk);
      EXPECT_EQ(got[i]["args"]["stage"], row[i].stage);
    }
  }
  EXPECT_EQ(trace.at("otherData").at("schedule"), kind);
  EXPECT_EQ(trace.at("otherData").at("world"), shape.ranks);
}

TEST(ScheduleTrace, OneFOneBTracksAreTheSimulatedTimeline) { expect_schedule_trace("1f1b", {4, 8, 1}); }
TEST(ScheduleTrace, InterleavedTracksAreTheSimulatedTimeline) { expect_schedule_trace("interleaved", {2, 4, 2}); }

TEST(ScheduleTrace, MissingDirectoryIsAClearErrorNamingThePath) {
  kit_test::TempDir dir("schedule_trace_dir");
  const std::string path = dir / "missing/trace.json";
  const auto r = kit_test::run_kit_program(
      {kit_test::build_program("schedule"), "--kind", "gpipe", "-p", "2", "-m", "2", "--trace", path}, dir / "run.log",
      {}, 30);
  EXPECT_NE(r.exitcode, 0) << kit_test::describe_run(r);
  EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mkdir -p"), std::string::npos) << r.output;
}

// 2 ranks, 1F1B, m = 4, 2 steps (the first untimed): each rank's file holds its own track
// with m F and m B of the timed step, the receives nested in their actions, and the two files
// merge by concatenating their events.
TEST(PipelineTrace, EachRankFileHoldsItsForwardsBackwardsAndReceives) {
  kit_test::TempDir dir("pp_trace");
  const int64_t m = 4;
  const auto r = kit_test::run_kit_program(
      {kit_test::build_program("train_parallel"), "--pp", "2", "--schedule", "1f1b", "--chunks",
       std::to_string(m), "--preset", "tiny", "--n-layer", "2", "--batch-size", "8", "--seq-len", "16",
       "--vocab-size", "64", "--steps", "2", "--threads", "1", "--no-progress", "--out", dir / "metrics/{rank}.json",
       "--trace", dir / "trace.{rank}.json"},
      dir / "run.log", {}, 60);
  ASSERT_EQ(r.exitcode, 0) << kit_test::describe_run(r);
  json merged = json::array();
  for (int64_t rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json trace = load(dir / ("trace." + std::to_string(rank) + ".json"));
    EXPECT_EQ(thread_names(trace), (std::map<int64_t, std::string>{{rank, "rank " + std::to_string(rank)}}));
    const auto tracks = events_by_track(trace);
    ASSERT_EQ(tracks.size(), 1u);
    ASSERT_TRUE(tracks.count(rank));
    const auto forwards = events_by_track(trace, "forward")[rank], backwards = events_by_track(trace, "backward")[rank];
    EXPECT_EQ(forwards.size(), static_cast<size_t>(m));
    EXPECT_EQ(backwards.size(), static_cast<size_t>(m));
    for (const auto& e : forwards) EXPECT_EQ(e["args"]["step"], 1) << "the timed step only";
    // Stage 0 receives a gradient for each backward, stage 1 an activation for each forward.
    const auto receives = events_by_track(trace, "recv")[rank];
    ASSERT_EQ(receives.size(), static_cast<size_t>(m));
    const auto& parents = rank == 0 ? backwards : forwards;
    for (size_t i = 0; i < receives.size(); ++i) {
      const double ts = receives[i]["ts"], end = ts + receives[i]["dur"].get<double>();
      const double p0 = parents[i]["ts"], p1 = p0 + parents[i]["dur"].get<double>();
      EXPECT_GE(ts, p0) << receives[i].dump() << " in " << parents[i].dump();
      EXPECT_LE(end, p1) << receives[i].dump() << " in " << parents[i].dump();
      EXPECT_EQ(receives[i]["args"]["for"], parents[i]["name"]);
    }
    // One rank's F/B do not overlap.
    std::vector<json> actions = forwards;
    actions.insert(actions.end(), backwards.begin(), backwards.end());
    std::sort(actions.begin(), actions.end(), [](const json& a, const json& b) { return a["ts"] < b["ts"]; });
    for (size_t i = 1; i < actions.size(); ++i)
      EXPECT_LE(actions[i - 1]["ts"].get<double>() + actions[i - 1]["dur"].get<double>(),
                actions[i]["ts"].get<double>() + 1e-3);
    for (const auto& e : trace.at("traceEvents")) merged.push_back(e);
  }
  EXPECT_EQ(events_by_track({{"traceEvents", merged}}).size(), 2u) << "merged files keep one track per rank";
}

}  // namespace
