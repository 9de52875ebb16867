// Given code for Problem 6: the shape check, and every group of the grid as a dist subgroup.
#include <algorithm>
#include <functional>
#include <set>

#include "grid/grid.h"
#include "kit/errors.h"

namespace kit::grid {

std::string GridShape::str() const {
  return "d=" + std::to_string(dp) + " p=" + std::to_string(pp) + " t=" + std::to_string(tp);
}

const char* name_of(GroupKind kind) {
  switch (kind) {
    case GroupKind::Data: return "data";
    case GroupKind::Tensor: return "tensor";
    case GroupKind::Pipeline: return "pipeline";
  }
  return "?";
}

void check_shape(const GridShape& shape, int world_size) {
  if (shape.dp < 1 || shape.pp < 1 || shape.tp < 1)
    throw Error("the grid " + shape.str() + " has an axis below 1: --dp, --pp and --tp must each be at least 1");
  if (shape.world() != world_size)
    throw Error("the grid " + shape.str() + " has d*p*t = " + std::to_string(shape.world()) + " ranks, but the world has " +
                std::to_string(world_size) + ": choose --dp, --pp and --tp whose product is " +
                std::to_string(world_size) + " (or run " + std::to_string(shape.world()) + " processes)");
}

namespace {
// The arithmetic a grid is built from: Problem 6.1's functions, or a pipeline's own.
struct Arithmetic {
  std::function<Coordinates(int rank)> coordinates;
  std::function<int(const Coordinates&)> rank;
  std::function<std::vector<int>(GroupKind, int rank)> group;
};

Arithmetic problem_6_1(const GridShape& shape) {
  return {[shape](int r) { return coordinates_of(r, shape); },
          [shape](const Coordinates& c) { return rank_of(c, shape); },
          [shape](GroupKind kind, int r) { return group_ranks(kind, r, shape); }};
}

// Every group of one kind, each once, ordered by its lowest rank: what every rank must
// create, in the same order.
std::vector<std::vector<int>> all_groups(GroupKind kind, const GridShape& shape, const Arithmetic& a) {
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> out;
  for (int r = 0; r < shape.world(); ++r) {
    auto g = a.group(kind, r);
    if (seen.insert(g).second) out.push_back(std::move(g));
  }
  return out;
}

// The grid's arithmetic checked for every rank, on every rank, before any group is created:
// a wrong coordinates_of, rank_of or group_ranks then fails the same way everywhere at once,
// instead of leaving some ranks waiting for peers in a group that will never form.
void check_grid_functions(const GridShape& shape, const Arithmetic& a) {
  const std::string where = " on the grid " + shape.str();
  for (int r = 0; r < shape.world(); ++r) {
    const Coordinates c = a.coordinates(r);
    if (c.dp < 0 || c.dp >= shape.dp || c.pp < 0 || c.pp >= shape.pp || c.tp < 0 || c.tp >= shape.tp)
      throw Error("coordinates_of(" + std::to_string(r) + ") is dp " + std::to_string(c.dp) + " pp " +
                  std::to_string(c.pp) + " tp " + std::to_string(c.tp) + ", outside" + where);
    if (a.rank(c) != r) throw Error("coordinates_of and rank_of disagree on rank " + std::to_string(r) + where);
    for (const GroupKind kind : {GroupKind::Tensor, GroupKind::Data, GroupKind::Pipeline}) {
      const std::vector<int> g = a.group(kind, r);
      bool ok = std::find(g.begin(), g.end(), r) != g.end();
      for (int x : g) ok = ok && x >= 0 && x < shape.world();
      if (!ok)
        throw Error(std::string("group_ranks(") + name_of(kind) + ", " + std::to_string(r) +
                    ") lists a rank outside the world or leaves out rank " + std::to_string(r) + where);
    }
  }
}

ProcessGrid build_grid(const GridShape& shape, const Arithmetic& a) {
  check_shape(shape, dist::get_world_size());
  check_grid_functions(shape, a);
  ProcessGrid grid;
  grid.shape = shape;
  const int me = dist::get_rank();
  grid.coords = a.coordinates(me);
  // Names of this shape's own (another grid in the same process, a test's, names its groups apart).
  const std::string prefix = "d" + std::to_string(shape.dp) + "p" + std::to_string(shape.pp) + "t" +
                             std::to_string(shape.tp) + "/";
  for (const GroupKind kind : {GroupKind::Tensor, GroupKind::Data, GroupKind::Pipeline}) {
    int i = 0;
    for (const auto& ranks : all_groups(kind, shape, a)) {
      const std::string name = prefix + name_of(kind) + std::to_string(i++);
      dist::Group g = dist::new_group(ranks, name);
      if (!g.is_member()) continue;
      (kind == GroupKind::Data ? grid.data : kind == GroupKind::Tensor ? grid.tensor : grid.pipeline) = g;
    }
  }
  // This rank's pipeline's embedding group: a member on the first and last stage, a
  // non-member handle in between.
  const std::vector<int> my_pipeline = a.group(GroupKind::Pipeline, me);
  grid.pipeline_ranks = my_pipeline;
  int i = 0;
  for (const auto& pipe : all_groups(GroupKind::Pipeline, shape, a)) {
    std::vector<int> ends = {pipe.front()};
    if (pipe.size() > 1) ends.push_back(pipe.back());
    dist::Group g = dist::new_group(ends, prefix + "embedding" + std::to_string(i++));
    if (pipe == my_pipeline) grid.embedding = g;
  }
  return grid;
}
}  // namespace

ProcessGrid make_process_grid(const GridShape& shape) { return build_grid(shape, problem_6_1(shape)); }

bool is_single_axis(const GridShape& shape) { return (shape.dp > 1) + (shape.pp > 1) + (shape.tp > 1) <= 1; }

ProcessGrid make_single_axis_grid(const GridShape& shape) {
  if (!is_single_axis(shape))
    throw Error("make_single_axis_grid: the grid " + shape.str() + " has more than one axis above 1: use "
                "make_process_grid");
  // The one axis above 1 (none: the pipeline, of one rank) holds every rank, the others each rank alone.
  const GroupKind axis = shape.dp > 1 ? GroupKind::Data : shape.tp > 1 ? GroupKind::Tensor : GroupKind::Pipeline;
  std::vector<int> all(static_cast<size_t>(std::max(shape.world(), 0)));
  for (int r = 0; r < shape.world(); ++r) all[static_cast<size_t>(r)] = r;
  const auto at = [axis](int r) {
    return axis == GroupKind::Data ? Coordinates{r, 0, 0} : axis == GroupKind::Tensor ? Coordinates{0, 0, r}
                                                                                       : Coordinates{0, r, 0};
  };
  return build_grid(shape, {at, [](const Coordinates& c) { return c.dp + c.pp + c.tp; },
                            [axis, all](GroupKind kind, int r) { return kind == axis ? all : std::vector<int>{r}; }});
}

}  // namespace kit::grid
