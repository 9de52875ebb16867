// Problem 6.1: ranks and coordinates on the 3D grid, and the groups each rank belongs to
// (see grid.h for the order: tensor, then data, then pipeline).
#include "grid/grid.h"

#include "kit/errors.h"

namespace kit::grid {

Coordinates coordinates_of(int rank, const GridShape& shape) {
  // BEGIN SOLUTION 6.1 coordinates_of
  Coordinates c;
  c.tp = rank % shape.tp;
  c.dp = (rank / shape.tp) % shape.dp;
  c.pp = rank / (shape.tp * shape.dp);
  return c;
  // END SOLUTION
}

int rank_of(const Coordinates& c, const GridShape& shape) {
  // BEGIN SOLUTION 6.1 rank_of
  return c.pp * (shape.dp * shape.tp) + c.dp * shape.tp + c.tp;
  // END SOLUTION
}

std::vector<int> group_ranks(GroupKind kind, int rank, const GridShape& shape) {
  // BEGIN SOLUTION 6.1 group_ranks
  // Walk the one axis of this kind, the other two coordinates fixed at this rank's.
  const Coordinates me = coordinates_of(rank, shape);
  const int n = kind == GroupKind::Data ? shape.dp : kind == GroupKind::Tensor ? shape.tp : shape.pp;
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    Coordinates c = me;
    (kind == GroupKind::Data ? c.dp : kind == GroupKind::Tensor ? c.tp : c.pp) = i;
    out.push_back(rank_of(c, shape));
  }
  return out;
  // END SOLUTION
}

}  // namespace kit::grid
