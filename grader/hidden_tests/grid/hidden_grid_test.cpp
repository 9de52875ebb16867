// Graded variants of tests/grid/test_grid.cpp on worlds the public cases do not use: every
// factorisation d * p * t of 18 and of 30 (the public ones: 8, 12 and Megatron's 16), so
// coordinates or groups tuned to the public shapes lose these points. The subject records the
// student's coordinates_of, rank_of and group_ranks for every rank; the judge compares them
// with Megatron's order written out here (tensor fastest, then data, then pipeline).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grid/grid.h"
#include "grid/grid_shapes.h"
#include "judge/judge.h"

namespace {
namespace grid = kit::grid;
namespace judge = kit::judge;
using grid::GridShape;
using grid::GroupKind;

using grid_test::factorisations;

const std::vector<GroupKind> kKinds = {GroupKind::Data, GroupKind::Tensor, GroupKind::Pipeline};

// Megatron's order: rank = pp * (d * t) + dp * t + tp.
std::vector<int> coordinates(int r, const GridShape& s) { return {(r / s.tp) % s.dp, r / (s.tp * s.dp), r % s.tp}; }
int rank_at(int dp, int pp, int tp, const GridShape& s) { return pp * s.dp * s.tp + dp * s.tp + tp; }
std::vector<int> group(GroupKind kind, int r, const GridShape& s) {
  const std::vector<int> c = coordinates(r, s);  // {dp, pp, tp}
  std::vector<int> out;
  const int n = kind == GroupKind::Data ? s.dp : kind == GroupKind::Tensor ? s.tp : s.pp;
  for (int i = 0; i < n; ++i)
    out.push_back(kind == GroupKind::Data     ? rank_at(i, c[1], c[2], s)
                  : kind == GroupKind::Tensor ? rank_at(c[0], c[1], i, s)
                                              : rank_at(c[0], i, c[2], s));
  return out;
}

void expect_megatron_order(int W) {
  const std::vector<GridShape> shapes = factorisations(W);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const auto& s : shapes)
      for (int r = 0; r < s.world(); ++r) {
        const std::string at = s.str() + " rank " + std::to_string(r);
        const grid::Coordinates c = grid::coordinates_of(r, s);
        out.put(at + " coordinates", std::vector<int>{c.dp, c.pp, c.tp});
        out.put(at + " rank_of", grid::rank_of(grid::Coordinates{c.dp, c.pp, c.tp}, s));
        const std::vector<int> mine = coordinates(r, s);
        out.put(at + " rank_of(right coordinates)", grid::rank_of(grid::Coordinates{mine[0], mine[1], mine[2]}, s));
        for (const GroupKind k : kKinds) out.put(at + " " + grid::name_of(k), grid::group_ranks(k, r, s));
      }
  });
  if (!judge::judging()) return;
  for (const auto& s : shapes)
    for (int r = 0; r < s.world(); ++r) {
      const std::string at = s.str() + " rank " + std::to_string(r);
      EXPECT_EQ(got.get<std::vector<int>>(at + " coordinates"), coordinates(r, s))
          << "coordinates_of(" << r << ") on " << s.str() << " as {dp, pp, tp}";
      EXPECT_EQ(got.get<int>(at + " rank_of"), r) << "rank_of(coordinates_of(" << r << ")) on " << s.str();
      EXPECT_EQ(got.get<int>(at + " rank_of(right coordinates)"), r) << "rank_of of rank " << r << "'s coordinates on "
                                                                      << s.str();
      for (const GroupKind k : kKinds)
        EXPECT_EQ(got.get<std::vector<int>>(at + " " + grid::name_of(k)), group(k, r, s))
            << grid::name_of(k) << " group of rank " << r << " on " << s.str();
      if (::testing::Test::HasFailure()) return;  // one shape's messages are enough
    }
}

}  // namespace

TEST(HiddenGrid, EveryShapeOfEighteenRanksInMegatronsOrder) { expect_megatron_order(18); }
TEST(HiddenGrid, EveryShapeOfThirtyRanksInMegatronsOrder) { expect_megatron_order(30); }
