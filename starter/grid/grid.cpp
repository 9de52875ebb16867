// Problem 6.1: ranks and coordinates on the 3D grid, and the groups each rank belongs to
// (see grid.h for the order: tensor, then data, then pipeline).
#include "grid/grid.h"

#include "kit/errors.h"

namespace kit::grid {

Coordinates coordinates_of(int rank, const GridShape& shape) {
  // TODO(Problem 6.1 coordinates_of): your code here.
  throw kit::NotImplemented("Problem 6.1 coordinates_of");
}

int rank_of(const Coordinates& c, const GridShape& shape) {
  // TODO(Problem 6.1 rank_of): your code here.
  throw kit::NotImplemented("Problem 6.1 rank_of");
}

std::vector<int> group_ranks(GroupKind kind, int rank, const GridShape& shape) {
  // TODO(Problem 6.1 group_ranks): your code here.
  throw kit::NotImplemented("Problem 6.1 group_ranks");
}

}  // namespace kit::grid
