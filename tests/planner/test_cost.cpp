// Problem 8.1: each term of a strategy's cost against values computed by hand.
// Each case's subject part calls the student's terms and records what they returned (under the
// call's own text); the judge checks the records against the numbers computed by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "judge/judge.h"
#include "kit/errors.h"
#include "planner/cost.h"
#include "planner_test_util.h"

namespace {
namespace pl = kit::planner;

const pl::Link kLink{1e9, 1e-5};  // 1 GB/s, 10 us

using planner_test::expect_kit_error;
using planner_test::two_layers;  // planner_test_util.h: the two layers with round numbers

// Two nodes of four devices; the intra-node link 10x the inter-node one.
pl::Cluster two_nodes() {
  return pl::cluster_from_json(nlohmann::json::parse(R"({"name": "2x4",
      "device_types": {"X": {"flops": 1e12, "memory_bytes": 1e9}},
      "nodes": [{"device_type": "X", "devices": 4}, {"device_type": "X", "devices": 4}],
      "intra_node": {"bandwidth": 1e10, "latency": 1e-6},
      "inter_node": {"bandwidth": 1e9, "latency": 1e-5}})"));
}

}  // namespace

namespace judge = kit::judge;

TEST(PlannerCost, RingAllReduceIsTwoNMinusOneStepsOfAnNthOfTheBuffer) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("ring_all_reduce_seconds(1e6, 4, kLink)", pl::ring_all_reduce_seconds(1e6, 4, kLink));
    out.put("ring_all_reduce_seconds(1e6, 2, kLink)", pl::ring_all_reduce_seconds(1e6, 2, kLink));
    out.put("ring_all_reduce_seconds(1e6, 1, kLink)", pl::ring_all_reduce_seconds(1e6, 1, kLink));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  // n = 4: 6 messages, each rank sends 2 * 3/4 of 1 MB.
  EXPECT_NEAR(v("ring_all_reduce_seconds(1e6, 4, kLink)"), 6 * 1e-5 + 1.5e6 / 1e9, 1e-15);
  EXPECT_NEAR(v("ring_all_reduce_seconds(1e6, 2, kLink)"), 2 * 1e-5 + 1e6 / 1e9, 1e-15);
  EXPECT_EQ(v("ring_all_reduce_seconds(1e6, 1, kLink)"), 0.0);
}

TEST(PlannerCost, PointToPointIsLatencyPlusBytesOverBandwidth) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("p2p_seconds(1e6, kLink)", pl::p2p_seconds(1e6, kLink));
    out.put("p2p_seconds(0, kLink)", pl::p2p_seconds(0, kLink));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  EXPECT_NEAR(v("p2p_seconds(1e6, kLink)"), 1e-5 + 1e-3, 1e-15);
  EXPECT_NEAR(v("p2p_seconds(0, kLink)"), 1e-5, 1e-15);
}

TEST(PlannerCost, ComputeIsThreeForwardsSplitByTensorParallelism) {
  const pl::ModelSpec m = two_layers();
  const pl::DeviceType dev{1e12, 1e9};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("compute_seconds(m, 0, 2, 100, 1, dev)", pl::compute_seconds(m, 0, 2, 100, 1, dev));
    out.put("compute_seconds(m, 0, 2, 100, 2, dev)", pl::compute_seconds(m, 0, 2, 100, 2, dev));
    out.put("compute_seconds(m, 1, 2, 100, 2, dev)", pl::compute_seconds(m, 1, 2, 100, 2, dev));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  EXPECT_NEAR(v("compute_seconds(m, 0, 2, 100, 1, dev)"), 3 * 4e9 * 100 / 1e12, 1e-12);  // 1.2 s
  EXPECT_NEAR(v("compute_seconds(m, 0, 2, 100, 2, dev)"), 0.6, 1e-12);
  EXPECT_NEAR(v("compute_seconds(m, 1, 2, 100, 2, dev)"), 3 * 3e9 * 100 / 2 / 1e12, 1e-12);  // layer b only
}

TEST(PlannerCost, TensorParallelAllReducesEachLayersOutputOnItsLink) {
  const pl::ModelSpec m = two_layers();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("tensor_parallel_seconds(m, 0, 2, 100, 2, kLink)", pl::tensor_parallel_seconds(m, 0, 2, 100, 2, kLink));
    out.put("tensor_parallel_seconds(m, 1, 2, 100, 2, kLink)", pl::tensor_parallel_seconds(m, 1, 2, 100, 2, kLink));
    out.put("tensor_parallel_seconds(m, 0, 2, 100, 1, kLink)", pl::tensor_parallel_seconds(m, 0, 2, 100, 1, kLink));
    // Layer a's output ten times layer b's: each layer's all-reduces carry its own output.
    pl::ModelSpec uneven = m;
    uneven.layers[0].output_bytes_per_token = 4000;
    out.put("tensor_parallel_seconds(uneven, 0, 2, 100, 2, kLink)",
            pl::tensor_parallel_seconds(uneven, 0, 2, 100, 2, kLink));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  // 100 tokens x 400 bytes = 40 kB per all-reduce; t = 2: 2 messages, each rank sends 40 kB.
  const double one = 2 * 1e-5 + 40e3 / 1e9;
  EXPECT_NEAR(v("tensor_parallel_seconds(m, 0, 2, 100, 2, kLink)"), 5 * one, 1e-15);  // 4 + 1 all-reduces
  EXPECT_NEAR(v("tensor_parallel_seconds(m, 1, 2, 100, 2, kLink)"), one, 1e-15);
  EXPECT_EQ(v("tensor_parallel_seconds(m, 0, 2, 100, 1, kLink)"), 0.0);  // no tensor parallelism
  // Layer a: 4 all-reduces of 400 kB; layer b: 1 of 40 kB.
  EXPECT_NEAR(v("tensor_parallel_seconds(uneven, 0, 2, 100, 2, kLink)"), 4 * (2 * 1e-5 + 400e3 / 1e9) + one, 1e-15)
      << "each layer's all-reduces are of that layer's output (layer a outputs 4000 bytes per token, b 400)";
}

TEST(PlannerCost, BubbleOfEachSchedule) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("bubble_fraction(4, 8, gpipe)", pl::bubble_fraction(4, 8, pl::Schedule::gpipe));
    out.put("bubble_fraction(4, 8, one_f_one_b)", pl::bubble_fraction(4, 8, pl::Schedule::one_f_one_b));
    out.put("bubble_fraction(4, 8, interleaved, 2)", pl::bubble_fraction(4, 8, pl::Schedule::interleaved, 2));
    out.put("bubble_fraction(2, 1, one_f_one_b)", pl::bubble_fraction(2, 1, pl::Schedule::one_f_one_b));
    out.put("bubble_fraction(1, 8, one_f_one_b)", pl::bubble_fraction(1, 8, pl::Schedule::one_f_one_b));
    out.outcome("bubble_fraction(0, 8, gpipe)", [&] { pl::bubble_fraction(0, 8, pl::Schedule::gpipe); });
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  // p = 4, m = 8 (../../shared/SPEC.md): 3 idle slots in 11, for GPipe and 1F1B alike.
  EXPECT_NEAR(v("bubble_fraction(4, 8, gpipe)"), 3.0 / 11, 1e-15);
  EXPECT_NEAR(v("bubble_fraction(4, 8, one_f_one_b)"), 3.0 / 11, 1e-15);
  EXPECT_NEAR(v("bubble_fraction(4, 8, interleaved, 2)"), 3.0 / 19, 1e-15);
  EXPECT_NEAR(v("bubble_fraction(2, 1, one_f_one_b)"), 0.5, 1e-15);
  EXPECT_EQ(v("bubble_fraction(1, 8, one_f_one_b)"), 0.0);
  expect_kit_error(got.get<judge::Outcome>("bubble_fraction(0, 8, gpipe)"), "bubble_fraction(0, 8, gpipe)");
}

TEST(PlannerCost, PipelineIsAmpsFormula) {
  const std::vector<double> even(4, 3.0);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("pipeline_seconds(even, 8, gpipe)", pl::pipeline_seconds(even, 8, pl::Schedule::gpipe));
    out.put("pipeline_seconds(even, 8, one_f_one_b)", pl::pipeline_seconds(even, 8, pl::Schedule::one_f_one_b));
    out.put("pipeline_seconds(even, 8, interleaved, 2)",
            pl::pipeline_seconds(even, 8, pl::Schedule::interleaved, 2));
    out.put("pipeline_seconds({1, 2, 1.5}, 4, one_f_one_b)",
            pl::pipeline_seconds({1, 2, 1.5}, 4, pl::Schedule::one_f_one_b));
    out.put("pipeline_seconds({1, 2, 1.5}, 4, interleaved, 2)",
            pl::pipeline_seconds({1, 2, 1.5}, 4, pl::Schedule::interleaved, 2));
    out.put("pipeline_seconds({0.25}, 4, one_f_one_b)", pl::pipeline_seconds({0.25}, 4, pl::Schedule::one_f_one_b));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  // SPEC's check: p = 4, m = 8, F = 1, B = 2 -> 33 for GPipe and 1F1B, 28.5 interleaved v = 2.
  EXPECT_NEAR(v("pipeline_seconds(even, 8, gpipe)"), 33, 1e-12);
  EXPECT_NEAR(v("pipeline_seconds(even, 8, one_f_one_b)"), 33, 1e-12);
  EXPECT_NEAR(v("pipeline_seconds(even, 8, interleaved, 2)"), 28.5, 1e-12);
  // Uneven stages: the slowest sets the pace, the others count once (fill and drain).
  EXPECT_NEAR(v("pipeline_seconds({1, 2, 1.5}, 4, one_f_one_b)"), 3 * 2 + 4.5, 1e-12);
  EXPECT_NEAR(v("pipeline_seconds({1, 2, 1.5}, 4, interleaved, 2)"), 4 * 2 + 2.5 / 2, 1e-12);
  EXPECT_NEAR(v("pipeline_seconds({0.25}, 4, one_f_one_b)"), 1.0, 1e-12);  // one stage: m x T
}

TEST(PlannerCost, DataParallelUsesTheLinkItsGroupSpans) {
  const pl::Cluster c = two_nodes();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("data_parallel_seconds(1e6, {0, 1, 2, 3}, c)", pl::data_parallel_seconds(1e6, {0, 1, 2, 3}, c));
    out.put("data_parallel_seconds(1e6, {4, 5}, c)", pl::data_parallel_seconds(1e6, {4, 5}, c));
    out.put("data_parallel_seconds(1e6, {2, 3, 4, 5}, c)", pl::data_parallel_seconds(1e6, {2, 3, 4, 5}, c));
    out.put("data_parallel_seconds(1e6, {6}, c)", pl::data_parallel_seconds(1e6, {6}, c));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  // Inside node 0: the fast link (3 x 1 us + 1.5 MB / 10 GB/s each way... 6 messages).
  EXPECT_NEAR(v("data_parallel_seconds(1e6, {0, 1, 2, 3}, c)"), 6 * 1e-6 + 1.5e6 / 1e10, 1e-15);
  EXPECT_NEAR(v("data_parallel_seconds(1e6, {4, 5}, c)"), 2 * 1e-6 + 1e6 / 1e10, 1e-15);  // inside node 1
  // Across the nodes: the slow link, though 3 of the 4 hops are inside a node.
  EXPECT_NEAR(v("data_parallel_seconds(1e6, {2, 3, 4, 5}, c)"), 6 * 1e-5 + 1.5e6 / 1e9, 1e-15);
  EXPECT_EQ(v("data_parallel_seconds(1e6, {6}, c)"), 0.0);
}

TEST(PlannerCost, TensorParallelOnFourAndEightRanks) {
  const pl::ModelSpec m = two_layers();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("tensor_parallel_seconds(m, 0, 2, 100, 4, kLink)", pl::tensor_parallel_seconds(m, 0, 2, 100, 4, kLink));
    out.put("tensor_parallel_seconds(m, 0, 1, 100, 8, kLink)", pl::tensor_parallel_seconds(m, 0, 1, 100, 8, kLink));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  // Where 2(t - 1)/t is not 1: t = 4 sends 6/4 of the 40 kB in 6 messages, t = 8 14/8 in 14.
  const double four = 6 * 1e-5 + 1.5 * 40e3 / 1e9, eight = 14 * 1e-5 + 1.75 * 40e3 / 1e9;
  EXPECT_NEAR(v("tensor_parallel_seconds(m, 0, 2, 100, 4, kLink)"), 5 * four, 1e-15);
  EXPECT_NEAR(v("tensor_parallel_seconds(m, 0, 1, 100, 8, kLink)"), 4 * eight, 1e-15);
}

TEST(PlannerCost, InterleavedInFlightIsCappedByTheMicroBatches) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const int64_t stage : {0, 1, 3})
      out.put("in_flight_micro_batches(" + std::to_string(stage) + ", 4, 4, interleaved, 2)",
              pl::in_flight_micro_batches(stage, 4, 4, pl::Schedule::interleaved, 2));
    for (const int64_t stage : {0, 1})
      out.put("in_flight_micro_batches(" + std::to_string(stage) + ", 2, 8, interleaved, 4)",
              pl::in_flight_micro_batches(stage, 2, 8, pl::Schedule::interleaved, 4));
    for (const int64_t stage : {0, 1, 2})
      out.put("in_flight_micro_batches(" + std::to_string(stage) + ", 3, 6, interleaved, 2)",
              pl::in_flight_micro_batches(stage, 3, 6, pl::Schedule::interleaved, 2));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<int64_t>(call); };
  // p = 4, v = 2, m = 4: rank 0 would hold 6 micro-batches' worth (11 chunks) and rank 1 5
  // (9 chunks), but there are only 4; rank 3 holds 3 (5 chunks).
  EXPECT_EQ(v("in_flight_micro_batches(0, 4, 4, interleaved, 2)"), 4);
  EXPECT_EQ(v("in_flight_micro_batches(1, 4, 4, interleaved, 2)"), 4);
  EXPECT_EQ(v("in_flight_micro_batches(3, 4, 4, interleaved, 2)"), 3);
  // p = 2, v = 4, m = 8: rank 0 warms up 2 + 3 x 2 = 8 chunks and holds 9, a quarter of its
  // layers each: 2.25, rounded up; rank 1: 6 + 1 = 7 chunks, 1.75: 2.
  EXPECT_EQ(v("in_flight_micro_batches(0, 2, 8, interleaved, 4)"), 3);
  EXPECT_EQ(v("in_flight_micro_batches(1, 2, 8, interleaved, 4)"), 2);
  // p = 3 (odd), v = 2, m = 6: ranks 0, 1, 2 hold 8, 6 and 4 chunks (schedule --kind interleaved
  // -p 3 -m 6 -v 2), half their layers each: exactly 4, 3 and 2 micro-batches, rounded up to
  // nothing more.
  EXPECT_EQ(v("in_flight_micro_batches(0, 3, 6, interleaved, 2)"), 4);
  EXPECT_EQ(v("in_flight_micro_batches(1, 3, 6, interleaved, 2)"), 3);
  EXPECT_EQ(v("in_flight_micro_batches(2, 3, 6, interleaved, 2)"), 2);
}

TEST(PlannerCost, MicroBatchesInFlightOfEachSchedule) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::vector<int64_t> gpipe, one_f_one_b;
    for (int64_t s = 0; s < 4; ++s) gpipe.push_back(pl::in_flight_micro_batches(s, 4, 8, pl::Schedule::gpipe));
    for (int64_t s = 0; s < 4; ++s)
      one_f_one_b.push_back(pl::in_flight_micro_batches(s, 4, 8, pl::Schedule::one_f_one_b));
    out.put("in_flight_micro_batches(s, 4, 8, gpipe) for s = 0..3", gpipe);
    out.put("in_flight_micro_batches(s, 4, 8, one_f_one_b) for s = 0..3", one_f_one_b);
    out.put("in_flight_micro_batches(0, 4, 2, one_f_one_b)", pl::in_flight_micro_batches(0, 4, 2, pl::Schedule::one_f_one_b));
    std::vector<int64_t> few;
    for (int64_t s = 0; s < 4; ++s) few.push_back(pl::in_flight_micro_batches(s, 4, 2, pl::Schedule::one_f_one_b));
    out.put("in_flight_micro_batches(s, 4, 2, one_f_one_b) for s = 0..3", few);
    out.put("in_flight_micro_batches(0, 4, 8, interleaved, 2)",
            pl::in_flight_micro_batches(0, 4, 8, pl::Schedule::interleaved, 2));
    out.put("in_flight_micro_batches(3, 4, 8, interleaved, 2)",
            pl::in_flight_micro_batches(3, 4, 8, pl::Schedule::interleaved, 2));
    out.outcome("in_flight_micro_batches(4, 4, 8, gpipe)", [&] { pl::in_flight_micro_batches(4, 4, 8, pl::Schedule::gpipe); });
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<int64_t>(call); };
  const auto gpipe = got.get<std::vector<int64_t>>("in_flight_micro_batches(s, 4, 8, gpipe) for s = 0..3");
  const auto ofob = got.get<std::vector<int64_t>>("in_flight_micro_batches(s, 4, 8, one_f_one_b) for s = 0..3");
  ASSERT_EQ(gpipe.size(), 4u);
  ASSERT_EQ(ofob.size(), 4u);
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(gpipe[s], 8) << "in_flight_micro_batches(" << s << ", 4, 8, gpipe)";
  const std::vector<int64_t> one_f_one_b{4, 3, 2, 1};  // SPEC: peak in-flight p - r
  for (size_t s = 0; s < 4; ++s)
    EXPECT_EQ(ofob[s], one_f_one_b[s]) << "in_flight_micro_batches(" << s << ", 4, 8, one_f_one_b)";
  EXPECT_EQ(v("in_flight_micro_batches(0, 4, 2, one_f_one_b)"), 2);  // fewer micro-batches than stages
  // Fewer micro-batches than stages, on every stage: min(p - s, m), so the last stage holds 1.
  EXPECT_EQ(got.get<std::vector<int64_t>>("in_flight_micro_batches(s, 4, 2, one_f_one_b) for s = 0..3"),
            (std::vector<int64_t>{2, 2, 2, 1}))
      << "1F1B with m = 2 micro-batches on p = 4 stages: stage s holds min(p - s, m)";
  // Interleaved, p = 4, v = 2: rank 0 warms up 2 * 3 + 4 = 10 chunks, holds 11, half its layers
  // each: 5.5 micro-batches, rounded up. Rank 3: 4 + 1 = 5 chunks: 3.
  EXPECT_EQ(v("in_flight_micro_batches(0, 4, 8, interleaved, 2)"), 6);
  EXPECT_EQ(v("in_flight_micro_batches(3, 4, 8, interleaved, 2)"), 3);
  expect_kit_error(got.get<judge::Outcome>("in_flight_micro_batches(4, 4, 8, gpipe)"),
                   "in_flight_micro_batches(4, 4, 8, gpipe)");
}

TEST(PlannerCost, MemoryPerRankWithAndWithoutZeroAndActivationsInFlight) {
  const pl::ModelSpec m = two_layers();
  pl::Strategy s;
  s.dp = 2, s.pp = 2, s.tp = 2, s.schedule = pl::Schedule::one_f_one_b;
  pl::Strategy gpipe = s;
  gpipe.schedule = pl::Schedule::gpipe;
  pl::Strategy zero1 = s, zero2 = s;
  zero1.zero_stage = 1;  // the moments sharded over d = 2
  zero2.zero_stage = 2;  // and the gradients
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("memory_per_rank(m, 0, 2, 8, s, 0, 4)", pl::memory_per_rank(m, 0, 2, 8, s, 0, 4));
    out.put("memory_per_rank(m, 0, 2, 8, s, 1, 4)", pl::memory_per_rank(m, 0, 2, 8, s, 1, 4));
    out.put("memory_per_rank(m, 0, 2, 8, s, 1, 4), GPipe", pl::memory_per_rank(m, 0, 2, 8, gpipe, 1, 4));
    out.put("memory_per_rank(m, 0, 2, 8, s, 0, 4), ZeRO 1", pl::memory_per_rank(m, 0, 2, 8, zero1, 0, 4));
    out.put("memory_per_rank(m, 1, 2, 8, s, 0, 4), ZeRO 2", pl::memory_per_rank(m, 1, 2, 8, zero2, 0, 4));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<pl::Memory>(call); };
  // Stage 0 holds both layers here; 400 parameter bytes / t = 200 per rank.
  pl::Memory mem = v("memory_per_rank(m, 0, 2, 8, s, 0, 4)");
  EXPECT_DOUBLE_EQ(mem.parameters, 200);
  EXPECT_DOUBLE_EQ(mem.gradients, 200);
  EXPECT_DOUBLE_EQ(mem.optimizer, 400);  // AdamW's two moments
  // 40 bytes per token x 8 tokens / t = 160 per micro-batch; stage 0 of 2 holds 2 of them.
  EXPECT_DOUBLE_EQ(mem.activations, 320);
  EXPECT_DOUBLE_EQ(mem.total(), 1120);
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 0, 2, 8, s, 1, 4)").activations, 160);  // the last stage: 1
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 0, 2, 8, s, 1, 4), GPipe").activations, 640);  // GPipe keeps all 4
  // ZeRO 1: the moments sharded over d = 2.
  mem = v("memory_per_rank(m, 0, 2, 8, s, 0, 4), ZeRO 1");
  EXPECT_DOUBLE_EQ(mem.optimizer, 200);
  EXPECT_DOUBLE_EQ(mem.gradients, 200);
  // ZeRO 2: and the gradients.
  mem = v("memory_per_rank(m, 1, 2, 8, s, 0, 4), ZeRO 2");
  EXPECT_DOUBLE_EQ(mem.parameters, 150);
  EXPECT_DOUBLE_EQ(mem.gradients, 75);
  EXPECT_DOUBLE_EQ(mem.optimizer, 150);
}

TEST(PlannerCost, MemoryOfALaterLayerOnFourTensorRanksInterleaved) {
  // Layer b alone (300 parameter bytes, 30 activation bytes per token), t = 4, d = 1, p = 4,
  // interleaved with v = 2, 8 tokens per micro-batch, m = 8.
  const pl::ModelSpec m = two_layers();
  pl::Strategy s;
  s.dp = 1, s.pp = 4, s.tp = 4, s.schedule = pl::Schedule::interleaved, s.virtual_chunks = 2;
  pl::Strategy zero = s;
  zero.dp = 4, zero.zero_stage = 2;  // the moments and the gradients sharded over d = 4
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("memory_per_rank(m, 1, 2, 8, s, 0, 8)", pl::memory_per_rank(m, 1, 2, 8, s, 0, 8));
    out.put("memory_per_rank(m, 1, 2, 8, s, 3, 8)", pl::memory_per_rank(m, 1, 2, 8, s, 3, 8));
    out.put("memory_per_rank(m, 1, 2, 8, s, 0, 8), d = 4, ZeRO 2", pl::memory_per_rank(m, 1, 2, 8, zero, 0, 8));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<pl::Memory>(call); };
  pl::Memory mem = v("memory_per_rank(m, 1, 2, 8, s, 0, 8)");
  EXPECT_DOUBLE_EQ(mem.parameters, 75);
  EXPECT_DOUBLE_EQ(mem.gradients, 75);
  EXPECT_DOUBLE_EQ(mem.optimizer, 150);
  // 30 x 8 / 4 = 60 bytes per micro-batch; rank 0 holds 6 of them (11 chunks of half its layers).
  EXPECT_DOUBLE_EQ(mem.activations, 360);
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 1, 2, 8, s, 3, 8)").activations, 180);  // rank 3: 3
  // d = 4, ZeRO 2: the moments and the gradients sharded over d = 4.
  mem = v("memory_per_rank(m, 1, 2, 8, s, 0, 8), d = 4, ZeRO 2");
  EXPECT_DOUBLE_EQ(mem.gradients, 18.75);
  EXPECT_DOUBLE_EQ(mem.optimizer, 37.5);
  EXPECT_DOUBLE_EQ(mem.activations, 360);  // data parallelism keeps the activations per rank
}

TEST(PlannerCost, ComputeWithRecomputationIsFourForwards) {
  // Recomputation runs the forward once more in the backward: 4 x forward FLOPs, not 3.
  const pl::ModelSpec m = planner_test::three_layers();  // 1e9 + 2e9 + 3e9 = 6e9 FLOPs per token
  const pl::DeviceType dev{1e12, 1e9};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("compute_seconds(m, 0, 3, 10, 1, dev)", pl::compute_seconds(m, 0, 3, 10, 1, dev));
    out.put("compute_seconds(m, 0, 3, 10, 1, dev, false)", pl::compute_seconds(m, 0, 3, 10, 1, dev, false));
    out.put("compute_seconds(m, 0, 3, 10, 1, dev, true)", pl::compute_seconds(m, 0, 3, 10, 1, dev, true));
    out.put("compute_seconds(m, 0, 3, 10, 2, dev, true)", pl::compute_seconds(m, 0, 3, 10, 2, dev, true));
    out.put("compute_seconds(m, 1, 3, 10, 1, dev, true)", pl::compute_seconds(m, 1, 3, 10, 1, dev, true));
    out.put("compute_seconds(m, 2, 3, 100, 4, dev, true)", pl::compute_seconds(m, 2, 3, 100, 4, dev, true));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<double>(call); };
  EXPECT_NEAR(v("compute_seconds(m, 0, 3, 10, 1, dev)"), 3 * 6e9 * 10 / 1e12, 1e-12);         // 0.18 s
  EXPECT_NEAR(v("compute_seconds(m, 0, 3, 10, 1, dev, false)"), 0.18, 1e-12);                 // the default
  EXPECT_NEAR(v("compute_seconds(m, 0, 3, 10, 1, dev, true)"), 4 * 6e9 * 10 / 1e12, 1e-12);   // 0.24 s
  EXPECT_NEAR(v("compute_seconds(m, 0, 3, 10, 2, dev, true)"), 0.12, 1e-12);                  // split t = 2
  EXPECT_NEAR(v("compute_seconds(m, 1, 3, 10, 1, dev, true)"), 4 * 5e9 * 10 / 1e12, 1e-12);   // f, g: 0.2 s
  EXPECT_NEAR(v("compute_seconds(m, 2, 3, 100, 4, dev, true)"), 4 * 3e9 * 100 / 4 / 1e12, 1e-12);  // 0.3 s
}

TEST(PlannerCost, MemoryWithRecomputationKeepsTheInputsAndOneLayer) {
  // 10 tokens per micro-batch; p = 2, 1F1B, m = 4: stage 0 holds min(2 - 0, 4) = 2 micro-batches
  // in flight, stage 1 holds 1.
  const pl::ModelSpec m = planner_test::three_layers();
  pl::Strategy s;
  s.dp = 1, s.pp = 2, s.tp = 1, s.schedule = pl::Schedule::one_f_one_b;
  pl::Strategy rc = s;
  rc.recompute = true;
  pl::Strategy rc_t2 = rc, t2 = s;
  rc_t2.tp = 2, t2.tp = 2;
  pl::Strategy rc_gpipe = rc;
  rc_gpipe.schedule = pl::Schedule::gpipe;
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.put("memory_per_rank(m, 0, 3, 10, s, 0, 4)", pl::memory_per_rank(m, 0, 3, 10, s, 0, 4));
    out.put("memory_per_rank(m, 0, 3, 10, s, 0, 4), recompute", pl::memory_per_rank(m, 0, 3, 10, rc, 0, 4));
    out.put("memory_per_rank(m, 1, 3, 10, s, 1, 4), recompute", pl::memory_per_rank(m, 1, 3, 10, rc, 1, 4));
    out.put("memory_per_rank(m, 2, 3, 10, s, 0, 4), recompute, t = 2", pl::memory_per_rank(m, 2, 3, 10, rc_t2, 0, 4));
    out.put("memory_per_rank(m, 2, 3, 10, s, 0, 4), t = 2", pl::memory_per_rank(m, 2, 3, 10, t2, 0, 4));
    out.put("memory_per_rank(m, 0, 3, 10, s, 0, 4), recompute, GPipe",
            pl::memory_per_rank(m, 0, 3, 10, rc_gpipe, 0, 4));
  });
  if (!judge::judging()) return;
  const auto v = [&](const char* call) { return got.get<pl::Memory>(call); };
  // Without recomputation, all three layers on stage 0: (20 + 50 + 40) x 10 x 2 = 2200.
  const pl::Memory off = v("memory_per_rank(m, 0, 3, 10, s, 0, 4)");
  EXPECT_DOUBLE_EQ(off.activations, 2200);
  const pl::Memory on = v("memory_per_rank(m, 0, 3, 10, s, 0, 4), recompute");
  // With it: each layer's input, the output of the layer before (e's input, the tokens: 0):
  // (0 + 8 + 4) x 10 x 2 micro-batches = 240; plus f's whole 50 x 10 = 500 once (the largest
  // layer, run again in the backward): 740.
  EXPECT_DOUBLE_EQ(on.activations, 740);
  // Parameters, gradients and moments do not change: 600, 600, 1200.
  EXPECT_DOUBLE_EQ(on.parameters, 600);
  EXPECT_DOUBLE_EQ(on.gradients, 600);
  EXPECT_DOUBLE_EQ(on.optimizer, 1200);
  EXPECT_DOUBLE_EQ(on.total(), 3140);
  EXPECT_DOUBLE_EQ(off.total(), 4600);
  // Layers f and g on stage 1 (1 in flight): inputs (8 + 4) x 10 = 120, plus f's 500: 620
  // (without: (50 + 40) x 10 = 900). f's input is e's output though e is on another stage.
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 1, 3, 10, s, 1, 4), recompute").activations, 620);
  // Layer g alone on stage 0, t = 2: input 4 x 10 / 2 x 2 = 40, plus g's 40 x 10 / 2 = 200: 240
  // (without: 40 x 10 / 2 x 2 = 400).
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 2, 3, 10, s, 0, 4), recompute, t = 2").activations, 240);
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 2, 3, 10, s, 0, 4), t = 2").activations, 400);
  // GPipe keeps all m = 4 inputs: layers e, f, g, t = 1: 12 x 10 x 4 + 500 = 980.
  EXPECT_DOUBLE_EQ(v("memory_per_rank(m, 0, 3, 10, s, 0, 4), recompute, GPipe").activations, 980);
}
