// train_parallel on the grid (Problem 6) end to end, tiny preset: the program on a 2 x 2 x 1 grid (4 Gloo processes, the
// kit's own launcher) trains as its one-process run does (losses, and the checkpoint it
// gathers and saves, read back into the first assignment's model), writes each rank's
// metrics, and refuses a grid that does not fit before any rank starts.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "process_harness.h"
#include "kit/errors.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "build_programs.h"


namespace {

std::vector<std::string> args(int dp, int pp, int tp, const std::string& dir) {
  return {kit_test::build_program("train_parallel"), "--dp", std::to_string(dp), "--pp", std::to_string(pp), "--tp", std::to_string(tp),
          "--preset", "tiny", "--n-layer", "2", "--dropout", "0", "--batch-size", "4", "--chunks", "2",
          "--seq-len", "16", "--vocab-size", "64", "--steps", "2", "--lr", "0.01", "--seed", "7", "--threads",
          "1", "--no-progress", "--out", dir + "/metrics/{rank}.json", "--save", dir + "/whole.pt"};
}

nlohmann::json metrics(const std::string& dir, int rank) {
  return nlohmann::json::parse(kit_test::read_file(dir + "/metrics/" + std::to_string(rank) + ".json"));
}

}  // namespace

TEST(Run3D, TwoByTwoGridTrainsAsOneProcessAndSavesItsCheckpoint) {
  kit_test::TempDir one("run3d_one"), grid("run3d_grid");
  const auto r1 = kit_test::run_kit_program(args(1, 1, 1, one.path()), one / "log.txt");
  ASSERT_EQ(r1.exitcode, 0) << kit_test::describe_run(r1);
  const auto r4 = kit_test::run_kit_program(args(2, 2, 1, grid.path()), grid / "log.txt", {}, 90);
  ASSERT_EQ(r4.exitcode, 0) << kit_test::describe_run(r4);

  const auto want = metrics(one.path(), 0)["losses"].get<std::vector<double>>();
  for (int rank = 0; rank < 4; ++rank) {
    const auto m = metrics(grid.path(), rank);
    EXPECT_EQ(m["rank"], rank);
    EXPECT_EQ(m["coords"]["pp"], rank / 2) << "rank " << rank << ": rank = pp*(d*t) + dp*t + tp";
    EXPECT_EQ(m["coords"]["dp"], rank % 2);
    const auto losses = m["losses"].get<std::vector<double>>();
    ASSERT_EQ(losses.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(losses[k], want[k], 1e-5 * std::abs(want[k])) << "rank " << rank << ", step " << k;
    for (const char* kind : {"data", "tensor", "pipeline", "embedding"})
      EXPECT_GE(m["comm_seconds_per_step"][kind].get<double>(), 0.0) << kind;
    EXPECT_GT(m["parameter_bytes"].get<int64_t>(), 0);
  }
  // Both checkpoints load into the one-process model (names, shapes, tied lm_head checked by
  // load_state_dict) and hold the same weights, up to float32 rounding through AdamW.
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = 64;
  cfg.dropout = 0;
  kit::GPT2 a(cfg), b(cfg);
  kit::import_checkpoint(*a, one / "whole.pt");
  kit::import_checkpoint(*b, grid / "whole.pt");
  const auto da = kit::state_dict(*a), db = kit::state_dict(*b);
  for (const auto& kv : da)
    EXPECT_TRUE(torch::allclose(kv.value(), db.at(kv.key()), 1e-4, 1e-4)) << kv.key();
}

// Recomputation (Problem 6.3) on tensor-parallel stages with dropout on: the recomputed
// forward draws attention's per-rank masks (tensor_parallel/blocks.h: RegionDropout) and the
// shared ones again, so the losses equal the run without.
TEST(Run3D, RecomputeWithTensorParallelDropoutGivesTheLossesOfTheRunWithout) {
  std::vector<double> losses[2];
  for (const bool recompute : {false, true}) {
    kit_test::TempDir dir(recompute ? "run3d_recompute" : "run3d_plain");
    auto a = args(1, 2, 2, dir.path());
    for (size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == "--dropout") a[i + 1] = "0.2";
    if (recompute) a.push_back("--recompute");
    const auto r = kit_test::run_kit_program(a, dir / "log.txt", {}, 90);
    ASSERT_EQ(r.exitcode, 0) << kit_test::describe_run(r);
    losses[recompute] = metrics(dir.path(), 0)["losses"].get<std::vector<double>>();
  }
  ASSERT_EQ(losses[1].size(), losses[0].size());
  for (size_t k = 0; k < losses[0].size(); ++k)
    EXPECT_NEAR(losses[1][k], losses[0][k], 1e-5 * std::abs(losses[0][k])) << "step " << k;
}

TEST(Run3D, AGridThatDoesNotFitIsRefusedBeforeAnyRankStarts) {
  kit_test::TempDir dir("run3d_bad");
  auto bad = args(1, 1, 3, dir.path());  // t = 3 divides neither 2 heads nor 64 tokens
  const auto r = kit_test::run_kit_program(bad, dir / "log.txt");
  EXPECT_NE(r.exitcode, 0) << kit_test::describe_run(r);
  EXPECT_NE(r.output.find("--tp 3 must divide"), std::string::npos) << kit_test::describe_run(r);
  EXPECT_EQ(r.output.find("starting"), std::string::npos) << "no rank may start: " << kit_test::describe_run(r);
  const auto r2 = kit_test::run_kit_program(args(2, 1, 1, dir.path()), dir / "log2.txt",
                                           {{"RANK", "0"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", "1"}});
  EXPECT_NE(r2.exitcode, 0) << kit_test::describe_run(r2);
  EXPECT_NE(r2.output.find("d=2 p=1 t=1"), std::string::npos) << "a grid of 2 on a world of 3: " << kit_test::describe_run(r2);
}

// The optimizer's and the micro-batches' flags (given code), checked before any rank starts:
// a bad value is one line naming the flag and the fix, never LibTorch's own stack trace, and
// --pp p with too few blocks says so even when m (p when --chunks is left out) does not fit either.
TEST(Run3D, BadOptimizerAndMicroBatchFlagsAreRefusedBeforeAnyRankStarts) {
  kit_test::TempDir dir("run3d_flags");
  struct Bad {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {{"--lr", "-1"}, "--lr must be a positive number"},
      {{"--lr", "0"}, "--lr must be a positive number"},
      {{"--weight-decay", "-0.5"}, "--weight-decay must be 0 or more"},
      {{"--chunks", "-1"}, "--chunks -1: give the number of micro-batches"},
      {{"--pp", "3", "--chunks", "0", "--batch-size", "8"}, "Use --n-layer 3"},
      {{"--dp", "1", "--pp", "2", "--chunks", "0", "--batch-size", "5"}, "(--chunks was not given: m is p = 2)"},
  };
  int k = 0;
  for (const Bad& c : cases) {
    auto a = args(2, 1, 1, dir.path());
    for (size_t i = 0; i + 1 < c.flags.size(); i += 2) {  // each flag given once: its value replaced
      const auto at = std::find(a.begin(), a.end(), c.flags[i]);
      if (at == a.end()) a.insert(a.end(), {c.flags[i], c.flags[i + 1]});
      else *(at + 1) = c.flags[i + 1];
    }
    const auto r = kit_test::run_kit_program(a, dir / ("log" + std::to_string(k++) + ".txt"));
    SCOPED_TRACE(c.says);
    EXPECT_EQ(r.exitcode, 1) << kit_test::describe_run(r);
    EXPECT_NE(r.output.find(c.says), std::string::npos) << kit_test::describe_run(r);
    EXPECT_EQ(r.output.find("starting"), std::string::npos) << "no rank may start: " << kit_test::describe_run(r);
    EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << "a LibTorch trace: " << kit_test::describe_run(r);
  }
}
