// Problem 8.2: the layer-partition DP against brute force over every partition.
// Each case's subject part records the layer counts partition_layers returned (and what threw);
// the judge checks them, the brute force (given slowest_stage_seconds) included.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "judge/judge.h"
#include "kit/errors.h"
#include "planner_test_util.h"
#include "planner/partition.h"

namespace {
namespace pl = kit::planner;
using Costs = std::vector<std::vector<double>>;
using Counts = std::vector<int64_t>;
namespace judge = kit::judge;
using planner_test::brute_force;

// The smallest slowest stage over every way to cut L layers into p runs of 1 or more.
void expect_valid(const std::vector<int64_t>& counts, size_t p, size_t L) {
  ASSERT_EQ(counts.size(), p);
  for (const int64_t c : counts) EXPECT_GE(c, 1);
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), static_cast<int64_t>(L));
}

}  // namespace

TEST(PlannerPartition, UnevenLayersHandChecked) {
  // One heavy layer last: it gets a stage of its own.
  const Costs same(2, {1, 1, 1, 1, 4});
  // A heavy first layer (an embedding) and a heavy last (a head), three stages: each alone,
  // the five light ones together.
  const Costs three(3, {5, 1, 1, 1, 1, 1, 5});
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("partition_layers(same)", pl::partition_layers(same));
    out.put("partition_layers(three)", pl::partition_layers(three));
  });
  if (!judge::judging()) return;
  const auto counts = got.get<Counts>("partition_layers(same)");
  expect_valid(counts, 2, 5);
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(got.get<Counts>("partition_layers(three)"), (std::vector<int64_t>{1, 5, 1}));
}

TEST(PlannerPartition, SlowerDeviceGetsFewerLayers) {
  // Stage 1's device is three times slower: 8 equal layers split 6 + 2 (6 = 2 x 3).
  const Costs c{std::vector<double>(8, 1.0), std::vector<double>(8, 3.0)};
  const judge::Record got = judge::subject([&](judge::Record& out) { out.put("partition_layers(c)", pl::partition_layers(c)); });
  JUDGE EXPECT_EQ(got.get<Counts>("partition_layers(c)"), (std::vector<int64_t>{6, 2}));
}

TEST(PlannerPartition, MatchesBruteForceOnRandomCosts) {
  // The random costs, the same in the subject and the judge (a seeded generator).
  struct Trial {
    size_t L, p;
    int trial;
    Costs seconds;
    std::string name() const {
      return "L = " + std::to_string(L) + ", p = " + std::to_string(p) + ", trial " + std::to_string(trial);
    }
  };
  std::vector<Trial> trials;
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
        trials.push_back({L, p, trial, std::move(seconds)});
      }
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const Trial& t : trials) out.put(t.name(), pl::partition_layers(t.seconds));
  });
  if (!judge::judging()) return;
  for (const Trial& t : trials) {
    const auto counts = got.get<Counts>(t.name());
    expect_valid(counts, t.p, t.L);
    bool valid = counts.size() == t.p && std::accumulate(counts.begin(), counts.end(), int64_t{0}) ==
                                             static_cast<int64_t>(t.L);
    for (const int64_t c : counts) valid &= c >= 1;
    if (!valid) continue;  // expect_valid has said why
    EXPECT_NEAR(pl::slowest_stage_seconds(t.seconds, counts), brute_force(t.seconds), 1e-12) << t.name();
  }
}

// The judge's optimum at depths no brute force reaches: the smallest slowest stage over every
// partition of the first e layers into j + 1 stages, memoised from the last stage back.
double optimum(const Costs& seconds) {
  const size_t p = seconds.size(), L = seconds[0].size();
  std::vector<std::vector<double>> memo(p, std::vector<double>(L + 1, -1));
  std::function<double(size_t, size_t)> best = [&](size_t j, size_t e) -> double {
    double& m = memo[j][e];
    if (m >= 0) return m;
    if (j == 0) return m = std::accumulate(seconds[0].begin(), seconds[0].begin() + static_cast<long>(e), 0.0);
    m = std::numeric_limits<double>::infinity();
    double last = 0;  // layers k..e-1 on stage j
    for (size_t k = e - 1; k >= j; --k) {
      last += seconds[j][k];
      m = std::min(m, std::max(best(j - 1, k), last));
    }
    return m;
  };
  return best(p - 1, L);
}

// At a depth the planner plans for (GPT-3's 96 layers on 16 stages, uneven devices), past any
// search of the C(95, 15) ~ 1e17 partitions: the dynamic program takes microseconds.
TEST(PlannerPartition, NinetySixLayersOnSixteenStagesAgainstTheOptimum) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.1, 5.0), speed(0.5, 2.0);
  std::vector<double> layer(96);
  for (auto& x : layer) x = cost(rng);
  Costs seconds(16, layer);
  for (auto& row : seconds) {
    const double s = speed(rng);
    for (auto& x : row) x /= s;
  }
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("partition_layers(96 layers, 16 stages)", pl::partition_layers(seconds));
  });
  if (!judge::judging()) return;
  const auto counts = got.get<Counts>("partition_layers(96 layers, 16 stages)");
  expect_valid(counts, 16, 96);
  if (counts.size() != 16 || std::accumulate(counts.begin(), counts.end(), int64_t{0}) != 96) return;
  EXPECT_NEAR(pl::slowest_stage_seconds(seconds, counts), optimum(seconds), 1e-9)
      << "96 layers on 16 stages: not the smallest slowest stage";
}

TEST(PlannerPartition, EveryStageGetsALayerEvenWhenEmptyWouldBeFaster) {
  // One device 100x slower than the other: leaving its stage empty would be fastest, but every
  // stage holds at least one layer (an empty stage is a rank with nothing to do).
  const Costs slow_second{{1, 1, 1}, {100, 100, 100}};
  const Costs slow_first{{100, 100, 100}, {1, 1, 1}};
  // As many layers as stages: one each, whatever the costs.
  const Costs one_each{{1, 1, 1, 1}, {50, 50, 50, 50}, {1, 1, 1, 1}, {50, 50, 50, 50}};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("partition_layers(slow_second)", pl::partition_layers(slow_second));
    out.put("partition_layers(slow_first)", pl::partition_layers(slow_first));
    out.put("partition_layers(one_each)", pl::partition_layers(one_each));
  });
  if (!judge::judging()) return;
  expect_valid(got.get<Counts>("partition_layers(slow_second)"), 2, 3);
  EXPECT_EQ(got.get<Counts>("partition_layers(slow_second)"), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(got.get<Counts>("partition_layers(slow_first)"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(got.get<Counts>("partition_layers(one_each)"), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(PlannerPartition, FewerLayersThanStagesIsAClearError) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("partition_layers(Costs(3, {1, 1}))", [&] { pl::partition_layers(Costs(3, {1, 1})); });
    out.outcome("partition_layers(Costs{{1, 1}, {1}})", [&] { pl::partition_layers(Costs{{1, 1}, {1}}); });
  });
  if (!judge::judging()) return;
  const auto e = got.get<judge::Outcome>("partition_layers(Costs(3, {1, 1}))");
  if (!e.threw()) FAIL() << "no error";
  ASSERT_EQ(e.kind, "kit::Error") << "partition_layers(Costs(3, {1, 1})) must throw kit::Error; it " << e.describe();
  EXPECT_NE(e.message.find("2 layers cannot fill 3 stages"), std::string::npos) << e.message;
  planner_test::expect_kit_error(got.get<judge::Outcome>("partition_layers(Costs{{1, 1}, {1}})"),
                                 "partition_layers(Costs{{1, 1}, {1}})");
}
