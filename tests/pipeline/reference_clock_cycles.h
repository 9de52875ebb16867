// The judge's GPipe schedule for clock_cycles (Problem 2.1), built the slow way so it shares
// nothing with a student's formula: clock k holds every (i, j) with i + j == k, by increasing j.
// Used by the public test and the graded variants (grader/hidden_tests/pipeline/).
#pragma once
#include <cstddef>
#include <cstdint>

#include "pipeline/schedule.h"

namespace kit::test {

inline Schedule reference_clock_cycles(int64_t m, int64_t n) {
  Schedule s(static_cast<size_t>(m + n - 1));
  for (int64_t k = 0; k < m + n - 1; ++k)
    for (int64_t j = 0; j < n; ++j)
      if (k - j >= 0 && k - j < m) s[static_cast<size_t>(k)].push_back({k - j, j});
  return s;
}

}  // namespace kit::test
