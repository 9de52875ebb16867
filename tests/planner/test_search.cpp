// Problem 8: a whole strategy's cost and the search (given code) over the terms of 8.1.
// strategy_cost and search call the student's terms, so their results are the subject's: each
// case's subject part records the Costs (planner_test_util.h's Codec) and the judge checks them
// against the numbers computed by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "judge/judge.h"
#include "kit/errors.h"
#include "planner/search.h"
#include "planner_test_util.h"

namespace {
namespace pl = kit::planner;

pl::Cluster one_node(int64_t devices, double memory_bytes) {
  nlohmann::json j = nlohmann::json::parse(R"({"name": "node",
      "device_types": {"X": {"flops": 1e12, "memory_bytes": 1}},
      "nodes": [{"device_type": "X", "devices": 2}],
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5},
      "inter_node": {"bandwidth": 1e8, "latency": 1e-4}})");
  j["nodes"][0]["devices"] = devices;
  j["device_types"]["X"]["memory_bytes"] = memory_bytes;
  return pl::cluster_from_json(j);
}

using planner_test::expect_kit_error;
using planner_test::two_layers;  // planner_test_util.h
namespace judge = kit::judge;

}  // namespace

TEST(PlannerSearch, StrategyCostAddsTheTerms) {
  // 2 devices, d = 2: m = 4 / (2 x 1) = 2 micro-batches of 10 tokens each.
  pl::Strategy s;
  s.dp = 2, s.micro_batch = 1, s.layers_per_stage = {2};
  // p = 2, micro-batches of 2 sequences (20 tokens): stage 0 holds layer a, stage 1 layer b;
  // stage 0 sends 400 bytes x 20 tokens forward and receives their gradient back.
  pl::Strategy s2 = s;
  s2.dp = 1, s2.pp = 2, s2.micro_batch = 2, s2.layers_per_stage = {1, 1};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("c", pl::strategy_cost(one_node(2, 1e9), two_layers(), {4, 10}, s));
    out.put("p", pl::strategy_cost(one_node(2, 1e9), two_layers(), {4, 10}, s2));
  });
  if (!judge::judging()) return;
  const pl::Cost c = got.get<pl::Cost>("c");
  const double stage = 3 * 4e9 * 10 / 1e12;      // 0.12 s per micro-batch
  const double data = 2 * 1e-5 + 400 / 1e9;      // all-reduce 400 bytes of gradients, 2 ranks
  EXPECT_EQ(c.micro_batches, 2);
  EXPECT_NEAR(c.pipeline, 2 * stage, 1e-12);
  EXPECT_NEAR(c.data, data, 1e-15);
  EXPECT_NEAR(c.total, 2 * stage + data, 1e-12);
  EXPECT_TRUE(c.fits);
  const pl::Cost p = got.get<pl::Cost>("p");
  const double send = 2 * (1e-5 + 400 * 20 / 1e9);
  const double t0 = 3 * 1e9 * 20 / 1e12 + send, t1 = 3 * 3e9 * 20 / 1e12;
  ASSERT_EQ(p.stage_seconds.size(), 2u);
  EXPECT_NEAR(p.stage_seconds[0], t0, 1e-12);
  EXPECT_NEAR(p.stage_seconds[1], t1, 1e-12);
  EXPECT_NEAR(p.total, (2 - 1) * t1 + t0 + t1, 1e-12);  // m = 2: (m - 1) max + sum
  EXPECT_NEAR(p.bubble, 1.0 / 3, 1e-12);
}

TEST(PlannerSearch, StrategiesThatDoNotFitAreLeftOut) {
  // 4e8 parameter bytes: a whole replica needs 4 x that (parameters, gradients, two moments),
  // more than the 1e9 a device has; t = 2 or 4 splits it enough.
  const pl::Cluster c = one_node(4, 1e9);
  const pl::ModelSpec m = two_layers(1e6);
  pl::SearchOptions o;
  o.micro_batch_sizes = {1};
  o.even = true;  // the layers split evenly: this test needs no partition_layers (Problem 8.2)
  pl::SearchOptions keep = o;
  keep.keep_infeasible = true;
  // ZeRO shards the moments and gradients: then whole replicas fit (4e8 x (1 + 0.25 + 0.5)).
  pl::SearchOptions zero = o;
  zero.zero_stages = {2};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("fit", pl::search(c, m, {4, 10}, o));
    out.put("all", pl::search(c, m, {4, 10}, keep));
    out.put("zero", pl::search(c, m, {4, 10}, zero));
  });
  if (!judge::judging()) return;
  const auto fit = got.get<std::vector<pl::Cost>>("fit");
  ASSERT_FALSE(fit.empty());
  for (const auto& x : fit) {
    EXPECT_TRUE(x.fits) << x.strategy.label();
    EXPECT_LE(x.memory.total(), x.memory_limit) << x.strategy.label();
    EXPECT_GE(x.strategy.tp, 2) << x.strategy.label() << " holds too much to fit";
  }
  const auto all = got.get<std::vector<pl::Cost>>("all");
  EXPECT_GT(all.size(), fit.size());
  bool whole_replicas_marked = false;
  for (const auto& x : all)
    if (x.strategy.dp == 4) {
      EXPECT_FALSE(x.fits);
      EXPECT_GT(x.memory.total(), x.memory_limit);
      whole_replicas_marked = true;
    }
  EXPECT_TRUE(whole_replicas_marked);
  bool zero_fits = false;
  for (const auto& x : got.get<std::vector<pl::Cost>>("zero")) zero_fits |= x.strategy.dp == 4;
  EXPECT_TRUE(zero_fits);
}

TEST(PlannerSearch, SortedAndWithinTheModelsLimits) {
  pl::ModelSpec m = two_layers();
  m.heads = 2;  // t must divide 2
  pl::SearchOptions even;
  even.even = true;  // no partition_layers (Problem 8.2) needed
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("all", pl::search(one_node(4, 1e12), m, {8, 10}, even));
  });
  if (!judge::judging()) return;
  const auto all = got.get<std::vector<pl::Cost>>("all");
  ASSERT_FALSE(all.empty());
  for (size_t k = 0; k < all.size(); ++k) {
    const pl::Strategy& s = all[k].strategy;
    EXPECT_NE(s.tp, 4) << "4 does not divide the 2 heads";
    EXPECT_LE(s.pp, 2) << "more stages than layers";
    EXPECT_EQ(8 % (s.dp * s.micro_batch), 0);
    if (k) EXPECT_LE(all[k - 1].total, all[k].total);
  }
}

TEST(PlannerSearch, EvenPartitionSplitsBlocksAsThePipelinesDo) {
  const pl::ModelSpec gpt = pl::read_model("cpu-small", 128);  // embedding, 4 blocks, head
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const int64_t pp : {1, 3, 4}) out.put("even_partition(gpt, " + std::to_string(pp) + ")", pl::even_partition(gpt, pp));
    out.outcome("even_partition(gpt, 5)", [&] { pl::even_partition(gpt, 5); });
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<std::vector<int64_t>>(call); };
  EXPECT_EQ(v("even_partition(gpt, 1)"), (std::vector<int64_t>{6}));
  EXPECT_EQ(v("even_partition(gpt, 3)"), (std::vector<int64_t>{3, 1, 2}));
  EXPECT_EQ(v("even_partition(gpt, 4)"), (std::vector<int64_t>{2, 1, 1, 2}));
  expect_kit_error(got.get<judge::Outcome>("even_partition(gpt, 5)"), "even_partition(gpt, 5)");
}

TEST(PlannerSearch, SharedProcessorsSlowRanksThatComputeAtOnce) {
  // Two ranks on one node whose devices share 1e12 FLOP/s in all (two processes, one core):
  // each alone would run at 1e12; computing at the same time, each runs at half of it.
  nlohmann::json j = pl::to_json(one_node(2, 1e9));
  j["nodes"][0]["shared_flops"] = 1e12;
  const pl::Cluster shared = pl::cluster_from_json(j);
  nlohmann::json bad = j;
  bad["nodes"][0]["shared_flops"] = -1;
  pl::Strategy s;
  s.dp = 2, s.micro_batch = 1, s.layers_per_stage = {2};
  pl::Strategy rc = s;
  rc.recompute = true;  // each rank's forward runs again
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("alone", pl::strategy_cost(one_node(2, 1e9), two_layers(), {4, 10}, s));
    out.put("both", pl::strategy_cost(shared, two_layers(), {4, 10}, s));
    out.put("both, recompute", pl::strategy_cost(shared, two_layers(), {4, 10}, rc));
    out.outcome("cluster_from_json with shared_flops -1", [&] { pl::cluster_from_json(bad); });
  });
  if (!judge::judging()) return;
  const pl::Cost alone = got.get<pl::Cost>("alone");
  const pl::Cost both = got.get<pl::Cost>("both");
  EXPECT_EQ(alone.contention, 1.0);
  EXPECT_EQ(both.contention, 2.0);
  EXPECT_NEAR(both.pipeline, 3 * 4e9 * 40 / 1e12, 1e-12);  // 0.48 s: both ranks' 40 tokens, one at a time
  EXPECT_NEAR(both.total, both.pipeline + alone.data, 1e-12);
  // With recomputation each rank's forward runs again: 4 x forward FLOPs.
  EXPECT_NEAR(got.get<pl::Cost>("both, recompute").pipeline, 4 * 4e9 * 40 / 1e12, 1e-12);  // 0.64 s
  expect_kit_error(got.get<judge::Outcome>("cluster_from_json with shared_flops -1"),
                   "cluster_from_json with shared_flops -1");
}

TEST(PlannerSearch, ASharedNodesPipelineIsSlowedByTheRanksItKeepsBusy) {
  // Two stages (layer a, then b) on a node that computes one at a time. 1F1B with m = 4 keeps
  // its stages busy 1 - bubble = 4/5 of the step: on average 1.6 ranks compute at once, each
  // at 1/1.6 of its speed. The sends are not slowed.
  nlohmann::json j = pl::to_json(one_node(2, 1e9));
  j["nodes"][0]["shared_flops"] = 1e12;
  pl::Strategy s;
  s.pp = 2, s.micro_batch = 1, s.layers_per_stage = {1, 1};
  pl::Strategy one = s;
  one.micro_batch = 4;  // m = 1: one stage at a time, no one to share with
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("c", pl::strategy_cost(pl::cluster_from_json(j), two_layers(), {4, 10}, s));  // m = 4
    out.put("unshared", pl::strategy_cost(one_node(2, 1e9), two_layers(), {4, 10}, s));
    out.put("m = 1", pl::strategy_cost(pl::cluster_from_json(j), two_layers(), {4, 10}, one));
  });
  if (!judge::judging()) return;
  const pl::Cost c = got.get<pl::Cost>("c");
  const double a = 3 * 1e9 * 10 / 1e12, b = 3 * 3e9 * 10 / 1e12;    // 0.03 s, 0.09 s per micro-batch
  const double send = 2 * (1e-5 + 400 * 10 / 1e9);                 // a's output forward, its gradient back
  EXPECT_NEAR(c.contention, 1.6, 1e-12);
  EXPECT_NEAR(c.pipeline, 3 * (1.6 * b) + (1.6 * a + send) + 1.6 * b, 1e-12);  // (m - 1) max T + sum T
  const pl::Cost unshared = got.get<pl::Cost>("unshared");
  EXPECT_NEAR(unshared.pipeline, 3 * b + (a + send) + b, 1e-12);
  EXPECT_NEAR(got.get<pl::Cost>("m = 1").contention, 1.0, 1e-12);
}

// The three layers of planner_test_util.h on two devices (1e12 FLOP/s each), a batch of 2
// sequences of 10 tokens, micro-batches of 1 sequence, layers split evenly. Per rank (bytes),
// without / with recomputation (parameters + gradients + moments = 4 x the parameters / t):
//   d=2 p=1 t=1 (m = 1): 2400 + 110 x 10 = 3500      / 2400 + 12 x 10 + 500 = 3020
//   d=1 p=2 t=1 (m = 2, layers {2, 1}): stage 0 1200 + 70 x 10 x 2 = 2600
//                                      / 1200 + 8 x 10 x 2 + 500 = 1860 (stage 1: 1600 / 1640)
//   d=1 p=1 t=2 (m = 2, 1 in flight): 1200 + 110 x 10 / 2 = 1750  / 1200 + (120 + 500) / 2 = 1510
// Step times: d=1 p=1 t=2 computes 6e9 x 10 / 2 per micro-batch, twice: 3 x that = 0.18 s,
// 4 x that = 0.24 s with recomputation; d=2 p=1 t=1 adds a 600-byte all-reduce to 0.18 s.
namespace {

pl::Cluster recompute_pair(double memory_bytes) {
  nlohmann::json j = nlohmann::json::parse(R"({"name": "pair",
      "device_types": {"X": {"flops": 1e12, "memory_bytes": 1}},
      "nodes": [{"device_type": "X", "devices": 2}],
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5},
      "inter_node": {"bandwidth": 1e8, "latency": 1e-4}})");
  j["device_types"]["X"]["memory_bytes"] = memory_bytes;
  return pl::cluster_from_json(j);
}

pl::SearchOptions recompute_search_options() {
  pl::SearchOptions o;
  o.micro_batch_sizes = {1};
  o.even = true;  // no partition_layers (Problem 8.2) needed
  return o;
}

}  // namespace

TEST(PlannerSearch, PicksRecomputationWhenOnlyItFits) {
  // 1600 bytes per device: no strategy fits without recomputation (the least needs 1750), one
  // does with it (d=1 p=1 t=2: 1510).
  const pl::ModelSpec m = planner_test::three_layers();
  // Recomputation off only: nothing fits.
  pl::SearchOptions off = recompute_search_options();
  off.recompute = {false};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("fit", pl::search(recompute_pair(1600), m, {2, 10}, recompute_search_options()));
    out.put("off", pl::search(recompute_pair(1600), m, {2, 10}, off));
  });
  if (!judge::judging()) return;
  const auto fit = got.get<std::vector<pl::Cost>>("fit");
  ASSERT_FALSE(fit.empty()) << "d=1 p=1 t=2 with recomputation needs 1510 bytes of the 1600";
  const pl::Cost& best = fit.front();
  EXPECT_TRUE(best.strategy.recompute) << best.strategy.label();
  EXPECT_EQ(best.strategy.tp, 2) << best.strategy.label();
  EXPECT_DOUBLE_EQ(best.memory.total(), 1510);
  EXPECT_NEAR(best.total, 2 * 4 * 6e9 * 10 / 2 / 1e12, 1e-12);  // 0.24 s
  EXPECT_EQ(best.strategy.label(), "d=1 p=1 t=2 mb=1 1f1b rc");
  EXPECT_EQ(pl::to_json(best).at("recompute"), true);
  for (const auto& x : fit) EXPECT_TRUE(x.strategy.recompute) << x.strategy.label() << " fits without it";
  EXPECT_TRUE(got.get<std::vector<pl::Cost>>("off").empty());
}

TEST(PlannerSearch, LeavesRecomputationOffWhenMemoryIsAmple) {
  // Everything fits: recomputation only costs a forward more, so the best leaves it off.
  const pl::ModelSpec m = planner_test::three_layers();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("all", pl::search(recompute_pair(1e9), m, {2, 10}, recompute_search_options()));
  });
  if (!judge::judging()) return;
  const auto all = got.get<std::vector<pl::Cost>>("all");
  ASSERT_FALSE(all.empty());
  const pl::Cost& best = all.front();
  EXPECT_FALSE(best.strategy.recompute) << best.strategy.label();
  EXPECT_EQ(best.strategy.tp, 2) << best.strategy.label();
  EXPECT_NEAR(best.total, 2 * 3 * 6e9 * 10 / 2 / 1e12, 1e-12);  // 0.18 s
  EXPECT_DOUBLE_EQ(best.memory.total(), 1750);
  EXPECT_EQ(pl::to_json(best).at("recompute"), false);
  // The same strategy with recomputation is there too: a third slower, 240 bytes smaller.
  bool found = false;
  for (const auto& x : all)
    if (x.strategy.recompute && x.strategy.dp == 1 && x.strategy.pp == 1 && x.strategy.tp == 2) {
      found = true;
      EXPECT_NEAR(x.total, 0.24, 1e-12);
      EXPECT_DOUBLE_EQ(x.memory.total(), 1510);
      EXPECT_GT(x.total, best.total);
    }
  EXPECT_TRUE(found) << "the search should try every strategy with recomputation on too";
}
