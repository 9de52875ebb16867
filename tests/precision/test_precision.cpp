// --precision bf16 against fp32 for every kind of parallelism the training programs run:
// data parallelism and ZeRO-1/2/3 (train_parallel --dp), the pipeline schedules (train_parallel --pp),
// tensor parallelism (train_parallel --tp), the 3D grid with recomputation (train_parallel --dp --pp --tp) and
// TeraPipe (train_parallel --slices). Each case runs its program twice on the tiny preset, the same
// seed and batches, once per precision, and compares the losses step by step.
//
// The tolerance: bf16 autocast rounds the matrix products' inputs to 8 significant bits and
// keeps the weights, the gradients, the optimizer state and the loss in fp32
// (kit/precision.h). On these runs the losses of the two precisions agree to 2.4e-5
// relative or better (measured: 1.3e-5 for tensor parallelism, 2.4e-5 for ZeRO, 2.3e-5 for
// the 3D grid); kLossTolerance is 8 times that, and below what a cross-entropy taken of the
// bf16 logits themselves is off by (4.4e-4 at the second step of the ZeRO runs'). The runs must
// also differ: a program that ignores --precision gives the fp32 losses to the last bit.
//
// The ZeRO stages in bf16 train with bf16 parameters and an fp32 master (zero/zero.h), so the
// weights themselves are rounded to 8 bits: their losses are further from fp32's, 4.3e-5
// relative at most (measured, zero1/2/3), still inside kLossTolerance. Their runs also count
// the ZeRO paper's mixed-precision bytes per rank, from the tensors: 2 + 2 + 12 per parameter,
// /n where sharded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "build_programs.h"
#include "process_harness.h"

namespace {

constexpr double kLossTolerance = 2e-4;  // relative, per step
constexpr int kSteps = 3;

struct Program {
  std::string name;               // the program in the build folder
  std::vector<std::string> args;  // its parallelism
  int ranks = 2;                  // the processes it starts (their metrics files)
};

// Every rank's metrics of one run at `precision`; a failure (and an empty list) when it fails.
std::vector<nlohmann::json> run(const Program& p, const std::string& precision) {
  kit_test::TempDir dir("precision_" + p.name + "_" + precision);
  std::vector<std::string> argv{kit_test::build_program(p.name)};
  argv.insert(argv.end(), p.args.begin(), p.args.end());
  const std::vector<std::string> common{"--preset", "tiny", "--steps", std::to_string(kSteps), "--batch-size", "4",
                                        "--seq-len", "16", "--vocab-size", "64", "--threads", "1", "--no-progress",
                                        "--precision", precision, "--out", dir.path() + "/{rank}.json"};
  argv.insert(argv.end(), common.begin(), common.end());
  const auto r = kit_test::run_kit_program(argv, dir / "log.txt");
  if (r.exitcode != 0) {
    ADD_FAILURE() << p.name << " --precision " << precision << ": " << kit_test::describe_run(r);
    return {};
  }
  std::vector<nlohmann::json> out;
  for (int rank = 0; rank < p.ranks; ++rank) {
    const std::string text = kit_test::read_file(dir.path() + "/" + std::to_string(rank) + ".json");
    out.push_back(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false));
    if (!out.back().is_object()) {
      ADD_FAILURE() << p.name << " --precision " << precision << ": rank " << rank << " wrote no metrics JSON";
      return {};
    }
    EXPECT_EQ(out.back().value("precision", std::string("(missing)")), precision)
        << p.name << ": rank " << rank << "'s metrics do not say the precision it ran at";
  }
  return out;
}

// Each rank's losses (every rank reports the global batch's), as numbers.
std::vector<std::vector<double>> losses_of(const std::vector<nlohmann::json>& ranks) {
  std::vector<std::vector<double>> out;
  for (const auto& m : ranks)
    if (m.contains("losses") && m["losses"].is_array() && !m["losses"].empty())
      out.push_back(m["losses"].get<std::vector<double>>());
  return out;
}

// Compares the losses; each run's metrics into *bf16_metrics and *fp32_metrics (when given).
void expect_bf16_close_to_fp32(const Program& p, double tolerance = kLossTolerance,
                               std::vector<nlohmann::json>* bf16_metrics = nullptr,
                               std::vector<nlohmann::json>* fp32_metrics = nullptr) {
  const auto bf16_ranks = run(p, "bf16"), fp32_ranks = run(p, "fp32");
  if (bf16_metrics) *bf16_metrics = bf16_ranks;
  if (fp32_metrics) *fp32_metrics = fp32_ranks;
  const auto fp32 = losses_of(fp32_ranks), bf16 = losses_of(bf16_ranks);
  if (::testing::Test::HasFailure()) return;
  ASSERT_FALSE(fp32.empty()) << p.name << ": no rank reported losses";
  ASSERT_EQ(fp32.size(), bf16.size()) << p.name << ": the two precisions' runs report losses on different ranks";
  double largest = 0;
  for (size_t r = 0; r < fp32.size(); ++r) {
    ASSERT_EQ(fp32[r].size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(bf16[r].size(), static_cast<size_t>(kSteps));
    for (int k = 0; k < kSteps; ++k) {
      const double f = fp32[r][k], b = bf16[r][k];
      ASSERT_TRUE(std::isfinite(b)) << p.name << ": bf16 loss of step " << k << " is " << b;
      const double rel = std::abs(b - f) / std::abs(f);
      EXPECT_LE(rel, tolerance) << p.name << ", step " << k << ": bf16 loss " << b << " against fp32 " << f;
      largest = std::max(largest, rel);
    }
  }
  EXPECT_GT(largest, 0.0) << p.name << ": --precision bf16 gave the fp32 losses to the last bit: no forward ran "
                          << "under autocast";
  std::cout << p.name << ": bf16 losses within " << largest << " of fp32's, relative" << std::endl;
}

// train_parallel --dp 2 --precision bf16 with a ZeRO stage: master weights, and the bytes each
// rank counted against the paper's mixed-precision formula. ZeRO-3's units are padded one by
// one (each shard ceil(P_u / 2) elements): up to 16 bytes per unit above the formula.
void expect_mixed_precision_bytes(const std::string& optimizer) {
  std::vector<nlohmann::json> ranks;
  expect_bf16_close_to_fp32({"train_parallel", {"--dp", "2", "--optimizer", optimizer}}, kLossTolerance, &ranks);
  if (::testing::Test::HasFailure()) return;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const nlohmann::json& m = ranks[r];
    const std::string where = "train_parallel --dp 2 --optimizer " + optimizer + " --precision bf16, rank " + std::to_string(r);
    ASSERT_TRUE(m.contains("parameter_count") && m.contains("n_layer") && m.contains("formula_bytes")) << where;
    EXPECT_EQ(m.value("master_weights", false), true) << where << ": bf16 parameters with an fp32 master";
    const int64_t P = m["parameter_count"].get<int64_t>(), S = (P + 1) / 2;
    const int64_t slack = optimizer == "zero3" ? 16 * (m["n_layer"].get<int64_t>() + 1) : 0;
    const int64_t params = m.value("parameter_bytes", int64_t{-1}), grads = m.value("gradient_bytes", int64_t{-1}),
                  state = m.value("optimizer_state_bytes", int64_t{-1});
    const int64_t want_params = optimizer == "zero3" ? 2 * S : 2 * P;
    const int64_t want_grads = optimizer == "zero1" ? 2 * P : 2 * S;
    EXPECT_NEAR(params, want_params, slack) << where << ": parameter bytes, 2 per parameter (P = " << P << ")";
    EXPECT_NEAR(grads, want_grads, slack) << where << ": gradient bytes kept, 2 per parameter (P = " << P << ")";
    EXPECT_NEAR(state, 12 * S, 6 * slack) << where << ": optimizer state, 12 bytes per parameter of the shard";
    const double formula = m["formula_bytes"].value("total", 0.0);
    EXPECT_NEAR(static_cast<double>(params + grads + state), formula, 8.0 * slack + 16)
        << where << ": counted bytes against formula_bytes.total";
  }
}

// Plain AdamW in bf16: fp32 weights under autocast, 4 + 4 + 8 bytes per parameter.
TEST(Precision, DataParallelAdamW) {
  std::vector<nlohmann::json> ranks;
  expect_bf16_close_to_fp32({"train_parallel", {"--dp", "2", "--optimizer", "adamw"}}, kLossTolerance, &ranks);
  for (const auto& m : ranks) {
    EXPECT_EQ(m.value("master_weights", true), false) << "train_parallel --dp 2 --optimizer adamw keeps fp32 weights in bf16";
    EXPECT_EQ(m.value("parameter_bytes", int64_t{-1}), 4 * m.value("parameter_count", int64_t{0}));
  }
}
TEST(Precision, Zero1) { expect_mixed_precision_bytes("zero1"); }
TEST(Precision, Zero2) { expect_mixed_precision_bytes("zero2"); }
TEST(Precision, Zero3) { expect_mixed_precision_bytes("zero3"); }
TEST(Precision, PipelineGPipe) {
  expect_bf16_close_to_fp32({"train_parallel", {"--pp", "2", "--schedule", "gpipe", "--chunks", "2"}});
}
TEST(Precision, Pipeline1F1B) {
  expect_bf16_close_to_fp32({"train_parallel", {"--pp", "2", "--schedule", "1f1b", "--chunks", "4"}});
}
TEST(Precision, PipelineInterleaved) {
  expect_bf16_close_to_fp32({"train_parallel",
                             {"--pp", "2", "--schedule", "interleaved", "--chunks", "2", "--virtual", "2",
                              "--n-layer", "4"}});
}
TEST(Precision, TensorParallel) { expect_bf16_close_to_fp32({"train_parallel", {"--tp", "2"}}); }
// Four processes: two pipeline stages of two tensor-parallel ranks, the blocks recomputed in
// the backward (which must run them again in bf16, as their forward ran).
TEST(Precision, Grid3DWithRecompute) {
  expect_bf16_close_to_fp32({"train_parallel", {"--dp", "1", "--pp", "2", "--tp", "2", "--recompute"}, 4});
}
// ZeRO-2 over the data groups of a pipeline (d = 2, p = 2): bf16 parameters with the fp32
// master, as the ZeRO stages of data parallelism alone (the messages between the stages bf16 too): every rank's
// parameter bytes half of fp32's.
TEST(Precision, Grid3DZeroTwoMasterWeights) {
  std::vector<nlohmann::json> bf16, fp32;
  expect_bf16_close_to_fp32({"train_parallel", {"--dp", "2", "--pp", "2", "--tp", "1", "--optimizer", "zero2"}, 4},
                            kLossTolerance, &bf16, &fp32);
  if (HasFailure()) return;
  for (size_t r = 0; r < bf16.size(); ++r) {
    EXPECT_EQ(bf16[r].value("master_weights", false), true) << "train_parallel --optimizer zero2 --precision bf16, rank " << r;
    EXPECT_EQ(fp32[r].value("master_weights", true), false) << "train_parallel --optimizer zero2 --precision fp32, rank " << r;
    EXPECT_EQ(2 * bf16[r].value("parameter_bytes", int64_t{-1}), fp32[r].value("parameter_bytes", int64_t{-2}))
        << "rank " << r << ": bf16 parameters take half the bytes of fp32's";
  }
}
TEST(Precision, TeraPipe) {
  expect_bf16_close_to_fp32({"train_parallel", {"--pp", "2", "--slices", "uniform:2", "--chunks", "2"}});
}

}  // namespace
