// --precision bf16 against fp32 for every kind of parallelism the training programs run:
// data parallelism and ZeRO-1/2/3 (run_zero), the pipeline schedules (run_pipeline_training),
// tensor parallelism (run_tensor_parallel), the 3D grid with recomputation (run_3d) and
// TeraPipe (run_terapipe). Each case runs its program twice on the tiny preset, the same
// seed and batches, once per precision, and compares the losses step by step.
//
// The tolerance: bf16 autocast rounds the matrix products' inputs to 8 significant bits and
// keeps the weights, the gradients, the optimizer state and the loss in fp32
// (kit/precision.h). On these runs the losses of the two precisions agree to 2.4e-5
// relative or better (measured: 1.3e-5 for tensor parallelism, 2.4e-5 for ZeRO, 2.3e-5 for
// the 3D grid); kLossTolerance is 8 times that, and below what a cross-entropy taken of the
// bf16 logits themselves is off by (4.4e-4 at the second step of run_zero's). The runs must
// also differ: a program that ignores --precision gives the fp32 losses to the last bit.
#include <gtest/gtest.h>

#include <cmath>
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

// Each rank's losses (the ranks that report them: the last pipeline stage, every rank of
// run_zero), as numbers.
std::vector<std::vector<double>> losses_of(const std::vector<nlohmann::json>& ranks) {
  std::vector<std::vector<double>> out;
  for (const auto& m : ranks)
    if (m.contains("losses") && m["losses"].is_array() && !m["losses"].empty())
      out.push_back(m["losses"].get<std::vector<double>>());
  return out;
}

void expect_bf16_close_to_fp32(const Program& p) {
  const auto fp32 = losses_of(run(p, "fp32")), bf16 = losses_of(run(p, "bf16"));
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
      EXPECT_LE(rel, kLossTolerance) << p.name << ", step " << k << ": bf16 loss " << b << " against fp32 " << f;
      largest = std::max(largest, rel);
    }
  }
  EXPECT_GT(largest, 0.0) << p.name << ": --precision bf16 gave the fp32 losses to the last bit: no forward ran "
                          << "under autocast";
}

TEST(Precision, DataParallelAdamW) { expect_bf16_close_to_fp32({"run_zero", {"--world-size", "2", "--optimizer", "adamw"}}); }
TEST(Precision, Zero1) { expect_bf16_close_to_fp32({"run_zero", {"--world-size", "2", "--optimizer", "zero1"}}); }
TEST(Precision, Zero2) { expect_bf16_close_to_fp32({"run_zero", {"--world-size", "2", "--optimizer", "zero2"}}); }
TEST(Precision, Zero3) { expect_bf16_close_to_fp32({"run_zero", {"--world-size", "2", "--optimizer", "zero3"}}); }
TEST(Precision, PipelineGPipe) {
  expect_bf16_close_to_fp32({"run_pipeline_training", {"--world-size", "2", "--schedule", "gpipe", "--chunks", "2"}});
}
TEST(Precision, Pipeline1F1B) {
  expect_bf16_close_to_fp32({"run_pipeline_training", {"--world-size", "2", "--schedule", "1f1b", "--chunks", "4"}});
}
TEST(Precision, PipelineInterleaved) {
  expect_bf16_close_to_fp32({"run_pipeline_training",
                             {"--world-size", "2", "--schedule", "interleaved", "--chunks", "2", "--virtual", "2",
                              "--n-layer", "4"}});
}
TEST(Precision, TensorParallel) { expect_bf16_close_to_fp32({"run_tensor_parallel", {"--world-size", "2"}}); }
// Four processes: two pipeline stages of two tensor-parallel ranks, the blocks recomputed in
// the backward (which must run them again in bf16, as their forward ran).
TEST(Precision, Grid3DWithRecompute) {
  expect_bf16_close_to_fp32({"run_3d", {"--dp", "1", "--pp", "2", "--tp", "2", "--recompute"}, 4});
}
TEST(Precision, TeraPipe) {
  expect_bf16_close_to_fp32({"run_terapipe", {"--stages", "2", "--slices", "uniform:2", "--chunks", "2"}});
}

}  // namespace
