// Problem 3.1: the GPipe, 1F1B and interleaved 1F1B schedules (student code). Each schedule
// is pinned exactly for small shapes, compared with the test side's own reference
// (reference_schedules.h) over every shape the issue lists, checked complete, and replayed
// by the simulator (given code) to completion, against the SPEC's makespans and memory.
// The subject parts build the student's schedules and record them as data (student_schedule,
// schedule_test_util.h); the judge compares them with the reference and replays them.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "reference_schedules.h"
#include "schedule_test_util.h"

namespace {

using namespace pp_test;  // schedule_test_util.h and reference_schedules.h, with kit::pp's types
namespace judge = kit::judge;

constexpr double kF = 1, kB = 2;  // the SPEC's costs, no communication time

Costs spec_costs() {
  Costs c;
  c.forward = kF;
  c.backward = kB;
  c.comm = 0;
  return c;
}

// Every rank's list equals `want`, with both schedules in the message when not.
void expect_schedules(const Schedules& got, const Schedules& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": one list per rank\nexpected:" << show(want) << "actual:" << show(got);
  for (size_t r = 0; r < want.size(); ++r)
    EXPECT_EQ(kit::pp::to_string(got[r]), kit::pp::to_string(want[r]))
        << what << ", rank " << r << "\nexpected:" << show(want) << "actual:" << show(got);
}

Schedules parse_all(const std::vector<std::string>& rows) {
  Schedules s;
  for (const auto& row : rows) s.push_back(parse(row));
  return s;
}

// check_complete and the replay, failing with the schedule when either throws. No timeline
// then: the caller stops, so a deadlock's message is the only failure it shows.
std::optional<Timeline> replay(const Schedules& s, const kit::pp::PipelineShape& shape, const std::string& what) {
  auto out = std::make_shared<Timeline>();  // shared: a replay that times out outlives this call
  const std::string failed =
      pp_test::run_with_timeout([out, s, shape] { *out = kit::pp::simulate(s, shape, spec_costs()); }, 10);
  if (!failed.empty()) {
    ADD_FAILURE() << what << ": the schedule does not simulate to completion (" << failed << ")" << show(s);
    return std::nullopt;
  }
  return *out;
}

std::string shape_name(int64_t p, int64_t m, int64_t v = 1) {
  return "p = " + std::to_string(p) + ", m = " + std::to_string(m) + (v > 1 ? ", v = " + std::to_string(v) : "");
}

// For m = step, 2 step, ... up to 16: the student's `kind` schedule of shape {p, m, v} equals
// the reference ref(m), replays, and check(timeline, m, what) holds. Stops at the first shape
// that fails (one shape's diff is enough); the subject records every shape's schedule.
template <typename Ref, typename Check>
void expect_reference_for_every_m(ScheduleKind kind, const std::string& name, int64_t p, int64_t v, int64_t step,
                                  Ref ref, Check check) {
  for (int64_t m = step; m <= 16; m += step) {
    const std::string what = name + " " + shape_name(p, m, v);
    const std::optional<Schedules> got = student_schedule(kind, p, m, v);
    if (!judge::judging()) continue;
    if (!got) return;
    const Schedules& s = *got;
    expect_schedules(s, ref(m), what);
    const std::optional<Timeline> t = replay(s, {p, m, v}, what);
    if (!t) return;
    check(*t, m, what);
    if (::testing::Test::HasFailure()) return;
  }
}

// ---- GPipe ---------------------------------------------------------------------------
// One fixture per suite, so plain cases (TEST_F) and sweeps (TEST_P, instantiated without a
// prefix) share the suite name the rubric grades.
class ScheduleGPipe : public ::testing::TestWithParam<int64_t> {};

TEST_F(ScheduleGPipe, TwoRanksFourMicrobatchesAllForwardsThenAllBackwards) {
  const auto got = student_schedule(ScheduleKind::GPipe, 2, 4);
  if (!got) return;
  const std::string every_rank = "F0 F1 F2 F3 B0 B1 B2 B3";
  expect_schedules(*got, parse_all({every_rank, every_rank}), "GPipe " + shape_name(2, 4));
}

TEST_F(ScheduleGPipe, OneMicrobatch) {
  const auto got = student_schedule(ScheduleKind::GPipe, 3, 1);
  if (!got) return;
  expect_schedules(*got, parse_all({"F0 B0", "F0 B0", "F0 B0"}), "GPipe " + shape_name(3, 1));
}

TEST_F(ScheduleGPipe, SpecFactsFourRanksEightMicrobatches) {
  const auto got = student_schedule(ScheduleKind::GPipe, 4, 8);
  if (!got) return;
  const Schedules& s = *got;
  const std::optional<Timeline> t = replay(s, {4, 8, 1}, "GPipe " + shape_name(4, 8));
  if (!t) return;
  EXPECT_DOUBLE_EQ(t->makespan, 33) << "(m + p - 1)(F + B) = 11 * 3" << show(s);
  EXPECT_NEAR(t->bubble_fraction, 3.0 / 11.0, 1e-12) << "(p - 1)/(m + p - 1)";
  EXPECT_EQ(t->peak_in_flight, (std::vector<int64_t>{8, 8, 8, 8})) << "GPipe keeps every micro-batch on every rank";
}

TEST_P(ScheduleGPipe, MatchesReferenceForEveryMicrobatchCount) {
  const int64_t p = GetParam();
  expect_reference_for_every_m(
      ScheduleKind::GPipe, "GPipe", p, 1, 1, [&](int64_t m) { return pp_test::ref_all_gpipe(p, m); },
      [&](const Timeline& t, int64_t m, const std::string& what) {
        EXPECT_DOUBLE_EQ(t.makespan, static_cast<double>(m + p - 1) * (kF + kB)) << what;
        EXPECT_EQ(t.peak_in_flight, std::vector<int64_t>(static_cast<size_t>(p), m)) << what;
      });
}

INSTANTIATE_TEST_SUITE_P(, ScheduleGPipe, ::testing::Range<int64_t>(1, 9),
                         [](const auto& info) { return "p" + std::to_string(info.param); });

// ---- 1F1B ----------------------------------------------------------------------------
class Schedule1F1B : public ::testing::TestWithParam<int64_t> {};

TEST_F(Schedule1F1B, TwoRanksFourMicrobatches) {
  const auto got = student_schedule(ScheduleKind::OneFOneB, 2, 4);
  if (!got) return;
  expect_schedules(*got,
                   parse_all({"F0 F1 B0 F2 B1 F3 B2 B3",   // one warm-up forward
                              "F0 B0 F1 B1 F2 B2 F3 B3"}),  // none: the last rank alternates at once
                   "1F1B " + shape_name(2, 4));
}

TEST_F(Schedule1F1B, FourRanksEightMicrobatches) {
  const auto got = student_schedule(ScheduleKind::OneFOneB, 4, 8);
  if (!got) return;
  expect_schedules(*got,
                   parse_all({"F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
                              "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
                              "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
                              "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"}),
                   "1F1B " + shape_name(4, 8));
}

TEST_F(Schedule1F1B, FewerMicrobatchesThanRanksWarmsUpWithAllOfThem) {
  // min(p - r - 1, m) warm-ups: ranks 0 and 1 have only m = 2 forwards to do, rank 2 one.
  const auto got = student_schedule(ScheduleKind::OneFOneB, 4, 2);
  if (!got) return;
  expect_schedules(*got,
                   parse_all({"F0 F1 B0 B1", "F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"}), "1F1B " + shape_name(4, 2));
}

TEST_F(Schedule1F1B, SpecFactsFourRanksEightMicrobatches) {
  const auto got = student_schedule(ScheduleKind::OneFOneB, 4, 8);
  if (!got) return;
  const Schedules& s = *got;
  const std::optional<Timeline> t = replay(s, {4, 8, 1}, "1F1B " + shape_name(4, 8));
  if (!t) return;
  EXPECT_DOUBLE_EQ(t->makespan, 33) << "1F1B has GPipe's makespan" << show(s);
  EXPECT_EQ(t->peak_in_flight, (std::vector<int64_t>{4, 3, 2, 1})) << "rank r keeps at most p - r micro-batches" << show(s);
}

TEST_P(Schedule1F1B, MatchesReferenceForEveryMicrobatchCount) {
  const int64_t p = GetParam();
  expect_reference_for_every_m(
      ScheduleKind::OneFOneB, "1F1B", p, 1, 1, [&](int64_t m) { return pp_test::ref_all_1f1b(p, m); },
      [&](const Timeline& t, int64_t m, const std::string& what) {
        EXPECT_DOUBLE_EQ(t.makespan, static_cast<double>(m + p - 1) * (kF + kB)) << what << ": same makespan as GPipe";
        for (int64_t r = 0; r < p; ++r)
          EXPECT_EQ(t.peak_in_flight.at(static_cast<size_t>(r)), std::min(p - r, m)) << what << ", rank " << r;
      });
}

INSTANTIATE_TEST_SUITE_P(, Schedule1F1B, ::testing::Range<int64_t>(1, 9),
                         [](const auto& info) { return "p" + std::to_string(info.param); });

// ---- interleaved 1F1B ---------------------------------------------------------------
class ScheduleInterleaved : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_F(ScheduleInterleaved, TwoRanksFourMicrobatchesTwoChunks) {
  // "F2.1" is micro-batch 2 on chunk 1 (virtual stage 1*p + r).
  const auto got = student_schedule(ScheduleKind::Interleaved, 2, 4, 2);
  if (!got) return;
  expect_schedules(*got,
                   parse_all({"F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3",
                              "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3"}),
                   "interleaved " + shape_name(2, 4, 2));
}

TEST_F(ScheduleInterleaved, AsManyMicrobatchesAsRanksIsAllForwardsThenAllBackwards) {
  const auto got = student_schedule(ScheduleKind::Interleaved, 2, 2, 2);
  if (!got) return;
  const std::string every_rank = "F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1";
  expect_schedules(*got, parse_all({every_rank, every_rank}),
                   "interleaved " + shape_name(2, 2, 2));
}

TEST_F(ScheduleInterleaved, FourRanksEightMicrobatchesTwoChunks) {
  const auto got = student_schedule(ScheduleKind::Interleaved, 4, 8, 2);
  if (!got) return;
  expect_schedules(
      *got,
      parse_all({"F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 B0.1 F7 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0 F7.1 B1 B2 B3 "
                 "B4.1 B5.1 B6.1 B7.1 B4 B5 B6 B7",
                 "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 B0.1 F5 B1.1 F6 B2.1 F7 B3.1 F4.1 B0 F5.1 B1 F6.1 B2 F7.1 B3 "
                 "B4.1 B5.1 B6.1 B7.1 B4 B5 B6 B7",
                 "F0 F1 F2 F3 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 F4 B2.1 F5 B3.1 F6 B0 F7 B1 F4.1 B2 F5.1 B3 F6.1 B4.1 "
                 "F7.1 B5.1 B6.1 B7.1 B4 B5 B6 B7",
                 "F0 F1 F2 F3 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4 B0 F5 B1 F6 B2 F7 B3 F4.1 B4.1 F5.1 B5.1 "
                 "F6.1 B6.1 F7.1 B7.1 B4 B5 B6 B7"}),
      "interleaved " + shape_name(4, 8, 2));
}

TEST_F(ScheduleInterleaved, SpecFactsFourRanksEightMicrobatchesTwoChunks) {
  const auto got = student_schedule(ScheduleKind::Interleaved, 4, 8, 2);
  if (!got) return;
  const Schedules& s = *got;
  const std::optional<Timeline> t = replay(s, {4, 8, 2}, "interleaved " + shape_name(4, 8, 2));
  if (!t) return;
  EXPECT_DOUBLE_EQ(t->makespan, 28.5) << "m(F + B) + (p - 1)(F + B)/v = 24 + 4.5" << show(s);
  EXPECT_EQ(t->peak_in_flight, (std::vector<int64_t>{11, 9, 7, 5}))
      << "Megatron keeps (p - r - 1)*2 + (v - 1)*p warm-up forwards, plus one" << show(s);
}

TEST_F(ScheduleInterleaved, OneRankRunsItsChunksInOrder) {
  const auto got = student_schedule(ScheduleKind::Interleaved, 1, 2, 2);
  if (!got) return;
  expect_schedules(*got, parse_all({"F0 F0.1 B0.1 F1 B0 F1.1 B1.1 B1"}),
                   "interleaved " + shape_name(1, 2, 2));
}

TEST_P(ScheduleInterleaved, MatchesReferenceForEverySupportedMicrobatchCount) {
  const int64_t p = std::get<0>(GetParam()), v = std::get<1>(GetParam());
  expect_reference_for_every_m(  // m must be a multiple of p
      ScheduleKind::Interleaved, "interleaved", p, v, p,
      [&](int64_t m) { return pp_test::ref_all_interleaved(p, m, v); },
      [&](const Timeline& t, int64_t m, const std::string& what) {
        for (int64_t r = 0; r < p; ++r)
          EXPECT_EQ(t.peak_in_flight.at(static_cast<size_t>(r)), pp_test::ref_interleaved_peak_in_flight(p, m, v, r))
              << what << ", rank " << r;
      });
}

INSTANTIATE_TEST_SUITE_P(, ScheduleInterleaved,
                         ::testing::Combine(::testing::Range<int64_t>(1, 9), ::testing::Range<int64_t>(2, 5)),
                         [](const auto& info) {
                           return "p" + std::to_string(std::get<0>(info.param)) + "_v" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
