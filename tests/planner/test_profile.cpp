// Problem 8 (given): a device's measured layer times (planner/profile.h) and what the planner
// does with them: compute_seconds (Problem 8.1) from the profile, the optimizer term, the
// shared-node bound and the micro-batch size the search picks. The PlannerCost and
// PlannerSearch cases (graded) record what compute_seconds, strategy_cost and search returned in
// their subject parts and check it in the judge; the PlannerProfile cases call given code only.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "judge/judge.h"
#include "kit/errors.h"
#include "planner/cost.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "planner_test_util.h"

namespace {
namespace pl = kit::planner;
using nlohmann::json;

// A profile of two_layers()' layers "a" and "b" with round times. Backward is NOT twice the
// forward (a measurement need not be), so code that assumes it is gives other numbers.
//   a, t = 1:  100 tokens: forward 10 ms, backward 25 ms;  300 tokens: 20 ms, 60 ms
//   b, t = 1:  100 tokens:  4 ms,  5 ms;                   300 tokens:  8 ms, 12 ms
//   a, t = 2:  100 tokens:  6 ms, 14 ms                    b, t = 2: 100 tokens: 3 ms, 3 ms
//   optimizer: a 2 ms, b 1 ms at t = 1; a 1.5 ms, b 0.5 ms at t = 2
json profile_json() {
  return json::parse(R"({"format": "kit layer profile", "device": "test", "seq_len": 100,
      "layers": {"a": {"flops_per_token": 1e9, "param_bytes": 100}, "b": {"flops_per_token": 3e9, "param_bytes": 300}},
      "times": [
        {"kind": "a", "tp": 1, "micro_batch": 1, "tokens": 100, "forward_s": 0.010, "backward_s": 0.025},
        {"kind": "a", "tp": 1, "micro_batch": 3, "tokens": 300, "forward_s": 0.020, "backward_s": 0.060},
        {"kind": "b", "tp": 1, "micro_batch": 1, "tokens": 100, "forward_s": 0.004, "backward_s": 0.005},
        {"kind": "b", "tp": 1, "micro_batch": 3, "tokens": 300, "forward_s": 0.008, "backward_s": 0.012},
        {"kind": "a", "tp": 2, "micro_batch": 1, "tokens": 100, "forward_s": 0.006, "backward_s": 0.014},
        {"kind": "b", "tp": 2, "micro_batch": 1, "tokens": 100, "forward_s": 0.003, "backward_s": 0.003}],
      "optimizer": [{"kind": "a", "tp": 1, "seconds": 0.002}, {"kind": "b", "tp": 1, "seconds": 0.001},
                    {"kind": "a", "tp": 2, "seconds": 0.0015}, {"kind": "b", "tp": 2, "seconds": 0.0005}]})");
}

pl::DeviceType profiled(json j = profile_json()) {
  pl::DeviceType d{1e12, 1e9, nullptr};
  d.profile = std::make_shared<const pl::LayerProfile>(pl::profile_from_json(j, "profile.json"));
  return d;
}

using planner_test::two_layers;
namespace judge = kit::judge;

}  // namespace

TEST(PlannerCost, ComputeAddsEachLayersMeasuredForwardAndBackward) {
  const pl::ModelSpec m = two_layers();
  const pl::DeviceType dev = profiled();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("compute_seconds(m, 0, 2, 100, 1, dev)", pl::compute_seconds(m, 0, 2, 100, 1, dev));
    out.put("compute_seconds(m, 1, 2, 100, 1, dev)", pl::compute_seconds(m, 1, 2, 100, 1, dev));
    out.put("compute_seconds(m, 0, 2, 300, 1, dev)", pl::compute_seconds(m, 0, 2, 300, 1, dev));
    out.put("compute_seconds(m, 0, 2, 100, 2, dev)", pl::compute_seconds(m, 0, 2, 100, 2, dev));
    out.put("compute_seconds(m, 0, 1, 200, 1, dev)", pl::compute_seconds(m, 0, 1, 200, 1, dev));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  EXPECT_NEAR(v("compute_seconds(m, 0, 2, 100, 1, dev)"), 0.010 + 0.025 + 0.004 + 0.005, 1e-12);
  EXPECT_NEAR(v("compute_seconds(m, 1, 2, 100, 1, dev)"), 0.004 + 0.005, 1e-12);  // layer b only
  EXPECT_NEAR(v("compute_seconds(m, 0, 2, 300, 1, dev)"), 0.020 + 0.060 + 0.008 + 0.012, 1e-12);
  EXPECT_NEAR(v("compute_seconds(m, 0, 2, 100, 2, dev)"), 0.006 + 0.014 + 0.003 + 0.003, 1e-12);  // t = 2's times
  // 200 tokens: halfway between the two measured sizes.
  EXPECT_NEAR(v("compute_seconds(m, 0, 1, 200, 1, dev)"), 0.015 + 0.0425, 1e-12);
}

TEST(PlannerCost, RecomputationAddsEachLayersMeasuredForwardOnceMore) {
  const pl::ModelSpec m = two_layers();
  const pl::DeviceType dev = profiled();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("compute_seconds(m, 0, 2, 100, 1, dev, true)", pl::compute_seconds(m, 0, 2, 100, 1, dev, true));
    out.put("compute_seconds(m, 0, 1, 300, 1, dev, true)", pl::compute_seconds(m, 0, 1, 300, 1, dev, true));
    out.put("compute_seconds(m, 1, 2, 100, 2, dev, true)", pl::compute_seconds(m, 1, 2, 100, 2, dev, true));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  EXPECT_NEAR(v("compute_seconds(m, 0, 2, 100, 1, dev, true)"), 0.044 + 0.010 + 0.004, 1e-12);
  EXPECT_NEAR(v("compute_seconds(m, 0, 1, 300, 1, dev, true)"), 0.020 + 0.060 + 0.020, 1e-12);
  EXPECT_NEAR(v("compute_seconds(m, 1, 2, 100, 2, dev, true)"), 0.003 + 0.003 + 0.003, 1e-12);
}

TEST(PlannerProfile, BetweenAndBeyondTheMeasuredSizes) {
  const pl::Layer a = two_layers().layers[0];
  const pl::DeviceType dev = profiled();
  pl::LayerSeconds s = pl::layer_seconds(a, 150, 1, dev);  // a quarter of the way from 100 to 300
  EXPECT_NEAR(s.forward, 0.0125, 1e-12);
  EXPECT_NEAR(s.backward, 0.03375, 1e-12);
  s = pl::layer_seconds(a, 50, 1, dev);  // below the smallest: its time per token
  EXPECT_NEAR(s.forward, 0.005, 1e-12);
  EXPECT_NEAR(s.backward, 0.0125, 1e-12);
  s = pl::layer_seconds(a, 600, 1, dev);  // beyond the largest: its time per token
  EXPECT_NEAR(s.forward, 0.040, 1e-12);
  EXPECT_NEAR(s.backward, 0.120, 1e-12);
  s = pl::layer_seconds(a, 1000, 2, dev);  // one size measured at t = 2
  EXPECT_NEAR(s.forward, 0.060, 1e-12);
  EXPECT_NEAR(pl::optimizer_seconds(a, 2, dev), 0.0015, 1e-15);
}

TEST(PlannerProfile, WithoutAProfileLayersCostTheirFlops) {
  const pl::Layer b = two_layers().layers[1];
  const pl::DeviceType dev{1e12, 1e9, nullptr};
  const pl::LayerSeconds s = pl::layer_seconds(b, 100, 2, dev);
  EXPECT_NEAR(s.forward, 3e9 * 100 / 2 / 1e12, 1e-15);
  EXPECT_NEAR(s.backward, 2 * s.forward, 1e-15);
  EXPECT_EQ(pl::optimizer_seconds(b, 1, dev), 0.0);
}

TEST(PlannerProfile, AKindByItsNameOrItsKindField) {
  pl::ModelSpec m = two_layers();
  m.layers[1].name = "block 7";
  m.layers[1].kind = "b";  // the profile's "b"
  EXPECT_NEAR(pl::layer_seconds(m.layers[1], 100, 1, profiled()).backward, 0.005, 1e-12);
  const pl::ModelSpec j = pl::model_from_json(json::parse(R"({"name": "x", "layers": [
      {"name": "q", "kind": "a", "flops_per_token": 1e9, "param_bytes": 100, "activation_bytes_per_token": 1,
       "output_bytes_per_token": 1, "tp_all_reduces": 0}]})"));
  EXPECT_EQ(j.layers[0].kind, "a");
  EXPECT_NEAR(pl::layer_seconds(j.layers[0], 100, 1, profiled()).backward, 0.025, 1e-12);
}

TEST(PlannerProfile, AnotherShapeOrAMissingDegreeIsAClearError) {
  pl::ModelSpec m = two_layers();
  m.layers[0].flops_per_token = 2e9;  // another width or sequence length than the one profiled
  std::string e = kit_test::error_of([&] { pl::layer_seconds(m.layers[0], 100, 1, profiled()); });
  EXPECT_NE(e.find("profile.json measured a a of 1000000000.0 FLOPs"), std::string::npos) << e;
  EXPECT_NE(e.find("profile_layers"), std::string::npos) << e;
  e = kit_test::error_of([&] { pl::layer_seconds(two_layers().layers[0], 100, 4, profiled()); });
  EXPECT_NE(e.find("no a at tensor-parallel degree t = 4"), std::string::npos) << e;
  EXPECT_NE(e.find("--tp"), std::string::npos) << e;
  m = two_layers();
  m.layers[0].name = "c";
  e = kit_test::error_of([&] { pl::optimizer_seconds(m.layers[0], 1, profiled()); });
  EXPECT_NE(e.find("has no layer of kind \"c\""), std::string::npos) << e;
}

TEST(PlannerProfile, ABadFileNamesTheField) {
  json j = profile_json();
  j["format"] = "something else";
  EXPECT_NE(kit_test::error_of([&] { pl::profile_from_json(j, "p.json"); }).find("p.json.format"), std::string::npos);
  j = profile_json();
  j["times"][2]["kind"] = "z";
  EXPECT_NE(kit_test::error_of([&] { pl::profile_from_json(j, "p.json"); }).find("p.json.times[2].kind \"z\" is not one of"),
            std::string::npos);
  j = profile_json();
  j["times"][1]["backward_s"] = -1;
  EXPECT_NE(kit_test::error_of([&] { pl::profile_from_json(j, "p.json"); }).find("p.json.times[1].backward_s is -1"),
            std::string::npos);
  j = profile_json();
  j["times"][1]["tokens"] = 100;  // a second measurement of a, t = 1 at 100 tokens
  EXPECT_NE(kit_test::error_of([&] { pl::profile_from_json(j, "p.json"); }).find("a second time"), std::string::npos);
}

TEST(PlannerProfile, AClusterNamesItsProfileRelativeToItsFile) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/kit_profile.json") << profile_json().dump();
  std::ofstream(dir + "/kit_cluster.json") << R"({"name": "p", "device_types": {"X": {"flops": 1e12,
      "memory_bytes": 1e9, "profile": "kit_profile.json"}}, "nodes": [{"device_type": "X", "devices": 2}],
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5}, "inter_node": {"bandwidth": 1e9, "latency": 1e-5}})";
  const pl::Cluster c = pl::read_cluster(dir + "/kit_cluster.json");
  ASSERT_TRUE(c.device_types.at("X").profile);
  EXPECT_NEAR(pl::layer_seconds(two_layers().layers[1], 300, 1, c.device_types.at("X")).forward, 0.008, 1e-12);
  std::ofstream(dir + "/kit_cluster.json") << R"({"name": "p", "device_types": {"X": {"flops": 1e12,
      "memory_bytes": 1e9, "profile": "no_such_profile.json"}}, "nodes": [{"device_type": "X", "devices": 2}],
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5}, "inter_node": {"bandwidth": 1e9, "latency": 1e-5}})";
  const std::string e = kit_test::error_of([&] { pl::read_cluster(dir + "/kit_cluster.json"); });
  EXPECT_NE(e.find("no_such_profile.json"), std::string::npos) << e;
  std::remove((dir + "/kit_profile.json").c_str());
  std::remove((dir + "/kit_cluster.json").c_str());
}

TEST(PlannerSearch, AProfiledStepAddsTheOptimizerAndPricesEachMicroBatchSize) {
  // One device, both layers on it: per micro-batch of 1 sequence (100 tokens) 44 ms, of 3
  // sequences (300 tokens) 100 ms: the larger size is faster per sequence.
  json cj = json::parse(R"({"name": "one", "device_types": {"X": {"flops": 1e12, "memory_bytes": 1e12}},
      "nodes": [{"device_type": "X", "devices": 1}],
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5}, "inter_node": {"bandwidth": 1e9, "latency": 1e-5}})");
  pl::Cluster c = pl::cluster_from_json(cj);
  c.device_types["X"] = profiled();
  // Counting FLOPs, every size costs the same per token: the search cannot tell them apart.
  pl::Cluster flops_only = c;
  flops_only.device_types["X"].profile = nullptr;
  pl::Strategy s;
  s.micro_batch = 1;
  s.layers_per_stage = {2};
  pl::Strategy three = s;
  three.micro_batch = 3;
  pl::SearchOptions o;
  o.recompute = {false};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("one", pl::strategy_cost(c, two_layers(), {3, 100}, s));
    out.put("three", pl::strategy_cost(c, two_layers(), {3, 100}, three));
    out.put("all", pl::search(c, two_layers(), {3, 100}, o));
    out.put("flops", pl::search(flops_only, two_layers(), {3, 100}, o));
  });
  if (!judge::judging()) return;
  const pl::Cost one = got.get<pl::Cost>("one");
  EXPECT_NEAR(one.optimizer, 0.003, 1e-12);
  EXPECT_NEAR(one.total, 3 * 0.044 + 0.003, 1e-12);  // m = 3 micro-batches, then the step
  EXPECT_NEAR(got.get<pl::Cost>("three").total, 0.100 + 0.003, 1e-12);
  const std::vector<pl::Cost> all = got.get<std::vector<pl::Cost>>("all");
  ASSERT_EQ(all.size(), 2u);  // micro-batch sizes 1 and 3
  EXPECT_EQ(all[0].strategy.micro_batch, 3);
  const std::vector<pl::Cost> flops = got.get<std::vector<pl::Cost>>("flops");
  ASSERT_EQ(flops.size(), 2u);
  EXPECT_NEAR(flops[0].total, flops[1].total, 1e-12);
}

TEST(PlannerSearch, AProfileWithTheAllReducesReplacesTheTensorTerm) {
  // Measured with its t ranks together, a layer's time holds its all-reduces: the tensor term
  // is not added again, and a node that shares processors slows it only beyond those t ranks.
  json cj = json::parse(R"({"name": "two", "device_types": {"X": {"flops": 1e12, "memory_bytes": 1e12}},
      "nodes": [{"device_type": "X", "devices": 2}],
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5}, "inter_node": {"bandwidth": 1e9, "latency": 1e-5}})");
  pl::Cluster c = pl::cluster_from_json(cj);
  json pj = profile_json();
  c.device_types["X"] = profiled(pj);
  pj["tensor_parallel_included"] = true;
  pl::Cluster included = c;
  included.device_types["X"] = profiled(pj);
  cj["nodes"][0]["shared_flops"] = 1e12;  // one at a time: but the profile ran its 2 ranks together
  pl::Cluster shared = pl::cluster_from_json(cj);
  shared.device_types["X"] = profiled(pj);
  pl::Strategy s;
  s.tp = 2, s.micro_batch = 1, s.layers_per_stage = {2};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("without", pl::strategy_cost(c, two_layers(), {1, 100}, s));
    out.put("with", pl::strategy_cost(included, two_layers(), {1, 100}, s));
    out.put("shared", pl::strategy_cost(shared, two_layers(), {1, 100}, s));
  });
  if (!judge::judging()) return;
  const pl::Cost without = got.get<pl::Cost>("without");
  EXPECT_GT(without.tensor, 0.0);  // compute measured alone: the all-reduces on the link
  EXPECT_NEAR(without.total, 0.026 + without.tensor + 0.002, 1e-12);
  const pl::Cost with = got.get<pl::Cost>("with");
  EXPECT_EQ(with.tensor, 0.0);
  EXPECT_NEAR(with.total, 0.026 + 0.002, 1e-12);
  EXPECT_NEAR(got.get<pl::Cost>("shared").total, 0.026 + 0.002, 1e-12);
}
