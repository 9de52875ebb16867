// Problem 8.2 (given): the largest stage time of a partition (see planner/partition.h).
#include <algorithm>

#include "kit/errors.h"
#include "planner/partition.h"

namespace kit::planner {

double slowest_stage_seconds(const std::vector<std::vector<double>>& seconds,
                             const std::vector<int64_t>& layers_per_stage) {
  if (layers_per_stage.size() != seconds.size())
    throw Error("slowest_stage_seconds: " + std::to_string(layers_per_stage.size()) + " stages in the partition, " +
                std::to_string(seconds.size()) + " rows of costs");
  double slowest = 0;
  size_t i = 0;
  for (size_t j = 0; j < seconds.size(); ++j) {
    if (layers_per_stage[j] < 1) throw Error("slowest_stage_seconds: stage " + std::to_string(j) + " holds no layer");
    double t = 0;
    for (int64_t k = 0; k < layers_per_stage[j]; ++k, ++i) t += seconds[j].at(i);
    slowest = std::max(slowest, t);
  }
  if (i != seconds[0].size()) throw Error("slowest_stage_seconds: the partition does not cover every layer once");
  return slowest;
}

}  // namespace kit::planner
