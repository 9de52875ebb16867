// schedule: print the pipeline's clock-cycle schedule (Problem 2.1's clock_cycles) for
// m micro-batches on n partitions, as a table or as JSON. No tensors involved.
//   ./build/schedule -m 4 -n 3
//   ./build/schedule -m 8 -n 4 --json
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kit/errors.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule.h"
#include "project/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Print the clock-cycle schedule of a pipeline: which micro-batch (i) runs on which partition (j) "
               "at each clock."};
  int64_t m = 4, n = 3;
  bool json = false;
  app.add_option("-m,--microbatches", m, "Number of micro-batches")->capture_default_str();
  app.add_option("-n,--partitions,--stages", n, "Number of partitions (pipeline stages)")->capture_default_str();
  app.add_flag("--json", json, "Print JSON instead of a table");
  return kit::guarded_main(argc, argv, app, [&] {
    const kit::Schedule schedule = kit::clock_cycles(m, n);
    if (json) {
      std::cout << kit::schedule_to_json(schedule, m, n).dump() << "\n";
      return 0;
    }
    std::cout << m << " micro-batches on " << n << " partitions: " << schedule.size() << " clocks (m + n - 1 = "
              << m + n - 1 << "); (i,j) is micro-batch i on partition j\n\n"
              << kit::format_schedule_table(schedule, n);
    // Forward-only GPipe with equal stages: m * n busy slots out of (m + n - 1) * n.
    const double busy = static_cast<double>(m) / static_cast<double>(schedule.size());
    std::cout << "\nevery partition is busy " << m << " of " << schedule.size() << " clocks (" << 100.0 * busy
              << " %), idle " << 100.0 * (1 - busy) << " % (the bubble)\n";
    return 0;
  });
}
