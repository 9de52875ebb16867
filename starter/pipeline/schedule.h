// The clock-cycle schedule of a pipeline, as data: which micro-batch runs on which
// partition at each clock. clock_cycles (pipeline/pipe.h, Problem 2.1) builds it; this
// file only names and prints it, so it needs no tensors.
//
// For m = 4 micro-batches and n = 3 partitions:
//
//   clock | partition 0 | partition 1 | partition 2
//       0 |    (0,0)    |             |
//       1 |    (1,0)    |    (0,1)    |
//       2 |    (2,0)    |    (1,1)    |    (0,2)
//       3 |    (3,0)    |    (2,1)    |    (1,2)
//       4 |             |    (3,1)    |    (2,2)
//       5 |             |             |    (3,2)
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kit {

// Micro-batch i on partition j, written (i,j) as in the original.
struct Step {
  int64_t microbatch = 0;  // i
  int64_t partition = 0;   // j
  bool operator==(const Step& o) const { return microbatch == o.microbatch && partition == o.partition; }
  bool operator!=(const Step& o) const { return !(*this == o); }
};
using Clock = std::vector<Step>;     // the steps that run at the same time
using Schedule = std::vector<Clock>;  // clock 0, clock 1, ...

std::string to_string(const Step& s);       // "(i,j)"
std::string to_string(const Clock& clock);   // "(1,0) (0,1)"
std::string to_string(const Schedule& s);    // "(0,0) | (1,0) (0,1) | ..."

// The table above; steps are placed in their partition's column (a step whose partition is
// outside [0, n) is listed at the end of its row, so a wrong schedule still prints).
std::string format_schedule_table(const Schedule& s, int64_t num_partitions);

// {"microbatches": m, "partitions": n, "clocks": [[[i, j], ...], ...]}
nlohmann::json schedule_to_json(const Schedule& s, int64_t num_microbatches, int64_t num_partitions);

// What `schedule -m M -n N` prints: a heading (clocks, m + n - 1), the table, and how busy
// every partition is (m of the clocks for forward-only GPipe with equal stages) and the bubble.
std::string format_schedule_report(const Schedule& s, int64_t num_microbatches, int64_t num_partitions);

}  // namespace kit
