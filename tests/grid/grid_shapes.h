// The grid shapes the grid tests and their hidden variants (grader/hidden_tests/grid/) walk.
#pragma once
#include <vector>

#include "grid/grid.h"

namespace grid_test {

// Every (d, p, t) with d * p * t = W.
inline std::vector<kit::grid::GridShape> factorisations(int W) {
  std::vector<kit::grid::GridShape> out;
  for (int d = 1; d <= W; ++d)
    for (int p = 1; p <= W; ++p)
      if (W % (d * p) == 0) out.push_back({d, p, W / (d * p)});
  return out;
}

}  // namespace grid_test
