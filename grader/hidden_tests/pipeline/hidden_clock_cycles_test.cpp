// Graded variants of tests/pipeline/clock_cycles_test.cpp on shapes the public test does
// not use, so a schedule written for the public shapes only (a table of their answers, a
// formula that holds only when m >= n) loses these points. One case per shape, so each
// shape is scored on its own.
#include <gtest/gtest.h>

#include "judge/judge.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_codec.h"
#include "pipeline/reference_clock_cycles.h"

namespace kit {
namespace {

// The subject runs clock_cycles(m, n); the judge builds the schedule the slow way
// (tests/pipeline/reference_clock_cycles.h) and compares.
void expect_schedule(int64_t m, int64_t n) {
  const Schedule got = judge::subject([&](judge::Record& out) { out.put("schedule", clock_cycles(m, n)); })
                           .get<Schedule>("schedule");
  if (!judge::judging()) return;
  const Schedule want = test::reference_clock_cycles(m, n);
  const std::string tables =
      "\nexpected:\n" + format_schedule_table(want, n) + "actual:\n" + format_schedule_table(got, n);
  ASSERT_EQ(got.size(), want.size()) << "m = " << m << ", n = " << n << " needs m + n - 1 = " << m + n - 1
                                     << " clocks" << tables;
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(to_string(got[k]), to_string(want[k]))
        << "clock " << k << " must hold (k - j, j) for j from max(0, k - m + 1) to min(k, n - 1)" << tables;
}

TEST(HiddenClockCycles, M2N5) { expect_schedule(2, 5); }
TEST(HiddenClockCycles, M5N4) { expect_schedule(5, 4); }
TEST(HiddenClockCycles, M7N3) { expect_schedule(7, 3); }
TEST(HiddenClockCycles, M2N2) { expect_schedule(2, 2); }
TEST(HiddenClockCycles, M8N1) { expect_schedule(8, 1); }
TEST(HiddenClockCycles, M1N6) { expect_schedule(1, 6); }
TEST(HiddenClockCycles, M9N7) { expect_schedule(9, 7); }

}  // namespace
}  // namespace kit
