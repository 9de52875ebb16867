// Problem 6.1: the 3D process grid (Megatron-LM's PTD-P). W = d * p * t ranks: d-way data
// parallelism of p pipeline stages, each stage split t ways by tensor parallelism.
//
// Megatron numbers the ranks tensor first, then data, then pipeline:
//
//   rank = pp * (d * t) + dp * t + tp          (0 <= tp < t, 0 <= dp < d, 0 <= pp < p)
//
// so a tensor-parallel group is t consecutive ranks (on a cluster: inside one node, where the
// links are fastest, because tensor parallelism all-reduces twice per block each way); a
// data-parallel group is d ranks t apart; a pipeline group is p ranks W/p apart (pipeline
// parallelism sends one activation per micro-batch and can cross nodes). Example, W = 8,
// d = p = t = 2: tensor groups {0,1} {2,3} {4,5} {6,7}; data groups {0,2} {1,3} {4,6} {5,7};
// pipeline groups {0,4} {1,5} {2,6} {3,7}.
//
//   GridShape s{.dp = 2, .pp = 2, .tp = 2};
//   check_shape(s, world_size);                 // kit::Error when d * p * t != W
//   Coordinates c = coordinates_of(rank, s);    // Problem 6.1
//   auto tp_ranks = group_ranks(GroupKind::Tensor, rank, s);   // Problem 6.1
//   ProcessGrid grid = make_process_grid(s);    // given: every group as a dist subgroup
//   ProcessGrid line = make_single_axis_grid({.pp = 4});   // given: one axis, without 6.1
#pragma once
#include <string>
#include <vector>

#include "dist/dist.h"

namespace kit::grid {

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  int world() const { return dp * pp * tp; }
  std::string str() const;  // "d=2 p=2 t=2"
};

// A rank's position on each axis.
struct Coordinates {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const Coordinates& o) const { return dp == o.dp && pp == o.pp && tp == o.tp; }
};

enum class GroupKind { Data, Tensor, Pipeline };
const char* name_of(GroupKind kind);  // "data", "tensor", "pipeline"

// Given: kit::Error naming the sizes and the fix when an axis is below 1 or d * p * t != W.
void check_shape(const GridShape& shape, int world_size);

// Problem 6.1 (solution/grid/grid.cpp). For 0 <= rank < shape.world():
Coordinates coordinates_of(int rank, const GridShape& shape);  // the inverse of rank_of
int rank_of(const Coordinates& c, const GridShape& shape);      // Megatron's order, above
// The world ranks of `rank`'s group of this kind, in the group's own rank order: the
// member with tp (data: dp; pipeline: pp) coordinate i is element i. So pipeline stage s of
// this rank's pipeline is group_ranks(Pipeline, rank, shape)[s].
std::vector<int> group_ranks(GroupKind kind, int rank, const GridShape& shape);

// Given: the groups of the calling process, each a dist subgroup, and its coordinates.
// Every rank creates every group of every kind, in the same order (tensor groups, then data,
// then pipeline, then embedding groups, each kind by its lowest rank), as dist::new_group
// requires. `embedding`: the first and the last pipeline stage of this rank's pipeline (one
// rank when p = 1), where GPT-2's tied wte / lm_head gradient is summed.
struct ProcessGrid {
  GridShape shape;
  Coordinates coords;
  dist::Group data, tensor, pipeline, embedding;
  std::vector<int> pipeline_ranks;  // the world ranks of this rank's pipeline, stage 0 first
  bool is_first_stage() const { return coords.pp == 0; }
  bool is_last_stage() const { return coords.pp == shape.pp - 1; }
};
ProcessGrid make_process_grid(const GridShape& shape);
// Given: a grid with at most one axis above 1 (a pipeline alone, Problem 3; tensor parallelism
// alone, Problem 4; data parallelism alone), built without Problem 6.1's functions: that axis's
// group holds every rank in rank order, the other groups each rank alone. So one parallelism
// runs on the grid's trainer in a bundle that has none of Problem 6 yet. kit::Error for a grid
// with two axes above 1 (make_process_grid's).
bool is_single_axis(const GridShape& shape);
ProcessGrid make_single_axis_grid(const GridShape& shape);

// Given: the node that holds `rank` when a node has gpus_per_node ranks (ranks fill nodes in
// order, as srun's block distribution does).
inline int node_of(int rank, int gpus_per_node) { return rank / gpus_per_node; }

}  // namespace kit::grid
