// The GPipe clock-cycle schedule, computed here from its formula for the handout's
// picture (on purpose independent of the student's pipeline code): with m micro-batches
// and n stages there are m + n - 1 clocks, and clock k runs micro-batch k - j on stage j
// for j from max(0, k - m + 1) to min(k, n - 1).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace kit::plots {

struct ScheduleSize {
  int micro_batches = 4;  // m
  int stages = 3;         // n
};

// Parses "MxN" (e.g. "4x3": 4 micro-batches, 3 stages). Throws kit::Error with the
// expected form when `text` is not that, or the picture would be unreadably large.
ScheduleSize parse_schedule_size(const std::string& text);

// clocks[k] = the (micro-batch, stage) pairs of clock k, stage ascending.
std::vector<std::vector<std::pair<int, int>>> schedule_clocks(int m, int n);

}  // namespace kit::plots
