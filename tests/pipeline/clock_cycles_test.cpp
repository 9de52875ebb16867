// Problem 2.1: clock_cycles(m, n), the GPipe schedule. The whole schedule is checked:
// the original's test missed a schedule that stopped before its last clocks.
// Each case's subject part only calls clock_cycles; the expected schedule and every check are
// the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "judge/judge.h"
#include "kit/errors.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_codec.h"
#include "reference_clock_cycles.h"

namespace kit {
namespace {

struct Shape {
  int64_t m, n;
};
void PrintTo(const Shape& s, std::ostream* os) { *os << "m " << s.m << ", n " << s.n; }

std::string show(const Schedule& s, int64_t n) { return "\n" + format_schedule_table(s, n); }

Schedule expected_schedule(int64_t m, int64_t n) { return test::reference_clock_cycles(m, n); }

// The schedule the student's clock_cycles(m, n) returns, as the subject recorded it.
Schedule student_schedule(int64_t m, int64_t n) {
  return judge::subject([&](judge::Record& out) { out.put("schedule", clock_cycles(m, n)); })
      .get<Schedule>("schedule");
}

class ClockCycles : public ::testing::TestWithParam<Shape> {};

TEST_P(ClockCycles, HasExactlyMPlusNMinusOneClocks) {
  const auto [m, n] = GetParam();
  const Schedule s = student_schedule(m, n);
  JUDGE EXPECT_EQ(static_cast<int64_t>(s.size()), m + n - 1)
      << "m = " << m << " micro-batches on n = " << n << " partitions need m + n - 1 = " << m + n - 1
      << " clocks: the last micro-batch enters at clock m - 1 and needs n - 1 more clocks to reach the last "
         "partition.\nexpected:"
      << show(expected_schedule(m, n), n) << "actual:" << show(s, n);
}

TEST_P(ClockCycles, RunsEveryMicrobatchOnEveryPartitionExactlyOnce) {
  const auto [m, n] = GetParam();
  const Schedule s = student_schedule(m, n);
  if (!judge::judging()) return;
  std::map<std::pair<int64_t, int64_t>, int> seen;
  for (const auto& clock : s)
    for (const auto& step : clock) {
      ASSERT_TRUE(step.microbatch >= 0 && step.microbatch < m && step.partition >= 0 && step.partition < n)
          << "step " << to_string(step) << " is out of range: micro-batches are 0.." << m - 1
          << ", partitions 0.." << n - 1 << show(s, n);
      ++seen[{step.microbatch, step.partition}];
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_EQ((seen[{i, j}]), 1) << "micro-batch " << i << " on partition " << j << " is scheduled "
                                   << seen[{i, j}] << " times (must be exactly once)" << show(s, n);
}

TEST_P(ClockCycles, RespectsDependencies) {
  const auto [m, n] = GetParam();
  const Schedule s = student_schedule(m, n);
  if (!judge::judging()) return;
  std::map<std::pair<int64_t, int64_t>, int64_t> clock_of;
  for (size_t k = 0; k < s.size(); ++k)
    for (const auto& step : s[k]) clock_of[{step.microbatch, step.partition}] = static_cast<int64_t>(k);
  for (const auto& [ij, k] : clock_of) {
    const auto [i, j] = ij;
    // (i, j) needs (i, j - 1)'s output, and partition j finishes micro-batch i - 1 first.
    if (j > 0 && clock_of.count({i, j - 1})) {
      EXPECT_GT(k, (clock_of[{i, j - 1}])) << "(" << i << "," << j << ") at clock " << k
                                           << " does not come after its input (" << i << "," << j - 1
                                           << ") at clock " << clock_of[{i, j - 1}] << show(s, n);
    }
    if (i > 0 && clock_of.count({i - 1, j})) {
      EXPECT_GT(k, (clock_of[{i - 1, j}])) << "(" << i << "," << j << ") at clock " << k
                                           << " does not come after (" << i - 1 << "," << j
                                           << ") at clock " << clock_of[{i - 1, j}]
                                           << ": micro-batches must keep their order" << show(s, n);
    }
  }
}

TEST_P(ClockCycles, EveryClockHoldsTheDiagonal) {
  const auto [m, n] = GetParam();
  const Schedule s = student_schedule(m, n);
  if (!judge::judging()) return;
  const Schedule want = expected_schedule(m, n);
  ASSERT_EQ(s.size(), want.size()) << "expected:" << show(want, n) << "actual:" << show(s, n);
  for (size_t k = 0; k < s.size(); ++k)
    EXPECT_EQ(to_string(s[k]), to_string(want[k]))
        << "clock " << k << " must hold (k - j, j) for j from max(0, k - m + 1) to min(k, n - 1)\nexpected:"
        << show(want, n) << "actual:" << show(s, n);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClockCycles,
                         ::testing::Values(Shape{1, 1}, Shape{1, 3}, Shape{3, 1}, Shape{3, 3}, Shape{4, 2},
                                           Shape{6, 2}, Shape{4, 3}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "m" + std::to_string(info.param.m) + "_n" + std::to_string(info.param.n);
                         });

TEST(ClockCyclesExample, FourMicrobatchesOnThreePartitionsMatchesTheSpec) {
  const Schedule s = student_schedule(4, 3);
  if (!judge::judging()) return;
  // The example from the assignment, written out by hand.
  const Schedule want = {{{0, 0}},
                         {{1, 0}, {0, 1}},
                         {{2, 0}, {1, 1}, {0, 2}},
                         {{3, 0}, {2, 1}, {1, 2}},
                         {{3, 1}, {2, 2}},
                         {{3, 2}}};
  EXPECT_EQ(to_string(s), to_string(want)) << "\nexpected:" << show(want, 3) << "actual:" << show(s, 3);
}

TEST(ClockCyclesExample, RejectsEmptyPipelines) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("m = 0", [&] { clock_cycles(0, 3); });
    out.outcome("n = 0", [&] { clock_cycles(3, 0); });
  });
  JUDGE {
    for (const char* what : {"m = 0", "n = 0"})
      EXPECT_EQ(got.get<judge::Outcome>(what).kind, "kit::Error")
          << "clock_cycles with " << what << " must throw kit::Error; it " << got.get<judge::Outcome>(what).describe();
  }
}

}  // namespace
}  // namespace kit
