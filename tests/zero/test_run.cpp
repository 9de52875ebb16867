// run_zero end to end on 2 Gloo processes, tiny preset: ZeRO-1 and ZeRO-2 train exactly as
// plain data parallelism with torch::optim::AdamW does (losses), each rank holds
// ceil(P/2) x 2 x 4 bytes of optimizer state (measured by the program from the moment
// tensors, P counted here from the model), and a bad flag is refused before any rank starts;
// ZeRO-3 (Problem 5.5) the same, holding its shards only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data_parallel/dp_test_util.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "build_programs.h"


namespace {

constexpr int64_t kRunVocab = 64, kRunBatch = 2, kRunSeqLen = 16, kRunSteps = 4;
// The losses of ZeRO and of plain AdamW may differ only by float rounding: with 2 ranks
// both sum the same two gradients and apply the same AdamW formula. 1e-5 relative is far
// below what one wrong step moves them (see LossesMoveMoreThanTheTolerance).
constexpr double kRelTol = 1e-5;

std::vector<std::string> args(const std::string& optimizer, const std::string& dir, const std::string& lr = "0.01") {
  return {kit_test::build_program("run_zero"), "--world-size", "2", "--optimizer", optimizer, "--preset", "tiny", "--dropout", "0",
          "--batch-size", std::to_string(kRunBatch), "--seq-len", std::to_string(kRunSeqLen), "--vocab-size",
          std::to_string(kRunVocab), "--steps", std::to_string(kRunSteps), "--lr", lr, "--weight-decay", "0.1",
          "--seed", "7", "--threads", "1", "--no-progress", "--out", dir + "/metrics/{rank}.json"};
}

nlohmann::json metrics(const std::string& dir, int rank) {
  return nlohmann::json::parse(dp_test::read_file(dir + "/metrics/" + std::to_string(rank) + ".json"));
}

// P, counted from the model run_zero trains (the tied weight once).
int64_t tiny_parameter_count() {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = kRunVocab;
  kit::GPT2 model(cfg);
  return kit::count_parameters(*model);
}

// Runs `optimizer` into a fresh directory; the directory stays for the metrics.
void train(const std::string& optimizer, const dp_test::TempDir& dir, const std::string& lr = "0.01") {
  const auto r = dp_test::run_kit_program(args(optimizer, dir.path(), lr), dir / "log.txt");
  ASSERT_EQ(r.exitcode, 0) << "--optimizer " << optimizer << ": " << dp_test::describe_run(r);
}

void expect_same_losses(const dp_test::TempDir& ref, const dp_test::TempDir& got, const std::string& what) {
  for (int rank = 0; rank < 2; ++rank) {
    const auto a = metrics(ref.path(), rank)["losses"].get<std::vector<double>>();
    const auto b = metrics(got.path(), rank)["losses"].get<std::vector<double>>();
    ASSERT_EQ(a.size(), static_cast<size_t>(kRunSteps)) << "rank " << rank;
    ASSERT_EQ(b.size(), a.size()) << what << ", rank " << rank;
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(b[k], a[k], kRelTol * std::abs(a[k])) << what << " against adamw, rank " << rank << ", step " << k;
  }
}

TEST(ZeroRun, Zero1AndZero2TrainAsPlainAdamW) {
  dp_test::TempDir adamw("zero_run_adamw"), zero1("zero_run_zero1"), zero2("zero_run_zero2");
  train("adamw", adamw);
  train("zero1", zero1);
  train("zero2", zero2);
  if (HasFatalFailure()) return;
  expect_same_losses(adamw, zero1, "zero1");
  expect_same_losses(adamw, zero2, "zero2");
}

TEST(ZeroRun, LossesMoveMoreThanTheTolerance) {
  // The comparison above can fail: a slightly different update (lr 0.011 for 0.01) moves
  // the losses of the later steps by far more than kRelTol.
  dp_test::TempDir a("zero_run_lr_a"), b("zero_run_lr_b");
  train("zero1", a, "0.01");
  train("zero1", b, "0.011");
  if (HasFatalFailure()) return;
  const auto la = metrics(a.path(), 0)["losses"].get<std::vector<double>>();
  const auto lb = metrics(b.path(), 0)["losses"].get<std::vector<double>>();
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_GT(std::abs(la.back() - lb.back()), 10 * kRelTol * std::abs(la.back()));
}

TEST(ZeroRun, OptimizerStateAndGradientBytesPerRank) {
  const int64_t P = tiny_parameter_count(), S = (P + 1) / 2;  // ceil(P / 2)
  dp_test::TempDir adamw("zero_bytes_adamw"), zero1("zero_bytes_zero1"), zero2("zero_bytes_zero2");
  train("adamw", adamw);
  train("zero1", zero1);
  train("zero2", zero2);
  if (HasFatalFailure()) return;
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json d = metrics(adamw.path(), rank), z1 = metrics(zero1.path(), rank),
                         z2 = metrics(zero2.path(), rank);
    EXPECT_EQ(d["parameter_count"].get<int64_t>(), P) << "rank " << rank;
    // Plain AdamW: two moments of every parameter, every gradient.
    EXPECT_EQ(d["optimizer_state_bytes"].get<int64_t>(), 2 * 4 * P) << "rank " << rank;
    EXPECT_EQ(d["gradient_bytes"].get<int64_t>(), 4 * P) << "rank " << rank;
    // ZeRO: two moments of this rank's shard only, ceil(P/n) x 2 x 4 bytes.
    EXPECT_EQ(z1["optimizer_state_bytes"].get<int64_t>(), S * 2 * 4) << "zero1, rank " << rank;
    EXPECT_EQ(z2["optimizer_state_bytes"].get<int64_t>(), S * 2 * 4) << "zero2, rank " << rank;
    // Stage 1 keeps every gradient; stage 2 only its shard of the reduced ones.
    EXPECT_EQ(z1["gradient_bytes"].get<int64_t>(), 4 * P) << "zero1, rank " << rank;
    EXPECT_EQ(z2["gradient_bytes"].get<int64_t>(), 4 * S) << "zero2, rank " << rank;
    // Right after backward, before the step, every variant holds all P gradients.
    for (const auto* m : {&d, &z1, &z2})
      EXPECT_EQ((*m)["gradient_peak_bytes"].get<int64_t>(), 4 * P) << "rank " << rank;
    // Each step a ring reduce-scatter and all-gather over the padded 2 S floats: rank r
    // sends n - 1 = 1 chunk of S floats in each, what one ring all-reduce sends.
    for (const auto* z : {&z1, &z2})
      EXPECT_DOUBLE_EQ((*z)["send_bytes_per_step"].get<double>(), 2.0 * S * 4) << "rank " << rank;
    EXPECT_GT(d["activation_bytes"].get<int64_t>(), 0) << "the activations were not counted";
  }
}

TEST(ZeroRun, UnknownOptimizerIsAClearError) {
  dp_test::TempDir dir("zero_run_bad_optimizer");
  const auto r = dp_test::run_kit_program(args("zero4", dir.path()), dir / "log.txt");
  EXPECT_FALSE(r.timed_out) << dp_test::describe_run(r);
  EXPECT_EQ(r.exitcode, 1) << dp_test::describe_run(r);
  EXPECT_NE(r.output.find("--optimizer zero4 is not one of adamw, zero1, zero2, zero3"), std::string::npos) << dp_test::describe_run(r);
  // Refused in the launcher: no rank was started, so none is left waiting.
  EXPECT_EQ(r.output.find("starting 2 data-parallel ranks"), std::string::npos) << dp_test::describe_run(r);
  EXPECT_TRUE(dp_test::leftovers_after(dir.path(), 5).empty())
      << "processes left behind:\n" << dp_test::join_lines(dp_test::leftovers_after(dir.path(), 0));
}

}  // namespace

// Problem 5.5 through run_zero: ZeRO-3 trains as plain AdamW does, and each rank holds its
// shards of the parameters, their gradients and their moments, and sends three passes of them.
TEST(FsdpRun, Zero3TrainsAsPlainAdamWAndHoldsItsShardsOnly) {
  dp_test::TempDir adamw("zero_run3_adamw"), zero3("zero_run3_zero3");
  train("adamw", adamw);
  train("zero3", zero3);
  if (HasFatalFailure()) return;
  expect_same_losses(adamw, zero3, "zero3");
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json z = metrics(zero3.path(), rank);
    const int64_t P = z["parameter_count"].get<int64_t>(), shard = z["parameter_bytes"].get<int64_t>();
    EXPECT_EQ(P, tiny_parameter_count()) << "rank " << rank;
    // The units' shards, each ceil(P_u / 2) floats: at least P/2, less than P/2 + one float per unit.
    EXPECT_GE(shard, 4 * P / 2) << "zero3 parameter bytes kept, rank " << rank;
    EXPECT_LE(shard, 4 * (P / 2 + 16)) << "zero3 parameter bytes kept, rank " << rank;
    EXPECT_EQ(z["gradient_bytes"].get<int64_t>(), shard) << "zero3 keeps its shards' gradients only, rank " << rank;
    EXPECT_EQ(z["gradient_peak_bytes"].get<int64_t>(), shard) << "rank " << rank;
    EXPECT_EQ(z["optimizer_state_bytes"].get<int64_t>(), 2 * shard) << "rank " << rank;
    // Two all-gathers and a reduce-scatter of every shard, n - 1 = 1 chunk each.
    EXPECT_DOUBLE_EQ(z["send_bytes_per_step"].get<double>(), 3.0 * shard) << "rank " << rank;
  }
}
