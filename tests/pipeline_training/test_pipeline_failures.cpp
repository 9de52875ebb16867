// Pipeline runs that cannot succeed must fail fast and say why, never hang:
//   - a schedule where two neighbouring ranks both wait to receive first: with
//     --no-precheck each rank's receive gives up after KIT_DIST_TIMEOUT (5 s here) and the
//     error names the rank; without it the simulator rejects it before any rank starts;
//   - a rank that throws in the middle of its schedule: every process exits within
//     seconds and the output names that rank; nothing is left running;
//   - flags that cannot work (micro-batches not dividing the batch, fewer blocks than
//     stages, interleaved m not a multiple of p) are reported before any rank starts.
// The program links the student's code: each run is a subject part (run_in_subject), which
// records its exit, duration, output and the processes left behind; the checks are the judge's.
#include <gtest/gtest.h>

#include <functional>

#include "judge/judge.h"
#include "run_test_util.h"

namespace {
using pp_run::RunSpec;
namespace pp = kit::pp;
namespace judge = kit::judge;

// Runs the program with the arguments `make_args` builds in a fresh temporary directory tagged
// `tag`, in a subject part; the judge gets the run and the processes still mentioning the
// directory 5 s later ("leftovers").
judge::Record run_in_subject(const std::string& tag,
                             const std::function<std::vector<std::string>(const kit_test::TempDir&)>& make_args,
                             double timeout_s, const std::string& dist_timeout, const std::string& label) {
  return judge::subject(
      [&](judge::Record& out) {
        kit_test::TempDir dir(tag);
        pp_run::put_run(out, pp_run::run_program(make_args(dir), {}, dir / "run.log", timeout_s, dist_timeout));
        out.put("leftovers", kit_test::leftovers_after(dir.path(), 5));
      },
      label);
}

// p = 2, v = 2, m = 2: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3. Rank 0 starts
// with F0 on stage 2 (waits for stage 1 on rank 1), rank 1 with F0 on stage 1 (waits for
// stage 0, which rank 0 only runs next): both receive first. Otherwise complete.
pp::Schedules both_receive_first() {
  return {{pp::F(0, 1), pp::F(0, 0), pp::F(1, 0), pp::F(1, 1), pp::B(0, 1), pp::B(0, 0), pp::B(1, 1), pp::B(1, 0)},
          {pp::F(0, 0), pp::F(0, 1), pp::B(0, 1), pp::B(0, 0), pp::F(1, 0), pp::F(1, 1), pp::B(1, 1), pp::B(1, 0)}};
}

std::vector<std::string> deadlock_args(const kit_test::TempDir& dir) {
  pp_run::write_schedule_file(dir / "deadlock.json", both_receive_first());
  auto args = pp_run::program_args({2, "interleaved", 2, 2, 4}, dir.path());
  for (size_t k = 0; k + 1 < args.size(); ++k)
    if (args[k] == "--steps") args[k + 1] = "1";
  args.insert(args.end(), {"--schedule-file", dir / "deadlock.json"});
  return args;
}

TEST(PipelineFailure, DeadlockWithoutPrecheckTimesOutNamingTheRank) {
  const judge::Record got = run_in_subject(
      "pp_deadlock",
      [](const kit_test::TempDir& dir) {
        auto args = deadlock_args(dir);
        args.push_back("--no-precheck");
        return args;
      },
      40, "5", "the deadlocked schedule with --no-precheck");
  if (!judge::judging()) return;
  const auto r = pp_run::get_run(got);
  ASSERT_FALSE(r.timed_out) << "a deadlocked schedule must end with a timeout error, not hang\n" << pp_run::describe(r);
  EXPECT_NE(r.exitcode, 0) << pp_run::describe(r);
  EXPECT_LT(r.seconds, 30) << pp_run::describe(r);
  EXPECT_NE(r.output.find("rank 0"), std::string::npos) << pp_run::describe(r);
  EXPECT_NE(r.output.find("waited for"), std::string::npos)
      << "the error should say which message the rank waited for\n" << pp_run::describe(r);
  EXPECT_EQ(got.get<std::vector<std::string>>("leftovers"), std::vector<std::string>{});
}

TEST(PipelineFailure, DeadlockIsRejectedByTheSimulatorBeforeRunning) {
  const judge::Record got = run_in_subject("pp_precheck", deadlock_args, 30, "5", "the deadlocked schedule");
  if (!judge::judging()) return;
  const auto r = pp_run::get_run(got);
  ASSERT_FALSE(r.timed_out) << pp_run::describe(r);
  EXPECT_EQ(r.exitcode, 1) << pp_run::describe(r);
  EXPECT_LT(r.seconds, 4) << "the simulator should reject the schedule before any rank waits\n" << pp_run::describe(r);
  EXPECT_EQ(r.output.find("starting"), std::string::npos) << "no rank should have been started\n" << r.output;
  for (const char* what : {"deadlock", "rank 0 F0.1", "rank 1 F0"})
    EXPECT_NE(r.output.find(what), std::string::npos)
        << "the simulator's message should name every stuck rank and action (" << what << ")\n" << r.output;
}

TEST(PipelineFailure, RankThrowingMidScheduleStopsEveryProcessNamingIt) {
  // A communication timeout far longer than the deadline (60 s): the run must end because the
  // failure is noticed, not because the peers give up waiting.
  const judge::Record got = run_in_subject(
      "pp_failrank",
      [](const kit_test::TempDir& dir) {
        auto args = pp_run::program_args({4, "1f1b", 4, 1, 4}, dir.path());
        // Rank 1 throws after its first forward: rank 2 then waits for micro-batch 1 and never
        // reaches a backward, so rank 1 is the first and only rank to fail, whatever the timing.
        args.insert(args.end(), {"--fail-rank", "1", "--fail-at-action", "1"});
        return args;
      },
      40, "60", "1f1b on 4 ranks, rank 1 failing");
  if (!judge::judging()) return;
  const auto r = pp_run::get_run(got);
  ASSERT_FALSE(r.timed_out) << pp_run::describe(r);
  EXPECT_NE(r.exitcode, 0) << pp_run::describe(r);
  EXPECT_LT(r.seconds, 20) << pp_run::describe(r);
  EXPECT_NE(r.output.find("rank 1 fails on purpose"), std::string::npos) << pp_run::describe(r);
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << pp_run::describe(r);
  EXPECT_EQ(got.get<std::vector<std::string>>("leftovers"), std::vector<std::string>{});
}

// Runs the program with bad flags: exit 1, quickly, with `expected` in the message.
void expect_flag_error(const RunSpec& spec, const std::vector<std::string>& extra, const std::string& expected) {
  const judge::Record got = run_in_subject(
      "pp_flags",
      [&](const kit_test::TempDir& dir) {
        auto args = pp_run::program_args(spec, dir.path());
        args.insert(args.end(), extra.begin(), extra.end());
        return args;
      },
      30, "10", "bad flags (" + expected + ")");
  if (!judge::judging()) return;
  const auto r = pp_run::get_run(got);
  EXPECT_EQ(r.exitcode, 1) << pp_run::describe(r);
  EXPECT_LT(r.seconds, 5) << pp_run::describe(r);
  EXPECT_EQ(r.output.find("starting"), std::string::npos) << "bad flags must be caught before starting ranks\n"
                                                          << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << pp_run::describe(r);
}

TEST(PipelineFailure, MicroBatchesNotDividingTheBatchAreAnError) {
  expect_flag_error({2, "1f1b", 3, 1, 2}, {}, "--chunks 3");
}

TEST(PipelineFailure, FewerBlocksThanStagesIsAnError) {
  expect_flag_error({4, "1f1b", 4, 1, 2}, {}, "--n-layer 4");
  expect_flag_error({2, "interleaved", 4, 2, 2}, {}, "--n-layer 4");
}

TEST(PipelineFailure, InterleavedMicroBatchesNotAMultipleOfRanksIsAnError) {
  expect_flag_error({4, "interleaved", 2, 2, 8}, {}, "multiple of");
}

}  // namespace
