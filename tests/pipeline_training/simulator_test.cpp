// The given code around Problem 3.1: the simulator (deadlocks, completeness, costs, the
// table and JSON of a timeline) and the shape checks and names of schedules. These tests
// replay the test side's reference schedules (reference_schedules.h), never the student's,
// so they hold in the starter too.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "reference_schedules.h"
#include "schedule_test_util.h"

namespace {

using namespace pp_test;  // schedule_test_util.h and reference_schedules.h, with kit::pp's types

Costs costs(double forward, double backward, double comm = 0) {
  Costs c;
  c.forward = forward;
  c.backward = backward;
  c.comm = comm;
  return c;
}

// ---- reference facts, with the reference schedules -----------------------------------

TEST(Simulator, SpecFactsFourRanksEightMicrobatches) {
  const Timeline gpipe = kit::pp::simulate(pp_test::ref_all_gpipe(4, 8), {4, 8, 1}, costs(1, 2));
  const Timeline one_f_one_b = kit::pp::simulate(pp_test::ref_all_1f1b(4, 8), {4, 8, 1}, costs(1, 2));
  const Timeline interleaved = kit::pp::simulate(pp_test::ref_all_interleaved(4, 8, 2), {4, 8, 2}, costs(1, 2));
  EXPECT_DOUBLE_EQ(gpipe.makespan, 33);
  EXPECT_DOUBLE_EQ(one_f_one_b.makespan, 33);
  EXPECT_DOUBLE_EQ(interleaved.makespan, 28.5) << "one chunk's action costs F/v, B/v";
  EXPECT_EQ(gpipe.peak_in_flight, (std::vector<int64_t>{8, 8, 8, 8}));
  EXPECT_EQ(one_f_one_b.peak_in_flight, (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(interleaved.peak_in_flight, (std::vector<int64_t>{11, 9, 7, 5}));
}

TEST(Simulator, GPipeBubbleIsPMinusOneOverMPlusPMinusOne) {
  for (int64_t p = 1; p <= 6; ++p)
    for (int64_t m = 1; m <= 10; ++m) {
      const Timeline t = kit::pp::simulate(pp_test::ref_all_gpipe(p, m), {p, m, 1}, costs(1, 2));
      EXPECT_DOUBLE_EQ(t.makespan, static_cast<double>((m + p - 1) * 3)) << "p = " << p << ", m = " << m;
      EXPECT_NEAR(t.bubble_fraction, static_cast<double>(p - 1) / static_cast<double>(m + p - 1), 1e-12)
          << "p = " << p << ", m = " << m;
    }
}

TEST(Simulator, TimelineHonoursEveryDependency) {
  // p = 2, m = 2 GPipe, F = 1, B = 2: rank 1 starts one forward late; rank 0's backwards
  // wait for rank 1's.
  const Timeline t = kit::pp::simulate(pp_test::ref_all_gpipe(2, 2), {2, 2, 1}, costs(1, 2));
  ASSERT_EQ(t.ranks.size(), 2u);
  const std::vector<double> starts0 = {0, 1, 5, 7}, starts1 = {1, 2, 3, 5};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_DOUBLE_EQ(t.ranks[0].at(k).start, starts0[k]) << "rank 0, action " << k;
    EXPECT_DOUBLE_EQ(t.ranks[1].at(k).start, starts1[k]) << "rank 1, action " << k;
  }
  EXPECT_DOUBLE_EQ(t.makespan, 9);
}

// ---- deadlocks -------------------------------------------------------------------------

TEST(Simulator, NeighboursThatBothWaitToReceiveAreADeadlockNamingRanksAndActions) {
  // Rank 0 wants B0's gradient from rank 1 before it sends F1; rank 1 wants F1 before it
  // does B0. A real run would hang; the simulator must say so, and at once.
  const Schedules s = {parse("F0 B0 F1 B1"), parse("F0 F1 B0 B1")};
  std::string message;
  const std::string outcome = pp_test::run_with_timeout(
      [&] {
        try {
          kit::pp::simulate(s, {2, 2, 1}, costs(1, 2));
        } catch (const kit::Error& e) {
          message = e.what();
          return;
        }
        throw std::runtime_error("no error");
      },
      5);
  ASSERT_EQ(outcome, "") << "simulate must throw kit::Error on a deadlock, not hang or return";
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 B0"), std::string::npos) << "names rank 0's stuck action\n" << message;
  EXPECT_NE(message.find("rank 1 F1"), std::string::npos) << "names rank 1's stuck action\n" << message;
  EXPECT_NE(message.find("waits for B0 of stage 1 on rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("waits for F1 of stage 0 on rank 0"), std::string::npos) << message;
}

TEST(Simulator, BackwardOrdersThatCrossAreADeadlock) {
  // p = 2, v = 2 (stages 0..3 on ranks 0 1 0 1). Rank 0 wants stage 1's B0 before doing
  // B1 on stage 2; rank 1 wants stage 2's B1 before doing B0 on stage 1.
  const Schedules s = {parse("F0 F1 F0.1 F1.1 B0.1 B0 B1.1 B1"), parse("F0 F1 F0.1 F1.1 B0.1 B1.1 B1 B0")};
  std::string message;
  const std::string outcome = pp_test::run_with_timeout([&] { message = error_of([&] { kit::pp::simulate(s, {2, 2, 2}); }); }, 5);
  ASSERT_EQ(outcome, "") << "simulate must not hang on a deadlock";
  EXPECT_NE(message.find("rank 0 B0 "), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1 B1 "), std::string::npos) << message;
  EXPECT_NE(message.find("waits for B1.1 of stage 2 on rank 0"), std::string::npos) << message;
}

TEST(Simulator, DeadlockOfOneRankWithItselfIsNamed) {
  // One rank, two chunks: B0 of chunk 0 needs chunk 1's B0, which comes later on the rank.
  const Schedules s = {parse("F0 F0.1 B0 B0.1")};
  const std::string message = error_of([&] { kit::pp::simulate(s, {1, 1, 2}); });
  EXPECT_NE(message.find("rank 0 B0 "), std::string::npos) << message;
  EXPECT_NE(message.find("later in its own list"), std::string::npos) << message;
}

TEST(Simulator, ShuffledSchedulesFinishOrFailClearlyNeverHang) {
  // Any order of a rank's actions (B after its F, so check_complete passes) must either
  // replay or be reported as a deadlock: never a hang, never another kind of failure.
  std::mt19937 rng(12);
  int deadlocks = 0, finished = 0;
  const std::string outcome = pp_test::run_with_timeout(
      [&] {
        for (int trial = 0; trial < 300; ++trial) {
          Schedules s = pp_test::ref_all_interleaved(3, 3, 2);
          for (auto& list : s) {
            std::shuffle(list.begin(), list.end(), rng);
            for (size_t k = 0; k < list.size(); ++k)  // move each B behind its F
              if (list[k].op == kit::pp::Op::Forward)
                for (size_t j = 0; j < k; ++j)
                  if (list[j] == kit::pp::B(list[k].microbatch, list[k].chunk)) std::swap(list[j], list[k]);
          }
          try {
            kit::pp::simulate(s, {3, 3, 2});
            ++finished;
          } catch (const kit::Error& e) {
            if (std::string(e.what()).find("deadlock") == std::string::npos) throw;
            ++deadlocks;
          }
        }
      },
      20);
  ASSERT_EQ(outcome, "");
  EXPECT_GT(deadlocks, 0) << "some shuffles must deadlock";
  EXPECT_EQ(deadlocks + finished, 300);
}

// ---- completeness -----------------------------------------------------------------------

TEST(Simulator, CheckCompleteAcceptsTheReferenceSchedules) {
  for (int64_t p = 1; p <= 4; ++p)
    for (int64_t m = 1; m <= 8; ++m) {
      EXPECT_NO_THROW(kit::pp::check_complete(pp_test::ref_all_gpipe(p, m), {p, m, 1}));
      EXPECT_NO_THROW(kit::pp::check_complete(pp_test::ref_all_1f1b(p, m), {p, m, 1}));
      if (m % p == 0) {
        EXPECT_NO_THROW(kit::pp::check_complete(pp_test::ref_all_interleaved(p, m, 3), {p, m, 3}));
      }
    }
}

TEST(Simulator, CheckCompleteCatchesMissingDuplicateAndMisplacedActions) {
  const PipelineShape shape{2, 2, 1};
  const auto message = [&](const Schedules& s) { return error_of([&] { kit::pp::check_complete(s, shape); }); };
  const std::string missing = message({parse("F0 F1 B0 B1"), parse("F0 F1 B0")});
  EXPECT_NE(missing.find("rank 1 B1"), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;
  const std::string duplicate = message({parse("F0 F1 F1 B0 B1"), parse("F0 B0 F1 B1")});
  EXPECT_NE(duplicate.find("rank 0 F1"), std::string::npos) << duplicate;
  EXPECT_NE(duplicate.find("twice"), std::string::npos) << duplicate;
  // Rank 1's F1 done by rank 0 instead: rank 0 has it twice.
  const std::string moved = message({parse("F0 F1 B0 F1 B1"), parse("F0 B0 B1")});
  EXPECT_NE(moved.find("rank 0 F1"), std::string::npos) << moved;
  const std::string backward_first = message({parse("F0 F1 B0 B1"), parse("B0 F0 F1 B1")});
  EXPECT_NE(backward_first.find("rank 1 B0"), std::string::npos) << backward_first;
  EXPECT_NE(backward_first.find("before F0"), std::string::npos) << backward_first;
  const std::string bad_chunk = message({parse("F0 F1 B0 B1 F0.1"), parse("F0 F1 B0 B1")});
  EXPECT_NE(bad_chunk.find("chunk 1 is out of range"), std::string::npos) << bad_chunk;
  const std::string bad_microbatch = message({parse("F0 F1 B0 B1 F2"), parse("F0 F1 B0 B1")});
  EXPECT_NE(bad_microbatch.find("micro-batch 2 is out of range"), std::string::npos) << bad_microbatch;
  const std::string ranks = message({parse("F0 F1 B0 B1")});
  EXPECT_NE(ranks.find("1 rank lists for p = 2"), std::string::npos) << ranks;
}

// ---- costs ----------------------------------------------------------------------------

TEST(Simulator, PerStageCostsAreUsedAsIs) {
  Costs c = costs(100, 100);  // ignored: the per-stage lists win
  c.forward_per_stage = {1, 3};
  c.backward_per_stage = {2, 4};
  const Timeline t = kit::pp::simulate(pp_test::ref_all_gpipe(2, 1), {2, 1, 1}, c);
  EXPECT_DOUBLE_EQ(t.makespan, 1 + 3 + 4 + 2);
  // With v = 2 per-stage costs are not divided by v: stages 0..3, F = 1 each, B = 2 each.
  c.forward_per_stage = {1, 1, 1, 1};
  c.backward_per_stage = {2, 2, 2, 2};
  const Timeline interleaved = kit::pp::simulate(pp_test::ref_all_interleaved(2, 2, 2), {2, 2, 2}, c);
  EXPECT_DOUBLE_EQ(interleaved.makespan, kit::pp::simulate(pp_test::ref_all_interleaved(2, 2, 2), {2, 2, 2},
                                                           costs(2, 4)).makespan);
}

TEST(Simulator, ScalarCostsAreSharedByTheChunksOfARank) {
  // One rank, v = 2: each of the 4 actions of one micro-batch costs F/2 or B/2.
  const Timeline t = kit::pp::simulate(pp_test::ref_all_interleaved(1, 1, 2), {1, 1, 2}, costs(1, 2));
  EXPECT_DOUBLE_EQ(t.makespan, 3);
}

TEST(Simulator, CommunicationCostIsPaidBetweenRanksOnly) {
  // p = 2, m = 1: F, send, F, B, send, B.
  EXPECT_DOUBLE_EQ(kit::pp::simulate(pp_test::ref_all_gpipe(2, 1), {2, 1, 1}, costs(1, 2, 0.5)).makespan, 7);
  // One rank with two chunks sends nothing.
  EXPECT_DOUBLE_EQ(kit::pp::simulate(pp_test::ref_all_interleaved(1, 1, 2), {1, 1, 2}, costs(1, 2, 0.5)).makespan, 3);
}

TEST(Simulator, BadCostsAreClearErrors) {
  Costs c = costs(1, 2);
  c.forward_per_stage = {1, 1, 1};
  const std::string wrong_size = error_of([&] { kit::pp::simulate(pp_test::ref_all_gpipe(2, 1), {2, 1, 1}, c); });
  EXPECT_NE(wrong_size.find("forward_per_stage has 3 entries"), std::string::npos) << wrong_size;
  const std::string negative =
      error_of([&] { kit::pp::simulate(pp_test::ref_all_gpipe(2, 1), {2, 1, 1}, costs(1, -2)); });
  EXPECT_NE(negative.find("backward"), std::string::npos) << negative;
}

// ---- table and JSON ---------------------------------------------------------------------

TEST(Simulator, FormatTimelineShowsOneRowPerRankAndTheSummary) {
  const Timeline t = kit::pp::simulate(pp_test::ref_all_1f1b(2, 2), {2, 2, 1}, costs(1, 2));
  const std::string table = kit::pp::format_timeline(t);
  // Rank 0 waits 2 units for B0's gradient and 1 for B1's; a backward fills two columns.
  EXPECT_NE(table.find("rank 0 | F0 F1       B0 B0    B1 B1\n"), std::string::npos) << table;
  EXPECT_NE(table.find("rank 1 |    F0 B0 B0 F1 B1 B1\n"), std::string::npos) << table;
  EXPECT_NE(table.find("makespan 9, bubble 33.3 %"), std::string::npos) << table;
  EXPECT_NE(table.find("peak in-flight"), std::string::npos) << table;
}

TEST(Simulator, TimelineJsonRoundTrips) {
  const Timeline t = kit::pp::simulate(pp_test::ref_all_interleaved(2, 4, 2), {2, 4, 2}, costs(1, 2, 0.25));
  const nlohmann::json j = kit::pp::timeline_to_json(t);
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["virtual_chunks"], 2);
  const Timeline back = kit::pp::timeline_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(kit::pp::timeline_to_json(back), j);
  EXPECT_DOUBLE_EQ(back.makespan, t.makespan);
  EXPECT_EQ(back.peak_in_flight, t.peak_in_flight);
}

TEST(Simulator, BadTimelineJsonIsAClearError) {
  nlohmann::json j = kit::pp::timeline_to_json(kit::pp::simulate(pp_test::ref_all_gpipe(2, 1), {2, 1, 1}));
  nlohmann::json no_ranks = j;
  no_ranks.erase("ranks");
  EXPECT_NE(error_of([&] { kit::pp::timeline_from_json(no_ranks); }).find("\"ranks\""), std::string::npos);
  nlohmann::json short_timeline = j;
  short_timeline["timeline"].erase(1);
  EXPECT_NE(error_of([&] { kit::pp::timeline_from_json(short_timeline); }).find("one list of actions per rank"),
            std::string::npos);
  nlohmann::json bad_op = j;
  bad_op["timeline"][0][0]["op"] = "X";
  EXPECT_NE(error_of([&] { kit::pp::timeline_from_json(bad_op); }).find("\"op\" must be"), std::string::npos);
  nlohmann::json no_end = j;
  no_end["timeline"][0][0].erase("end");
  EXPECT_NE(error_of([&] { kit::pp::timeline_from_json(no_end); }).find("\"end\""), std::string::npos);
}

// ---- shapes, names -----------------------------------------------------------------------

TEST(ScheduleShape, UnsupportedInterleavedShapesAreClearErrors) {
  const auto message = [](PipelineShape s) {
    return error_of([&] { kit::pp::check_shape(ScheduleKind::Interleaved, s); });
  };
  const std::string not_multiple = message({4, 6, 2});
  EXPECT_NE(not_multiple.find("multiple of p"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("m = 6"), std::string::npos) << not_multiple;
  EXPECT_NE(not_multiple.find("m = 4 or 8"), std::string::npos) << "suggests what works\n" << not_multiple;
  const std::string too_few = message({4, 2, 2});
  EXPECT_NE(too_few.find("use m = 4"), std::string::npos) << too_few;
  const std::string one_chunk = message({2, 4, 1});
  EXPECT_NE(one_chunk.find("v >= 2"), std::string::npos) << one_chunk;
  EXPECT_NO_THROW(kit::pp::check_shape(ScheduleKind::Interleaved, {1, 3, 1}));
  EXPECT_NO_THROW(kit::pp::check_shape(ScheduleKind::Interleaved, {4, 8, 4}));
  // make_schedule checks before it calls the student's function.
  EXPECT_THROW(kit::pp::make_schedule(ScheduleKind::Interleaved, {4, 6, 2}), kit::Error);
}

TEST(ScheduleShape, BadCountsAreClearErrors) {
  const auto message = [](ScheduleKind k, PipelineShape s) { return error_of([&] { kit::pp::check_shape(k, s); }); };
  EXPECT_NE(message(ScheduleKind::GPipe, {0, 4, 1}).find("p = 0"), std::string::npos);
  EXPECT_NE(message(ScheduleKind::OneFOneB, {2, 0, 1}).find("m = 0"), std::string::npos);
  EXPECT_NE(message(ScheduleKind::Interleaved, {2, 4, 0}).find("v = 0"), std::string::npos);
  const std::string chunks = message(ScheduleKind::OneFOneB, {2, 4, 2});
  EXPECT_NE(chunks.find("v = 2"), std::string::npos) << chunks;
  EXPECT_NE(chunks.find("interleaved"), std::string::npos) << chunks;
}

TEST(ScheduleShape, KindNamesParseAndPrint) {
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    EXPECT_EQ(kit::pp::parse_schedule_kind(kit::pp::to_string(k)), k);
  EXPECT_EQ(kit::pp::parse_schedule_kind("pipedream-flush"), ScheduleKind::OneFOneB);
  const std::string unknown = error_of([] { kit::pp::parse_schedule_kind("zb-h1"); });
  EXPECT_NE(unknown.find("zb-h1"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("gpipe, 1f1b"), std::string::npos) << unknown;
}

TEST(ScheduleShape, ActionsPrintAndRoundTripThroughJson) {
  EXPECT_EQ(kit::pp::to_string(kit::pp::F(3)), "F3");
  EXPECT_EQ(kit::pp::to_string(kit::pp::B(0)), "B0");
  EXPECT_EQ(kit::pp::to_string(kit::pp::F(3, 1)), "F3.1");
  EXPECT_EQ(kit::pp::to_string(parse("F0 F1 B0 F2.1")), "F0 F1 B0 F2.1");
  for (const auto& a : {kit::pp::F(3), kit::pp::B(2, 1)}) EXPECT_EQ(kit::pp::action_from_json(kit::pp::to_json(a)), a);
  EXPECT_NE(error_of([] { kit::pp::action_from_json({{"op", "F"}}); }).find("\"microbatch\""), std::string::npos);
  EXPECT_NE(error_of([] { kit::pp::action_from_json({{"op", "F"}, {"microbatch", -1}}); }).find(">= 0"),
            std::string::npos);
}

}  // namespace
