// Graded variants of tests/planner/test_cost.cpp and test_partition.cpp on numbers the public
// cases do not use (other ring sizes, links, stage counts, micro-batches, chunks, layer ranges,
// tensor and data degrees, random costs from other seeds), so cost terms or partitions tuned
// to the public answers lose these points. The subject calls the student's functions and
// records what they returned; the judge computes each expected value from the formula in
// planner/cost.h (or brute force for the partition) with given code only.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "planner/cost.h"
#include "planner/partition.h"
#include "planner/planner_test_util.h"
#include "planner/profile.h"

namespace {
namespace pl = kit::planner;
namespace judge = kit::judge;

const pl::Link kFast{2.5e10, 3e-6};

// The ring all-reduce of planner/cost.h, written out: 2(n - 1) messages of an n-th each.
double ring(double bytes, int64_t n, const pl::Link& link) {
  if (n == 1) return 0;
  const double steps = 2.0 * static_cast<double>(n - 1);
  return steps * link.latency + steps / static_cast<double>(n) * bytes / link.bandwidth;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

TEST(HiddenPlannerCost, RingAndPointToPointOnOtherSizesAndLinks) {
  const std::vector<int64_t> ns{1, 3, 5, 6, 16};
  const std::vector<double> sizes{3e5, 7.5e7};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const int64_t n : ns)
      for (const double b : sizes)
        out.put("ring " + std::to_string(n) + " " + std::to_string(b), pl::ring_all_reduce_seconds(b, n, kFast));
    for (const double b : sizes) out.put("p2p " + std::to_string(b), pl::p2p_seconds(b, kFast));
  });
  if (!judge::judging()) return;
  for (const int64_t n : ns)
    for (const double b : sizes)
      EXPECT_NEAR(got.get<double>("ring " + std::to_string(n) + " " + std::to_string(b)), ring(b, n, kFast), 1e-15)
          << "ring_all_reduce_seconds(" << b << ", " << n << ", {2.5e10, 3e-6})";
  for (const double b : sizes)
    EXPECT_NEAR(got.get<double>("p2p " + std::to_string(b)), kFast.latency + b / kFast.bandwidth, 1e-15)
        << "p2p_seconds(" << b << ", {2.5e10, 3e-6})";
}

TEST(HiddenPlannerCost, BubbleAndPipelineOnOtherShapes) {
  const std::vector<double> stages{0.5, 1.25, 0.75, 2.0, 1.0};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("bubble(3, 5, gpipe)", pl::bubble_fraction(3, 5, pl::Schedule::gpipe));
    out.put("bubble(6, 12, one_f_one_b)", pl::bubble_fraction(6, 12, pl::Schedule::one_f_one_b));
    out.put("bubble(6, 12, interleaved, 3)", pl::bubble_fraction(6, 12, pl::Schedule::interleaved, 3));
    out.put("pipeline(stages, 6, gpipe)", pl::pipeline_seconds(stages, 6, pl::Schedule::gpipe));
    out.put("pipeline(stages, 6, one_f_one_b)", pl::pipeline_seconds(stages, 6, pl::Schedule::one_f_one_b));
    out.put("pipeline(stages, 10, interleaved, 3)", pl::pipeline_seconds(stages, 10, pl::Schedule::interleaved, 3));
  });
  if (!judge::judging()) return;
  EXPECT_NEAR(got.get<double>("bubble(3, 5, gpipe)"), 2.0 / 7, 1e-15);
  EXPECT_NEAR(got.get<double>("bubble(6, 12, one_f_one_b)"), 5.0 / 17, 1e-15);
  EXPECT_NEAR(got.get<double>("bubble(6, 12, interleaved, 3)"), 5.0 / 41, 1e-15);
  const double slowest = 2.0, sum = 5.5;
  EXPECT_NEAR(got.get<double>("pipeline(stages, 6, gpipe)"), 5 * slowest + sum, 1e-12);
  EXPECT_NEAR(got.get<double>("pipeline(stages, 6, one_f_one_b)"), 5 * slowest + sum, 1e-12);
  EXPECT_NEAR(got.get<double>("pipeline(stages, 10, interleaved, 3)"), 10 * slowest + (sum - slowest) / 3, 1e-12);
}

TEST(HiddenPlannerCost, InFlightOnSixStages) {
  const int64_t p = 6;
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const int64_t m : {3, 12})
      for (int64_t s = 0; s < p; ++s) {
        const std::string at = std::to_string(s) + ", 6, " + std::to_string(m);
        out.put("gpipe " + at, pl::in_flight_micro_batches(s, p, m, pl::Schedule::gpipe));
        out.put("1f1b " + at, pl::in_flight_micro_batches(s, p, m, pl::Schedule::one_f_one_b));
        out.put("interleaved 3 " + at, pl::in_flight_micro_batches(s, p, m, pl::Schedule::interleaved, 3));
      }
  });
  if (!judge::judging()) return;
  for (const int64_t m : {3, 12})
    for (int64_t s = 0; s < p; ++s) {
      const std::string at = std::to_string(s) + ", 6, " + std::to_string(m);
      EXPECT_EQ(got.get<int64_t>("gpipe " + at), m) << "in_flight_micro_batches(" << at << ", gpipe)";
      EXPECT_EQ(got.get<int64_t>("1f1b " + at), std::min(p - s, m)) << "in_flight_micro_batches(" << at << ", 1F1B)";
      EXPECT_EQ(got.get<int64_t>("interleaved 3 " + at), std::min(ceil_div((p - s - 1) * 2 + 2 * p + 1, 3), m))
          << "in_flight_micro_batches(" << at << ", interleaved, 3)";
    }
}

TEST(HiddenPlannerCost, ComputeTensorAndDataParallelOnOtherRanges) {
  const pl::ModelSpec m = planner_test::three_layers();
  pl::ModelSpec uneven = planner_test::two_layers();
  uneven.layers[1].output_bytes_per_token = 1200;
  uneven.layers[1].tp_all_reduces = 3;
  const pl::DeviceType dev{4e12, 1e9};
  const pl::Cluster c = pl::cluster_from_json(nlohmann::json::parse(R"({"name": "3x2",
      "device_types": {"X": {"flops": 1e12, "memory_bytes": 1e9}},
      "nodes": [{"device_type": "X", "devices": 2}, {"device_type": "X", "devices": 2},
                {"device_type": "X", "devices": 2}],
      "intra_node": {"bandwidth": 4e10, "latency": 2e-6},
      "inter_node": {"bandwidth": 5e9, "latency": 2e-5}})"));
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("compute(m, 1, 3, 24, 3, dev)", pl::compute_seconds(m, 1, 3, 24, 3, dev));
    out.put("compute(m, 0, 2, 7, 1, dev, true)", pl::compute_seconds(m, 0, 2, 7, 1, dev, true));
    out.put("tp(uneven, 0, 2, 50, 3)", pl::tensor_parallel_seconds(uneven, 0, 2, 50, 3, kFast));
    out.put("tp(uneven, 1, 2, 50, 6)", pl::tensor_parallel_seconds(uneven, 1, 2, 50, 6, kFast));
    out.put("dp({0, 1})", pl::data_parallel_seconds(2e6, {0, 1}, c));
    out.put("dp({1, 2, 3})", pl::data_parallel_seconds(2e6, {1, 2, 3}, c));
    out.put("dp({0, 2, 4})", pl::data_parallel_seconds(2e6, {0, 2, 4}, c));
  });
  if (!judge::judging()) return;
  const auto compute = [&](int64_t first, int64_t last, double tokens, int64_t tp, bool recompute) {
    double s = 0;
    for (int64_t i = first; i < last; ++i) {
      const pl::LayerSeconds x = pl::layer_seconds(m.layers[static_cast<size_t>(i)], tokens, tp, dev);
      s += x.forward + x.backward + (recompute ? x.forward : 0.0);
    }
    return s;
  };
  EXPECT_NEAR(got.get<double>("compute(m, 1, 3, 24, 3, dev)"), compute(1, 3, 24, 3, false), 1e-15);
  EXPECT_NEAR(got.get<double>("compute(m, 0, 2, 7, 1, dev, true)"), compute(0, 2, 7, 1, true), 1e-15);
  // Layer a: 4 all-reduces of 400 x 50 bytes; layer b: 3 of 1200 x 50.
  EXPECT_NEAR(got.get<double>("tp(uneven, 0, 2, 50, 3)"), 4 * ring(2e4, 3, kFast) + 3 * ring(6e4, 3, kFast), 1e-15);
  EXPECT_NEAR(got.get<double>("tp(uneven, 1, 2, 50, 6)"), 3 * ring(6e4, 6, kFast), 1e-15);
  const pl::Link intra{4e10, 2e-6}, inter{5e9, 2e-5};
  EXPECT_NEAR(got.get<double>("dp({0, 1})"), ring(2e6, 2, intra), 1e-15) << "ranks 0 and 1 share node 0";
  EXPECT_NEAR(got.get<double>("dp({1, 2, 3})"), ring(2e6, 3, inter), 1e-15) << "ranks 1, 2, 3 span two nodes";
  EXPECT_NEAR(got.get<double>("dp({0, 2, 4})"), ring(2e6, 3, inter), 1e-15) << "one rank on each node";
}

// memory_per_rank on layers e..g of three_layers, stage 1 of p = 3, interleaved v = 2, t = 2,
// d = 3, m = 6, 12 tokens per micro-batch, each ZeRO stage with and without recomputation.
TEST(HiddenPlannerCost, MemoryOnThreeStagesInterleavedWithEveryZeroStage) {
  const pl::ModelSpec m = planner_test::three_layers();
  std::vector<pl::Strategy> strategies;
  for (const int zero : {0, 1, 2})
    for (const bool recompute : {false, true}) {
      pl::Strategy s;
      s.dp = 3, s.pp = 3, s.tp = 2, s.schedule = pl::Schedule::interleaved, s.virtual_chunks = 2;
      s.zero_stage = zero, s.recompute = recompute;
      strategies.push_back(s);
    }
  const auto name = [](const pl::Strategy& s) {
    return "ZeRO " + std::to_string(s.zero_stage) + (s.recompute ? ", recompute" : "");
  };
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const auto& s : strategies) out.put(name(s), pl::memory_per_rank(m, 1, 3, 12, s, 1, 6));
  });
  if (!judge::judging()) return;
  const double t = 2, d = 3, tokens = 12;
  const double in_flight = static_cast<double>(std::min(ceil_div((3 - 1 - 1) * 2 + 3 + 1, 2), int64_t{6}));  // 3
  for (const auto& s : strategies) {
    const pl::Memory mem = got.get<pl::Memory>(name(s));
    const double params = 500 / t;  // layers f and g
    EXPECT_DOUBLE_EQ(mem.parameters, params) << name(s);
    EXPECT_DOUBLE_EQ(mem.gradients, s.zero_stage >= 2 ? params / d : params) << name(s);
    EXPECT_DOUBLE_EQ(mem.optimizer, 2 * params / (s.zero_stage >= 1 ? d : 1)) << name(s);
    // Without recomputation f's and g's 50 + 40 bytes per token; with it their inputs (e's and
    // f's outputs, 8 + 4) per micro-batch in flight, plus f's 50 once.
    const double want = s.recompute ? (8 + 4) * tokens / t * in_flight + 50 * tokens / t
                                    : (50 + 40) * tokens / t * in_flight;
    EXPECT_DOUBLE_EQ(mem.activations, want) << name(s);
  }
}

TEST(HiddenPlannerPartition, MatchesBruteForceOnOtherSeedsAndDepths) {
  std::mt19937 rng(2027);
  std::uniform_real_distribution<double> cost(0.05, 8.0), speed(0.25, 4.0);
  std::vector<std::vector<std::vector<double>>> problems;
  for (const size_t L : {10, 12, 13})
    for (const size_t p : {2, 3, 5, 6}) {
      std::vector<double> layer(L);
      for (auto& x : layer) x = cost(rng);
      std::vector<std::vector<double>> seconds(p, layer);
      for (auto& row : seconds) {
        const double s = speed(rng);
        for (auto& x : row) x /= s;
      }
      problems.push_back(seconds);
    }
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (size_t i = 0; i < problems.size(); ++i)
      out.put("problem " + std::to_string(i), pl::partition_layers(problems[i]));
  });
  if (!judge::judging()) return;
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto counts = got.get<std::vector<int64_t>>("problem " + std::to_string(i));
    const size_t p = problems[i].size(), L = problems[i][0].size();
    const std::string what = "L = " + std::to_string(L) + ", p = " + std::to_string(p);
    ASSERT_EQ(counts.size(), p) << what;
    for (const int64_t c : counts) ASSERT_GE(c, 1) << what;
    ASSERT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), static_cast<int64_t>(L)) << what;
    EXPECT_NEAR(pl::slowest_stage_seconds(problems[i], counts), planner_test::brute_force(problems[i]), 1e-12) << what;
  }
}
