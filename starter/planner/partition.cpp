// Problem 8.2: the layer partition that minimises the slowest stage (see planner/partition.h).
#include <algorithm>
#include <limits>
#include <vector>

#include "kit/errors.h"
#include "planner/partition.h"

namespace kit::planner {

// best[j][e]: the smallest slowest-stage time of stages 0..j holding layers [0, e).
//   best[0][e] = cost(0; 0, e)
//   best[j][e] = min over k (j <= k < e) of max(best[j - 1][k], cost(j; k, e))
// where cost(j; k, e) is the sum of seconds[j][k..e). Keep the k that won each entry, then
// walk back from (p - 1, L) to read the cuts. O(p L^2) with prefix sums.
std::vector<int64_t> partition_layers(const std::vector<std::vector<double>>& seconds) {
  const int64_t p = static_cast<int64_t>(seconds.size());
  if (p < 1) throw Error("partition_layers needs at least one stage");
  const int64_t L = static_cast<int64_t>(seconds[0].size());
  for (const auto& row : seconds)
    if (static_cast<int64_t>(row.size()) != L)
      throw Error("partition_layers: every stage's row must have one entry per layer");
  if (L < p)
    throw Error("partition_layers: " + std::to_string(L) + " layers cannot fill " + std::to_string(p) +
                " stages of at least one layer each; use fewer pipeline stages");
  // TODO(Problem 8.2 partition_layers): your code here.
  throw kit::NotImplemented("Problem 8.2 partition_layers");
}

}  // namespace kit::planner
