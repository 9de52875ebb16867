// Problem 6.1: the 3D grid's coordinates and groups for every factorisation d * p * t of 8
// and of 12, Megatron-LM's own example pinned exactly, and the groups as dist subgroups on 8
// Gloo processes.
// The subject parts call the student's coordinates_of, rank_of and group_ranks (and the given
// make_process_grid, which calls them) and record their answers as tables; every check is the
// judge's, on those tables (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "grid/grid.h"
#include "grid_shapes.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "rank_roles.h"

namespace kit::judge {
// Coordinates as [dp, pp, tp].
template <>
struct Codec<kit::grid::Coordinates> {
  static Value put(const kit::grid::Coordinates& c) { return Codec<std::vector<int>>::put({c.dp, c.pp, c.tp}); }
  static bool get(const Value& v, kit::grid::Coordinates* out) {
    std::vector<int> x;
    if (!Codec<std::vector<int>>::get(v, &x) || x.size() != 3) return false;
    *out = {x[0], x[1], x[2]};
    return true;
  }
};
}  // namespace kit::judge

namespace {
namespace grid = kit::grid;
namespace judge = kit::judge;
using grid::GroupKind;
using grid::GridShape;

using grid_test::factorisations;

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

// What the student's functions say about one grid shape, for every rank: its coordinates,
// rank_of of those, and its group of each kind (kKinds' order).
struct GridTables {
  std::vector<grid::Coordinates> coords;
  std::vector<int> back;                         // rank_of(coordinates_of(r))
  std::vector<std::vector<std::vector<int>>> groups;  // [kind][rank]
  const std::vector<int>& group(GroupKind kind, int r) const {
    return groups[static_cast<size_t>(kind == GroupKind::Data ? 0 : kind == GroupKind::Tensor ? 1 : 2)]
                 [static_cast<size_t>(r)];
  }
};

// The subject part: the tables of every shape, recorded under the shape's name.
judge::Record record_grids(const std::vector<GridShape>& shapes) {
  return judge::subject([&](judge::Record& out) {
    for (const auto& s : shapes) {
      std::vector<grid::Coordinates> coords;
      std::vector<int> back;
      std::vector<std::vector<std::vector<int>>> groups(kKinds.size());
      for (int r = 0; r < s.world(); ++r) {
        coords.push_back(grid::coordinates_of(r, s));
        back.push_back(grid::rank_of(coords.back(), s));
        for (size_t k = 0; k < kKinds.size(); ++k) groups[k].push_back(grid::group_ranks(kKinds[k], r, s));
      }
      out.put(s.str() + " coords", coords);
      out.put(s.str() + " back", back);
      out.put(s.str() + " groups", groups);
    }
  });
}

// The judge's view of shape s's tables (every table sized to the world, whatever was recorded).
GridTables read_grid(const judge::Record& got, const GridShape& s) {
  GridTables t;
  t.coords = got.get<std::vector<grid::Coordinates>>(s.str() + " coords");
  t.back = got.get<std::vector<int>>(s.str() + " back");
  t.groups = got.get<std::vector<std::vector<std::vector<int>>>>(s.str() + " groups");
  if (got.ok() && (t.coords.size() != static_cast<size_t>(s.world()) || t.back.size() != t.coords.size() ||
                   t.groups.size() != kKinds.size()))
    ADD_FAILURE() << "the tables recorded for " << s.str() << " do not have one entry per rank";
  t.coords.resize(static_cast<size_t>(s.world()), grid::Coordinates{-1, -1, -1});
  t.back.resize(static_cast<size_t>(s.world()), -1);
  t.groups.resize(kKinds.size());
  for (auto& g : t.groups) g.resize(static_cast<size_t>(s.world()));
  return t;
}

}  // namespace

TEST(Grid, CoordinatesAndRanksAreInverseInMegatronsOrder) {
  const judge::Record got = record_grids(shapes_of_8_and_12());
  if (!judge::judging()) return;
  for (const auto& s : shapes_of_8_and_12()) {
    const GridTables t = read_grid(got, s);
    std::set<int> ranks;
    for (int r = 0; r < s.world(); ++r) {
      const grid::Coordinates c = t.coords[static_cast<size_t>(r)];
      ASSERT_TRUE(c.dp >= 0 && c.dp < s.dp && c.pp >= 0 && c.pp < s.pp && c.tp >= 0 && c.tp < s.tp)
          << "rank " << r << " of " << s.str() << " gets coordinates dp " << c.dp << " pp " << c.pp << " tp " << c.tp;
      EXPECT_EQ(t.back[static_cast<size_t>(r)], r) << "rank_of(coordinates_of(" << r << ")) on " << s.str();
      // tensor fastest, then data, then pipeline
      EXPECT_EQ(r, c.pp * s.dp * s.tp + c.dp * s.tp + c.tp) << "rank " << r << " on " << s.str();
      ranks.insert(r);
    }
    EXPECT_EQ(static_cast<int>(ranks.size()), s.world());
  }
}

TEST(Grid, GroupsOfEachKindPartitionTheWorld) {
  const judge::Record got = record_grids(shapes_of_8_and_12());
  if (!judge::judging()) return;
  for (const auto& s : shapes_of_8_and_12()) {
    const GridTables t = read_grid(got, s);
    for (const GroupKind kind : kKinds) {
      std::map<int, int> times_seen;
      std::set<std::vector<int>> groups;
      for (int r = 0; r < s.world(); ++r) {
        const auto& g = t.group(kind, r);
        ASSERT_EQ(static_cast<int>(g.size()), axis_size(kind, s))
            << grid::name_of(kind) << " group of rank " << r << " on " << s.str() << ": " << str(g);
        // Member i of the group has coordinate i on this axis and this rank's other two.
        const grid::Coordinates me = t.coords[static_cast<size_t>(r)];
        for (int i = 0; i < static_cast<int>(g.size()); ++i) {
          ASSERT_TRUE(g[i] >= 0 && g[i] < s.world()) << str(g);
          const grid::Coordinates c = t.coords[static_cast<size_t>(g[i])];
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
}

TEST(Grid, TensorGroupsAreConsecutiveAndPipelinesStridedByWOverP) {
  const judge::Record got = record_grids(shapes_of_8_and_12());
  if (!judge::judging()) return;
  for (const auto& s : shapes_of_8_and_12()) {
    const GridTables tables = read_grid(got, s);
    for (int r = 0; r < s.world(); ++r) {
      const auto& t = tables.group(GroupKind::Tensor, r);
      ASSERT_TRUE(in_world(t, s)) << "tensor group " << str(t) << " of rank " << r << " on " << s.str();
      for (size_t i = 1; i < t.size(); ++i) EXPECT_EQ(t[i], t[i - 1] + 1) << "tensor group " << str(t) << " on " << s.str();
      const auto& d = tables.group(GroupKind::Data, r);
      for (size_t i = 1; i < d.size(); ++i) EXPECT_EQ(d[i], d[i - 1] + s.tp) << "data group " << str(d) << " on " << s.str();
      const auto& p = tables.group(GroupKind::Pipeline, r);
      for (size_t i = 1; i < p.size(); ++i)
        EXPECT_EQ(p[i], p[i - 1] + s.world() / s.pp) << "pipeline group " << str(p) << " on " << s.str();
    }
  }
}

TEST(Grid, TensorGroupNeverSpansTwoNodes) {
  const judge::Record got = record_grids(shapes_of_8_and_12());
  if (!judge::judging()) return;
  for (const auto& s : shapes_of_8_and_12()) {
    const GridTables tables = read_grid(got, s);
    for (const int gpus_per_node : {1, 2, 3, 4, 6, 8, 12})
      if (gpus_per_node % s.tp == 0)
        for (int r = 0; r < s.world(); ++r) {
          const auto& t = tables.group(GroupKind::Tensor, r);
          ASSERT_TRUE(in_world(t, s)) << "tensor group " << str(t) << " of rank " << r << " on " << s.str();
          std::set<int> nodes;
          for (int x : t) nodes.insert(grid::node_of(x, gpus_per_node));
          EXPECT_EQ(nodes.size(), 1u) << "tensor group " << str(t) << " on " << s.str() << " spans "
                                      << nodes.size() << " nodes of " << gpus_per_node << " ranks";
        }
  }
}

TEST(Grid, MegatronsSixteenRankExample) {
  // Megatron-LM's initialize_model_parallel docstring: 16 ranks, t = 2, p = 4 (so d = 2).
  const GridShape s{2, 4, 2};
  const judge::Record got = record_grids({s});
  if (!judge::judging()) return;
  const GridTables t = read_grid(got, s);
  const std::vector<std::vector<int>> tensor = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
  const std::vector<std::vector<int>> data = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
  const std::vector<std::vector<int>> pipeline = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  for (const auto& [kind, want] : std::vector<std::pair<GroupKind, std::vector<std::vector<int>>>>{
           {GroupKind::Tensor, tensor}, {GroupKind::Data, data}, {GroupKind::Pipeline, pipeline}})
    for (const auto& g : want)
      for (int r : g) EXPECT_EQ(t.group(kind, r), g) << grid::name_of(kind) << " group of rank " << r;
}

TEST(Grid, ShapeThatDoesNotMatchTheWorldIsAClearError) {
  // Given code.
  kit_test::expect_error_naming([] { grid::check_shape({2, 2, 2}, 12); }, {"d=2 p=2 t=2", "8", "12"},
                                 "a grid of 8 on 12 ranks");
  kit_test::expect_error_naming([] { grid::check_shape({0, 2, 2}, 0); }, {"at least 1"}, "an axis of 0");
  EXPECT_NO_THROW(grid::check_shape({3, 2, 2}, 12));
}

// On 8 processes, d = p = t = 2: every group is a dist subgroup of the right members, with
// group ranks equal to the coordinate on its axis; a SUM over each one adds its members.
// Each rank records what make_process_grid gave it, what the student's functions say of it,
// and the sums; the judge compares them.
RANK_SUBJECT(grid_groups) {
  const GridShape s{2, 2, 2};
  const grid::ProcessGrid g = grid::make_process_grid(s);
  const int me = kit::dist::get_rank();
  out.put("rank", me);
  out.put("coords", g.coords);
  out.put("coordinates_of", grid::coordinates_of(me, s));
  const std::vector<std::pair<GroupKind, const kit::dist::Group*>> groups = {
      {GroupKind::Data, &g.data}, {GroupKind::Tensor, &g.tensor}, {GroupKind::Pipeline, &g.pipeline}};
  for (const auto& [kind, group] : groups) {
    const std::string name = grid::name_of(kind);
    out.put(name + " member", group->is_member());
    if (!group->is_member()) continue;
    out.put(name + " ranks", group->ranks());
    out.put(name + " group_ranks", grid::group_ranks(kind, me, s));
    out.put(name + " rank", group->rank());
    torch::Tensor x = torch::tensor({static_cast<double>(me)}, torch::kFloat64);
    kit::dist::all_reduce(x, kit::dist::ReduceOp::SUM, *group);
    out.put(name + " sum", x.item<double>());
  }
  out.put("pipeline group_ranks", grid::group_ranks(GroupKind::Pipeline, me, s));
  out.put("first or last stage", g.is_first_stage() || g.is_last_stage());
  out.put("embedding member", g.embedding.is_member());
  if (g.embedding.is_member()) out.put("embedding ranks", g.embedding.ranks());
}

TEST(Grid, ProcessGridGroupsCommunicateAlongTheirAxis) {
  const int n = 8;
  const auto run = kit_test::subject_ranks(n, "grid_groups", 90);
  if (!judge::judging()) return;
  if (!kit_test::expect_ranks_ok(run, n, "the process grid d=2 p=2 t=2")) return;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of the process grid d=2 p=2 t=2");
    const judge::Record& got = run.records[static_cast<size_t>(r)];
    EXPECT_EQ(got.get<int>("rank"), r);
    const auto coords = got.get<grid::Coordinates>("coords");
    EXPECT_EQ(coords, got.get<grid::Coordinates>("coordinates_of"));
    for (const GroupKind kind : kKinds) {
      const std::string name = grid::name_of(kind);
      ASSERT_TRUE(got.get<bool>(name + " member")) << name;
      const auto ranks = got.get<std::vector<int>>(name + " ranks");
      EXPECT_EQ(ranks, got.get<std::vector<int>>(name + " group_ranks")) << name;
      EXPECT_EQ(got.get<int>(name + " rank"), axis_coord(kind, coords)) << name;
      double want = 0;
      for (int x : ranks) want += x;
      EXPECT_EQ(got.get<double>(name + " sum"), want) << name << " group " << str(ranks);
    }
    const auto pipe = got.get<std::vector<int>>("pipeline group_ranks");
    if (got.get<bool>("first or last stage")) {
      ASSERT_TRUE(got.get<bool>("embedding member"));
      ASSERT_FALSE(pipe.empty());
      EXPECT_EQ(got.get<std::vector<int>>("embedding ranks"), (std::vector<int>{pipe.front(), pipe.back()}));
    } else {
      EXPECT_FALSE(got.get<bool>("embedding member"));
    }
  }
}

// make_single_axis_grid (given code, no rubric item): a grid with one axis above 1, as
// train_parallel builds it for one parallelism alone (Problems 3 and 4 in an Assignment 2
// bundle), without Problem 6.1's functions. On 4 processes, for each axis in turn: that axis's
// group is the world in rank order with the rank as its coordinate, the other groups are the
// rank alone, pipeline_ranks is the pipeline's members, and the embedding group holds the
// pipeline's first and last rank. Each rank records what it got; the judge checks it.
RANK_SUBJECT(single_axis_groups) {
  const int me = kit::dist::get_rank();
  for (const GridShape s : {GridShape{4, 1, 1}, GridShape{1, 4, 1}, GridShape{1, 1, 4}, GridShape{1, 1, 1}}) {
    if (s.world() != kit::dist::get_world_size() && s.world() != 1) continue;
    if (s.world() == 1) {  // more than one rank: a 1 x 1 x 1 grid does not fit, a kit::Error
      try {
        grid::make_single_axis_grid(s);
        out.put(s.str() + " refused", false);
      } catch (const kit::Error&) {
        out.put(s.str() + " refused", true);
      }
      continue;
    }
    const grid::ProcessGrid g = grid::make_single_axis_grid(s);
    out.put(s.str() + " coords", g.coords);
    out.put(s.str() + " pipeline_ranks", g.pipeline_ranks);
    const std::vector<std::pair<GroupKind, const kit::dist::Group*>> groups = {
        {GroupKind::Data, &g.data}, {GroupKind::Tensor, &g.tensor}, {GroupKind::Pipeline, &g.pipeline}};
    for (const auto& [kind, group] : groups) {
      const std::string name = s.str() + " " + grid::name_of(kind);
      out.put(name + " ranks", group->is_member() ? group->ranks() : std::vector<int>{});
      torch::Tensor x = torch::tensor({static_cast<double>(me)}, torch::kFloat64);
      if (group->is_member()) kit::dist::all_reduce(x, kit::dist::ReduceOp::SUM, *group);
      out.put(name + " sum", x.item<double>());
    }
    out.put(s.str() + " embedding ranks", g.embedding.is_member() ? g.embedding.ranks() : std::vector<int>{});
  }
  bool refused = false;
  try {
    grid::make_single_axis_grid({2, 2, 1});
  } catch (const kit::Error&) {
    refused = true;
  }
  out.put("two axes refused", refused);
}

TEST(GridSingleAxis, OneAxisHoldsTheWorldAndTheOthersEachRank) {
  const int n = 4;
  const auto run = kit_test::subject_ranks(n, "single_axis_groups", 90);
  if (!judge::judging()) return;
  if (!kit_test::expect_ranks_ok(run, n, "make_single_axis_grid on 4 ranks")) return;
  const std::vector<int> world = {0, 1, 2, 3};
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const judge::Record& got = run.records[static_cast<size_t>(r)];
    for (const GroupKind axis : kKinds) {
      const GridShape s = axis == GroupKind::Data ? GridShape{4, 1, 1}
                          : axis == GroupKind::Pipeline ? GridShape{1, 4, 1} : GridShape{1, 1, 4};
      SCOPED_TRACE(s.str());
      const auto c = got.get<grid::Coordinates>(s.str() + " coords");
      EXPECT_EQ(axis_coord(axis, c), r);
      EXPECT_EQ(c.dp + c.pp + c.tp, r) << "the other coordinates are 0";
      for (const GroupKind kind : kKinds) {
        const std::string name = s.str() + " " + grid::name_of(kind);
        const std::vector<int> want = kind == axis ? world : std::vector<int>{r};
        EXPECT_EQ(got.get<std::vector<int>>(name + " ranks"), want) << grid::name_of(kind);
        EXPECT_EQ(got.get<double>(name + " sum"), kind == axis ? 6.0 : static_cast<double>(r)) << grid::name_of(kind);
      }
      const std::vector<int> pipeline = axis == GroupKind::Pipeline ? world : std::vector<int>{r};
      EXPECT_EQ(got.get<std::vector<int>>(s.str() + " pipeline_ranks"), pipeline);
      // The pipeline's first and last stage (the middle ranks are not members).
      const std::vector<int> ends = r == 0 || r == 3 ? std::vector<int>{0, 3} : std::vector<int>{};
      EXPECT_EQ(got.get<std::vector<int>>(s.str() + " embedding ranks"),
                axis == GroupKind::Pipeline ? ends : std::vector<int>{r});
    }
    EXPECT_TRUE(got.get<bool>(GridShape{1, 1, 1}.str() + " refused")) << "a 1 x 1 x 1 grid on 4 ranks";
    EXPECT_TRUE(got.get<bool>("two axes refused")) << "make_single_axis_grid({2, 2, 1})";
  }
}
