// The Chrome trace writer (kit/trace.h) and the pipeline timelines' events
// (pipeline_training/trace_events.h): the JSON is parsed back and each field checked as
// Perfetto reads it (ts and dur in microseconds, one tid per track, thread_name metadata).
// Given code only: these hold in the starter too.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "process_harness.h"
#include "kit/errors.h"
#include "kit/trace.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/trace_events.h"

namespace {
using nlohmann::json;

// Two ranks, F and B on each, rank 1 with a receive inside its forward.
kit::trace::Trace small_trace() {
  kit::trace::Trace t;
  t.tracks = {{0, "rank 0"}, {1, "rank 1"}};
  t.events = {{0, "F mb0", "forward", 0.001, 0.002, {{"microbatch", 0}, {"stage", 0}}},
              {1, "F mb0", "forward", 0.002, 0.0035, {{"microbatch", 0}, {"stage", 1}}},
              {1, "recv activation F mb0", "recv", 0.002, 0.0025, {{"microbatch", 0}}},
              {1, "B mb0", "backward", 0.0035, 0.0055, {{"microbatch", 0}, {"stage", 1}}},
              {0, "B mb0", "backward", 0.0055, 0.0075, {{"microbatch", 0}, {"stage", 0}}}};
  t.other = {{"program", "test"}, {"world", 2}};
  return t;
}

// The trace as a reader sees it: parsed back from its text.
json round_trip(const kit::trace::Trace& t) { return json::parse(kit::trace::to_chrome_json(t).dump()); }

std::vector<json> with_phase(const json& trace, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == ph) out.push_back(e);
  return out;
}

// Complete events of one track either follow each other or nest (a receive inside its
// action): no event starts inside another and ends after it, which the UI could not draw.
void expect_no_partial_overlap(const json& trace) {
  std::map<int64_t, std::vector<std::pair<double, double>>> tracks;
  for (const auto& e : with_phase(trace, "X")) {
    const double ts = e.at("ts").get<double>();
    tracks[e.at("tid").get<int64_t>()].push_back({ts, ts + e.at("dur").get<double>()});
  }
  for (auto& [tid, spans] : tracks) {
    // By start, the longer first: a parent before the events nested in it.
    std::sort(spans.begin(), spans.end(),
              [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<std::pair<double, double>> open;  // the events the current one may be nested in
    for (const auto& [b0, b1] : spans) {
      while (!open.empty() && open.back().second <= b0 + 1e-6) open.pop_back();
      if (!open.empty())
        EXPECT_LE(b1, open.back().second + 1e-6) << "track " << tid << ": [" << b0 << ", " << b1 << "] overlaps ["
                                                 << open.back().first << ", " << open.back().second << "]";
      open.push_back({b0, b1});
    }
  }
}

TEST(TraceWriter, TopLevelObjectHasEventsUnitAndOtherData) {
  const json j = round_trip(small_trace());
  ASSERT_TRUE(j.at("traceEvents").is_array());
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  EXPECT_EQ(j.at("otherData").at("program"), "test");
  EXPECT_EQ(j.at("otherData").at("world"), 2);
}

TEST(TraceWriter, EveryTrackIsNamedByThreadNameMetadata) {
  const json j = round_trip(small_trace());
  std::map<int64_t, std::string> names;
  bool process_named = false;
  for (const auto& e : with_phase(j, "M")) {
    EXPECT_EQ(e.at("pid"), 0);
    if (e.at("name") == "thread_name") names[e.at("tid").get<int64_t>()] = e.at("args").at("name");
    if (e.at("name") == "process_name") process_named = e.at("args").at("name") == "pipeline";
  }
  EXPECT_TRUE(process_named);
  EXPECT_EQ(names, (std::map<int64_t, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
}

TEST(TraceWriter, CompleteEventsCarryMicrosecondsTrackCategoryNameAndArgs) {
  const kit::trace::Trace t = small_trace();
  const std::vector<json> x = with_phase(round_trip(t), "X");
  ASSERT_EQ(x.size(), t.events.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const kit::trace::Event& want = t.events[k];
    SCOPED_TRACE(want.name + " on track " + std::to_string(want.track));
    EXPECT_EQ(x[k].at("pid"), 0);
    EXPECT_EQ(x[k].at("tid"), want.track);
    EXPECT_EQ(x[k].at("name"), want.name);
    EXPECT_EQ(x[k].at("cat"), want.category);
    EXPECT_NEAR(x[k].at("ts").get<double>(), want.start_s * 1e6, 1e-6);
    EXPECT_NEAR(x[k].at("dur").get<double>(), (want.end_s - want.start_s) * 1e6, 1e-6);
    EXPECT_EQ(x[k].at("args"), want.args);
  }
  EXPECT_NEAR(x[0].at("ts").get<double>(), 1000.0, 1e-6) << "1 ms is 1000 microseconds";
  EXPECT_NEAR(x[0].at("dur").get<double>(), 1000.0, 1e-6);
}

TEST(TraceWriter, EventsOfOneTrackDoNotOverlapWhenTheInputDoesNot) { expect_no_partial_overlap(round_trip(small_trace())); }

TEST(TraceWriter, EventOnAnUnnamedTrackOrEndingBeforeItStartsIsAClearError) {
  kit::trace::Trace t = small_trace();
  t.events.push_back({7, "F mb1", "forward", 0, 1, json::object()});
  EXPECT_THROW(kit::trace::to_chrome_json(t), kit::Error);
  t = small_trace();
  t.events.push_back({0, "F mb1", "forward", 2, 1, json::object()});
  EXPECT_THROW(kit::trace::to_chrome_json(t), kit::Error);
}

TEST(TraceWriter, WritesAFileAndNamesAMissingDirectoryAndTheFix) {
  kit_test::TempDir dir("trace_writer");
  const std::string path = dir / "t.json";
  kit::trace::write_chrome_trace(path, small_trace(), "--trace");
  std::ifstream in(path);
  EXPECT_EQ(json::parse(in), round_trip(small_trace()));

  const std::string missing = dir / "no_such_dir/t.json";
  try {
    kit::trace::write_chrome_trace(missing, small_trace(), "--trace");
    FAIL() << "no error for " << missing;
  } catch (const kit::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(missing), std::string::npos) << what;
    EXPECT_NE(what.find("mkdir -p"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(missing));
}

// ---- pipeline timelines as events ----------------------------------------------------------

TEST(TraceEvents, ActionNamesShowChunkAndSliceOnlyWhereThereAreSeveral) {
  using kit::pp::B;
  using kit::pp::F;
  EXPECT_EQ(kit::pp::trace_name(F(3), {1, 1}), "F mb3");
  EXPECT_EQ(kit::pp::trace_name(B(3, 1), {2, 1}), "B mb3 c1");
  EXPECT_EQ(kit::pp::trace_name(F(6), {1, 4}), "F mb1 s2") << "unit 6 = micro-batch 1, slice 2 of 4";
}

TEST(TraceEvents, MeasuredBatchIsOnTheSteadyClockWithItsReceivesNested) {
  kit::pp::BatchResult batch;
  batch.clock_origin = 100.0;
  kit::pp::ActionTime f, b;
  f.action = kit::pp::F(1, 1);
  f.stage = 3;
  f.start = 0.5, f.end = 1.0, f.recv = 0.2;
  f.recv_spans = {{0.5, 0.7}};
  b.action = kit::pp::B(1, 1);
  b.stage = 3;
  b.start = 1.0, b.end = 2.0;
  batch.timeline = {f, b};
  const auto events = kit::pp::measured_events(batch, 1, {2, 1}, 4);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].name, "F mb1 c1");
  EXPECT_EQ(events[0].category, "forward");
  EXPECT_DOUBLE_EQ(events[0].start_s, 100.5);
  EXPECT_DOUBLE_EQ(events[0].end_s, 101.0);
  EXPECT_EQ(events[0].args.at("microbatch"), 1);
  EXPECT_EQ(events[0].args.at("chunk"), 1);
  EXPECT_EQ(events[0].args.at("stage"), 3);
  EXPECT_EQ(events[0].args.at("step"), 4);
  EXPECT_EQ(events[1].category, "recv");
  EXPECT_EQ(events[1].name, "recv activation F mb1 c1");
  EXPECT_DOUBLE_EQ(events[1].start_s, 100.5);
  EXPECT_DOUBLE_EQ(events[1].end_s, 100.7);
  EXPECT_EQ(events[2].name, "B mb1 c1");
  EXPECT_EQ(events[2].category, "backward");
  for (const auto& e : events) EXPECT_EQ(e.track, 1);

  kit::trace::Trace t;
  t.tracks = {{1, "rank 1"}};
  t.events = events;
  expect_no_partial_overlap(round_trip(t));
}

TEST(TraceEvents, TeraPipeUnitsAreMicroBatchAndSlice) {
  kit::pp::BatchResult batch;
  kit::pp::ActionTime a;
  a.action = kit::pp::F(5);
  a.end = 1;
  batch.timeline = {a};
  const auto events = kit::pp::measured_events(batch, 0, {1, 4}, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].args.at("microbatch"), 1);
  EXPECT_EQ(events[0].args.at("slice"), 1);
  EXPECT_EQ(events[0].args.at("unit"), 5);
}

}  // namespace
