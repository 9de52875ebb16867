// Problem 8.2: the layer-partition DP against brute force over every partition.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kit/errors.h"
#include "planner/partition.h"

namespace {
namespace pl = kit::planner;
using Costs = std::vector<std::vector<double>>;

// The smallest slowest stage over every way to cut L layers into p runs of 1 or more.
double brute_force(const Costs& seconds) {
  const size_t p = seconds.size(), L = seconds[0].size();
  double best = std::numeric_limits<double>::infinity();
  std::vector<int64_t> counts(p, 1);
  // Enumerate the p - 1 cut points among L - 1 gaps as a bit mask.
  for (uint64_t mask = 0; mask < (uint64_t{1} << (L - 1)); ++mask) {
    if (static_cast<size_t>(__builtin_popcountll(mask)) != p - 1) continue;
    counts.assign(1, 1);
    for (size_t g = 0; g + 1 < L; ++g) {
      if (mask >> g & 1) counts.push_back(0);
      ++counts.back();
    }
    best = std::min(best, pl::slowest_stage_seconds(seconds, counts));
  }
  return best;
}

void expect_valid(const std::vector<int64_t>& counts, size_t p, size_t L) {
  ASSERT_EQ(counts.size(), p);
  for (const int64_t c : counts) EXPECT_GE(c, 1);
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), static_cast<int64_t>(L));
}

}  // namespace

TEST(PlannerPartition, UnevenLayersHandChecked) {
  // One heavy layer last: it gets a stage of its own.
  const Costs same(2, {1, 1, 1, 1, 4});
  const auto counts = pl::partition_layers(same);
  expect_valid(counts, 2, 5);
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 1}));
  // A heavy first layer (an embedding) and a heavy last (a head), three stages: each alone,
  // the five light ones together.
  const Costs three(3, {5, 1, 1, 1, 1, 1, 5});
  EXPECT_EQ(pl::partition_layers(three), (std::vector<int64_t>{1, 5, 1}));
}

TEST(PlannerPartition, SlowerDeviceGetsFewerLayers) {
  // Stage 1's device is three times slower: 8 equal layers split 6 + 2 (6 = 2 x 3).
  const Costs c{std::vector<double>(8, 1.0), std::vector<double>(8, 3.0)};
  EXPECT_EQ(pl::partition_layers(c), (std::vector<int64_t>{6, 2}));
}

TEST(PlannerPartition, MatchesBruteForceOnRandomCosts) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0), speed(0.5, 2.0);
  for (size_t L = 1; L <= 9; ++L)
    for (size_t p = 1; p <= std::min<size_t>(L, 4); ++p)
      for (int trial = 0; trial < 6; ++trial) {
        std::vector<double> layer(L);
        for (auto& x : layer) x = cost(rng);
        Costs seconds(p, layer);
        if (trial % 2)  // uneven devices: each stage its own speed
          for (auto& row : seconds) {
            const double s = speed(rng);
            for (auto& x : row) x /= s;
          }
        const auto counts = pl::partition_layers(seconds);
        expect_valid(counts, p, L);
        EXPECT_NEAR(pl::slowest_stage_seconds(seconds, counts), brute_force(seconds), 1e-12)
            << "L = " << L << ", p = " << p << ", trial " << trial;
      }
}

TEST(PlannerPartition, EveryStageGetsALayerEvenWhenEmptyWouldBeFaster) {
  // One device 100x slower than the other: leaving its stage empty would be fastest, but every
  // stage holds at least one layer (an empty stage is a rank with nothing to do).
  const Costs slow_second{{1, 1, 1}, {100, 100, 100}};
  expect_valid(pl::partition_layers(slow_second), 2, 3);
  EXPECT_EQ(pl::partition_layers(slow_second), (std::vector<int64_t>{2, 1}));
  const Costs slow_first{{100, 100, 100}, {1, 1, 1}};
  EXPECT_EQ(pl::partition_layers(slow_first), (std::vector<int64_t>{1, 2}));
  // As many layers as stages: one each, whatever the costs.
  const Costs one_each{{1, 1, 1, 1}, {50, 50, 50, 50}, {1, 1, 1, 1}, {50, 50, 50, 50}};
  EXPECT_EQ(pl::partition_layers(one_each), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(PlannerPartition, FewerLayersThanStagesIsAClearError) {
  try {
    pl::partition_layers(Costs(3, {1, 1}));
    FAIL() << "no error";
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 layers cannot fill 3 stages"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pl::partition_layers(Costs{{1, 1}, {1}}), kit::Error);
}
