// Problem 6.1: the 3D grid's coordinates and groups for every factorisation d * p * t of 8
// and of 12, Megatron-LM's own example pinned exactly, and the groups as dist subgroups on 8
// Gloo processes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "grid/grid.h"
#include "rank_roles.h"

namespace {
namespace grid = kit::grid;
using grid::GroupKind;
using grid::GridShape;

// Every (d, p, t) with d * p * t = W.
std::vector<GridShape> factorisations(int W) {
  std::vector<GridShape> out;
  for (int d = 1; d <= W; ++d)
    for (int p = 1; p <= W; ++p)
      if (W % (d * p) == 0) out.push_back({d, p, W / (d * p)});
  return out;
}

std::vector<GridShape> shapes_of_8_and_12() {
  auto s = factorisations(8);
  for (const auto& x : factorisations(12)) s.push_back(x);
  return s;
}

int axis_size(GroupKind kind, const GridShape& s) {
  return kind == GroupKind::Data ? s.dp : kind == GroupKind::Tensor ? s.tp : s.pp;
}
int axis_coord(GroupKind kind, const grid::Coordinates& c) {
  return kind == GroupKind::Data ? c.dp : kind == GroupKind::Tensor ? c.tp : c.pp;
}
const std::vector<GroupKind> kKinds = {GroupKind::Data, GroupKind::Tensor, GroupKind::Pipeline};

// Every member is a rank of the world.
bool in_world(const std::vector<int>& g, const GridShape& s) {
  for (int x : g)
    if (x < 0 || x >= s.world()) return false;
  return true;
}

std::string str(const std::vector<int>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "}";
}

}  // namespace

TEST(Grid, CoordinatesAndRanksAreInverseInMegatronsOrder) {
  for (const auto& s : shapes_of_8_and_12()) {
    std::set<int> ranks;
    for (int r = 0; r < s.world(); ++r) {
      const grid::Coordinates c = grid::coordinates_of(r, s);
      ASSERT_TRUE(c.dp >= 0 && c.dp < s.dp && c.pp >= 0 && c.pp < s.pp && c.tp >= 0 && c.tp < s.tp)
          << "rank " << r << " of " << s.str() << " gets coordinates dp " << c.dp << " pp " << c.pp << " tp " << c.tp;
      EXPECT_EQ(grid::rank_of(c, s), r) << "rank_of(coordinates_of(" << r << ")) on " << s.str();
      // tensor fastest, then data, then pipeline
      EXPECT_EQ(r, c.pp * s.dp * s.tp + c.dp * s.tp + c.tp) << "rank " << r << " on " << s.str();
      ranks.insert(r);
    }
    EXPECT_EQ(static_cast<int>(ranks.size()), s.world());
  }
}

TEST(Grid, GroupsOfEachKindPartitionTheWorld) {
  for (const auto& s : shapes_of_8_and_12())
    for (const GroupKind kind : kKinds) {
      std::map<int, int> times_seen;
      std::set<std::vector<int>> groups;
      for (int r = 0; r < s.world(); ++r) {
        const auto g = grid::group_ranks(kind, r, s);
        ASSERT_EQ(static_cast<int>(g.size()), axis_size(kind, s))
            << grid::name_of(kind) << " group of rank " << r << " on " << s.str() << ": " << str(g);
        // Member i of the group has coordinate i on this axis and this rank's other two.
        const grid::Coordinates me = grid::coordinates_of(r, s);
        for (int i = 0; i < static_cast<int>(g.size()); ++i) {
          ASSERT_TRUE(g[i] >= 0 && g[i] < s.world()) << str(g);
          const grid::Coordinates c = grid::coordinates_of(g[i], s);
          EXPECT_EQ(axis_coord(kind, c), i) << grid::name_of(kind) << " group " << str(g) << " on " << s.str()
                                            << ": member " << i << " must have that coordinate";
          for (const GroupKind other : kKinds)
            if (other != kind)
              EXPECT_EQ(axis_coord(other, c), axis_coord(other, me))
                  << grid::name_of(kind) << " group " << str(g) << " of rank " << r << " on " << s.str()
                  << " mixes " << grid::name_of(other) << " coordinates";
        }
        if (groups.insert(g).second)
          for (int x : g) ++times_seen[x];
      }
      for (int r = 0; r < s.world(); ++r)
        EXPECT_EQ(times_seen[r], 1) << "rank " << r << " is in " << times_seen[r] << " " << grid::name_of(kind)
                                    << " groups on " << s.str() << ", not 1";
      EXPECT_EQ(static_cast<int>(groups.size()), s.world() / axis_size(kind, s)) << grid::name_of(kind) << " " << s.str();
    }
}

TEST(Grid, TensorGroupsAreConsecutiveAndPipelinesStridedByWOverP) {
  for (const auto& s : shapes_of_8_and_12())
    for (int r = 0; r < s.world(); ++r) {
      const auto t = grid::group_ranks(GroupKind::Tensor, r, s);
      ASSERT_TRUE(in_world(t, s)) << "tensor group " << str(t) << " of rank " << r << " on " << s.str();
      for (size_t i = 1; i < t.size(); ++i) EXPECT_EQ(t[i], t[i - 1] + 1) << "tensor group " << str(t) << " on " << s.str();
      const auto d = grid::group_ranks(GroupKind::Data, r, s);
      for (size_t i = 1; i < d.size(); ++i) EXPECT_EQ(d[i], d[i - 1] + s.tp) << "data group " << str(d) << " on " << s.str();
      const auto p = grid::group_ranks(GroupKind::Pipeline, r, s);
      for (size_t i = 1; i < p.size(); ++i)
        EXPECT_EQ(p[i], p[i - 1] + s.world() / s.pp) << "pipeline group " << str(p) << " on " << s.str();
    }
}

TEST(Grid, TensorGroupNeverSpansTwoNodes) {
  for (const auto& s : shapes_of_8_and_12())
    for (const int gpus_per_node : {1, 2, 3, 4, 6, 8, 12})
      if (gpus_per_node % s.tp == 0)
        for (int r = 0; r < s.world(); ++r) {
          const auto t = grid::group_ranks(GroupKind::Tensor, r, s);
          ASSERT_TRUE(in_world(t, s)) << "tensor group " << str(t) << " of rank " << r << " on " << s.str();
          std::set<int> nodes;
          for (int x : t) nodes.insert(grid::node_of(x, gpus_per_node));
          EXPECT_EQ(nodes.size(), 1u) << "tensor group " << str(t) << " on " << s.str() << " spans "
                                      << nodes.size() << " nodes of " << gpus_per_node << " ranks";
        }
}

TEST(Grid, MegatronsSixteenRankExample) {
  // Megatron-LM's initialize_model_parallel docstring: 16 ranks, t = 2, p = 4 (so d = 2).
  const GridShape s{2, 4, 2};
  const std::vector<std::vector<int>> tensor = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
  const std::vector<std::vector<int>> data = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
  const std::vector<std::vector<int>> pipeline = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  for (const auto& [kind, want] : std::vector<std::pair<GroupKind, std::vector<std::vector<int>>>>{
           {GroupKind::Tensor, tensor}, {GroupKind::Data, data}, {GroupKind::Pipeline, pipeline}})
    for (const auto& g : want)
      for (int r : g) EXPECT_EQ(grid::group_ranks(kind, r, s), g) << grid::name_of(kind) << " group of rank " << r;
}

TEST(Grid, ShapeThatDoesNotMatchTheWorldIsAClearError) {
  // Given code.
  rank_test::expect_error_naming([] { grid::check_shape({2, 2, 2}, 12); }, {"d=2 p=2 t=2", "8", "12"},
                                 "a grid of 8 on 12 ranks");
  rank_test::expect_error_naming([] { grid::check_shape({0, 2, 2}, 0); }, {"at least 1"}, "an axis of 0");
  EXPECT_NO_THROW(grid::check_shape({3, 2, 2}, 12));
}

// On 8 processes, d = p = t = 2: every group is a dist subgroup of the right members, with
// group ranks equal to the coordinate on its axis; a SUM over each one adds its members.
RANK_ROLE(grid_groups) {
  const GridShape s{2, 2, 2};
  const grid::ProcessGrid g = grid::make_process_grid(s);
  const int me = kit::dist::get_rank();
  EXPECT_EQ(g.coords, grid::coordinates_of(me, s));
  const std::vector<std::pair<GroupKind, const kit::dist::Group*>> groups = {
      {GroupKind::Data, &g.data}, {GroupKind::Tensor, &g.tensor}, {GroupKind::Pipeline, &g.pipeline}};
  for (const auto& [kind, group] : groups) {
    ASSERT_TRUE(group->is_member()) << grid::name_of(kind);
    EXPECT_EQ(group->ranks(), grid::group_ranks(kind, me, s)) << grid::name_of(kind);
    EXPECT_EQ(group->rank(), axis_coord(kind, g.coords)) << grid::name_of(kind);
    torch::Tensor x = torch::tensor({static_cast<double>(me)}, torch::kFloat64);
    kit::dist::all_reduce(x, kit::dist::ReduceOp::SUM, *group);
    double want = 0;
    for (int r : group->ranks()) want += r;
    EXPECT_EQ(x.item<double>(), want) << grid::name_of(kind) << " group " << str(group->ranks());
  }
  const auto pipe = grid::group_ranks(GroupKind::Pipeline, me, s);
  if (g.is_first_stage() || g.is_last_stage()) {
    ASSERT_TRUE(g.embedding.is_member());
    EXPECT_EQ(g.embedding.ranks(), (std::vector<int>{pipe.front(), pipe.back()}));
  } else {
    EXPECT_FALSE(g.embedding.is_member());
  }
}

TEST(Grid, ProcessGridGroupsCommunicateAlongTheirAxis) {
  const auto run = rank_test::run_ranks(8, "grid_groups", 90);
  rank_test::expect_all_ranks_pass(run, 8, "the process grid d=2 p=2 t=2");
}
