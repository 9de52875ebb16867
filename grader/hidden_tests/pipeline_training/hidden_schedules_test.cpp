// Graded variants of tests/pipeline_training/schedules_test.cpp on shapes the public tests
// do not use (more ranks than 8, more micro-batches than 16, 5 and 6 chunks per rank, fewer
// micro-batches than ranks), so a schedule tuned to the public shapes loses these points.
// One case per shape, each compared with the test side's reference and replayed to the end.
// The subject part builds the student's schedule and records it (student_schedule); the judge
// compares and replays it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "pipeline_training/reference_schedules.h"
#include "pipeline_training/schedule_test_util.h"

namespace {

using kit::pp::ScheduleKind;
using kit::pp::Schedules;

// The student's schedule equals reference() on every rank and simulates to completion; returns
// the peak in-flight per rank (empty on failure, and in the subject, which checks nothing).
// reference() runs in the judge only.
std::vector<int64_t> expect_schedule(ScheduleKind kind, int64_t p, int64_t m, int64_t v,
                                     const std::function<Schedules()>& reference) {
  const std::string what = kit::pp::to_string(kind) + " p = " + std::to_string(p) + ", m = " + std::to_string(m) +
                           ", v = " + std::to_string(v);
  const std::optional<Schedules> recorded = pp_test::student_schedule(kind, p, m, v);
  if (!recorded) return {};
  const Schedules& got = *recorded;
  const Schedules want = reference();
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return {};
  for (size_t r = 0; r < want.size(); ++r)
    EXPECT_EQ(kit::pp::to_string(got[r]), kit::pp::to_string(want[r]))
        << what << ", rank " << r << "\nexpected:" << pp_test::show(want) << "actual:" << pp_test::show(got);
  auto peaks = std::make_shared<std::vector<int64_t>>();  // shared: a replay that times out outlives this call
  const std::string failed = pp_test::run_with_timeout(
      [peaks, got, p, m, v] { *peaks = kit::pp::simulate(got, {p, m, v}).peak_in_flight; }, 10);
  EXPECT_EQ(failed, "") << what << ": the schedule must simulate to completion";
  return failed.empty() ? *peaks : std::vector<int64_t>{};
}

void expect_gpipe(int64_t p, int64_t m) {
  const auto peaks = expect_schedule(ScheduleKind::GPipe, p, m, 1, [&] { return pp_test::ref_all_gpipe(p, m); });
  if (!kit::judge::judging()) return;  // the subject checks nothing
  EXPECT_EQ(peaks, std::vector<int64_t>(static_cast<size_t>(p), m));
}

void expect_1f1b(int64_t p, int64_t m) {
  const auto peaks = expect_schedule(ScheduleKind::OneFOneB, p, m, 1, [&] { return pp_test::ref_all_1f1b(p, m); });
  if (!kit::judge::judging()) return;
  for (int64_t r = 0; r < static_cast<int64_t>(peaks.size()); ++r)
    EXPECT_EQ(peaks[static_cast<size_t>(r)], std::min(p - r, m)) << "rank " << r;
}

void expect_interleaved(int64_t p, int64_t m, int64_t v) {
  const auto peaks = expect_schedule(ScheduleKind::Interleaved, p, m, v,
                                     [&] { return pp_test::ref_all_interleaved(p, m, v); });
  if (!kit::judge::judging()) return;
  for (int64_t r = 0; r < static_cast<int64_t>(peaks.size()); ++r)
    EXPECT_EQ(peaks[static_cast<size_t>(r)], pp_test::ref_interleaved_peak_in_flight(p, m, v, r)) << "rank " << r;
}

TEST(HiddenScheduleGPipe, NineRanksThreeMicrobatches) { expect_gpipe(9, 3); }
TEST(HiddenScheduleGPipe, TwelveRanksTwentyMicrobatches) { expect_gpipe(12, 20); }
TEST(HiddenScheduleGPipe, FiveRanksTwentyFourMicrobatches) { expect_gpipe(5, 24); }

TEST(HiddenSchedule1F1B, ThreeRanksFiveMicrobatches) { expect_1f1b(3, 5); }
TEST(HiddenSchedule1F1B, TenRanksFourMicrobatches) { expect_1f1b(10, 4); }
TEST(HiddenSchedule1F1B, SixRanksTwentyThreeMicrobatches) { expect_1f1b(6, 23); }
TEST(HiddenSchedule1F1B, ElevenRanksElevenMicrobatches) { expect_1f1b(11, 11); }

TEST(HiddenScheduleInterleaved, ThreeRanksNineMicrobatchesFiveChunks) { expect_interleaved(3, 9, 5); }
TEST(HiddenScheduleInterleaved, SixRanksSixMicrobatchesThreeChunks) { expect_interleaved(6, 6, 3); }
TEST(HiddenScheduleInterleaved, FourRanksTwentyMicrobatchesTwoChunks) { expect_interleaved(4, 20, 2); }
TEST(HiddenScheduleInterleaved, TwoRanksFourteenMicrobatchesSixChunks) { expect_interleaved(2, 14, 6); }
TEST(HiddenScheduleInterleaved, OneRankFiveMicrobatchesThreeChunks) { expect_interleaved(1, 5, 3); }

}  // namespace
