// The benchmark arithmetic of Problems 1.3 and 2.3 on hand-made metrics files: time is
// averaged over ranks, tokens/s summed over ranks, the first epoch dropped, then mean and
// sample standard deviation over epochs. Every expected number is worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "kit/errors.h"
#include "plots_test_util.h"
#include "run_metrics.h"
#include "statistics.h"
#include "summary.h"

namespace {
using namespace plots_test;
using namespace kit::plots;

// World 2, three epochs. Epoch 1 is a slow warm-up; after it, per epoch:
//   epoch 2: time (4 + 6) / 2 = 5, tokens/s 50 + 70 = 120
//   epoch 3: time (6 + 8) / 2 = 7, tokens/s 40 + 60 = 100
// so time 6 +- sqrt(2), tokens/s 110 +- sqrt(200) (sample std, n - 1 = 1).
void write_world2(const TempDir& dir, const std::string& sub = "w2") {
  write_json(dir / (sub + "/rank0.json"),
             run_file("run_data_parallel", 2, 128,
                      {epoch(1, 0, 2, 100, 1), epoch(2, 0, 2, 4, 50), epoch(3, 0, 2, 6, 40)}));
  write_json(dir / (sub + "/rank1.json"),
             run_file("run_data_parallel", 2, 128,
                      {epoch(1, 1, 2, 120, 1), epoch(2, 1, 2, 6, 70), epoch(3, 1, 2, 8, 60)}));
}

TEST(PlotsStatistics, TimeIsAveragedAndTokensPerSecSummedOverRanks) {
  TempDir dir;
  write_world2(dir);
  const auto totals = totals_per_epoch(load_run(dir / "w2"));
  ASSERT_EQ(totals.size(), 3u);
  EXPECT_EQ(totals[1].epoch, 2);
  EXPECT_DOUBLE_EQ(totals[1].training_time, 5.0) << "epoch time must be the MEAN over ranks (4 and 6)";
  EXPECT_DOUBLE_EQ(totals[1].tokens_per_sec, 120.0) << "epoch tokens/s must be the SUM over ranks (50 and 70)";
  EXPECT_DOUBLE_EQ(totals[2].training_time, 7.0);
  EXPECT_DOUBLE_EQ(totals[2].tokens_per_sec, 100.0);
}

TEST(PlotsStatistics, FirstEpochIsDroppedThenMeanAndSampleStd) {
  TempDir dir;
  write_world2(dir);
  const RunStats st = run_stats(load_run(dir / "w2"));
  EXPECT_TRUE(st.first_epoch_dropped);
  EXPECT_TRUE(st.warning.empty()) << st.warning;
  EXPECT_EQ(st.epochs_used, (std::vector<int64_t>{2, 3})) << "epoch 1 (warm-up) must be dropped";
  EXPECT_DOUBLE_EQ(st.training_time.mean, 6.0);
  EXPECT_NEAR(st.training_time.std, std::sqrt(2.0), 1e-12) << "sample standard deviation (divide by n - 1)";
  EXPECT_DOUBLE_EQ(st.tokens_per_sec.mean, 110.0);
  EXPECT_NEAR(st.tokens_per_sec.std, std::sqrt(200.0), 1e-12);
  EXPECT_EQ(st.training_time.n, 2u);
}

TEST(PlotsStatistics, ASingleEpochIsKeptWithAWarning) {
  TempDir dir;
  write_json(dir / "one.json", run_file("train", 1, 64, {epoch(1, 0, 1, 3.5, 900)}));
  const RunStats st = run_stats(load_run(dir / "one.json"));
  EXPECT_FALSE(st.first_epoch_dropped);
  EXPECT_EQ(st.epochs_used, (std::vector<int64_t>{1}));
  EXPECT_DOUBLE_EQ(st.training_time.mean, 3.5);
  EXPECT_DOUBLE_EQ(st.training_time.std, 0.0);
  EXPECT_DOUBLE_EQ(st.tokens_per_sec.mean, 900.0);
  EXPECT_NE(st.warning.find("only one epoch"), std::string::npos) << st.warning;
}

TEST(PlotsStatistics, OneMeasuredEpochAfterTheWarmUpIsAWarningNotAnErrorBar) {
  TempDir dir;
  write_json(dir / "two.json", run_file("run_pipeline", 1, 64, {epoch(1, 0, 1, 9.0, 500), epoch(2, 0, 1, 4.0, 800)}));
  const RunStats st = run_stats(load_run(dir / "two.json"));
  EXPECT_TRUE(st.first_epoch_dropped);
  EXPECT_EQ(st.epochs_used, (std::vector<int64_t>{2}));
  EXPECT_EQ(st.training_time.n, 1u);
  EXPECT_NE(st.warning.find("one measured epoch"), std::string::npos) << st.warning;
  EXPECT_NE(st.warning.find("--epochs 3"), std::string::npos) << st.warning;
}

TEST(PlotsStatistics, MeanStdOfKnownValues) {
  const MeanStd s = mean_std({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.std, std::sqrt(32.0 / 7.0), 1e-12);
  EXPECT_EQ(s.n, 8u);
  EXPECT_THROW(mean_std({}), kit::Error);
}

TEST(PlotsStatistics, EpochsAreAlignedByNumberNotByPositionInTheFile) {
  TempDir dir;
  // Rank 1 lists its epochs in a different order: they must still pair up by number.
  write_json(dir / "w2/rank0.json",
             run_file("run_data_parallel", 2, 8, {epoch(1, 0, 2, 9, 1), epoch(2, 0, 2, 2, 10), epoch(3, 0, 2, 4, 30)}));
  write_json(dir / "w2/rank1.json",
             run_file("run_data_parallel", 2, 8, {epoch(3, 1, 2, 6, 50), epoch(1, 1, 2, 9, 1), epoch(2, 1, 2, 4, 20)}));
  const auto totals = totals_per_epoch(load_run(dir / "w2"));
  ASSERT_EQ(totals.size(), 3u);
  EXPECT_DOUBLE_EQ(totals[1].training_time, 3.0);
  EXPECT_DOUBLE_EQ(totals[1].tokens_per_sec, 30.0);
  EXPECT_DOUBLE_EQ(totals[2].training_time, 5.0);
  EXPECT_DOUBLE_EQ(totals[2].tokens_per_sec, 80.0);
}

TEST(PlotsStatistics, LossCurveAveragesRanksStepByStep) {
  TempDir dir;
  write_json(dir / "w2/rank0.json", run_file("run_data_parallel", 2, 4,
                                             {epoch(1, 0, 2, 1, 1, {2.0, 4.0}), epoch(2, 0, 2, 1, 1, {1.0, 1.0})}));
  write_json(dir / "w2/rank1.json", run_file("run_data_parallel", 2, 4,
                                             {epoch(1, 1, 2, 1, 1, {4.0, 6.0}), epoch(2, 1, 2, 1, 1, {3.0, 2.0})}));
  const auto curve = loss_curve(load_run(dir / "w2"));
  const std::vector<std::pair<double, double>> expected = {{0.5, 3.0}, {1.0, 5.0}, {1.5, 2.0}, {2.0, 1.5}};
  ASSERT_EQ(curve.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_DOUBLE_EQ(curve[k].first, expected[k].first) << "x of point " << k;
    EXPECT_DOUBLE_EQ(curve[k].second, expected[k].second) << "loss of point " << k << " (mean over ranks)";
  }
}

TEST(PlotsStatistics, LossCurveFallsBackToEpochLossWithoutBatchLosses) {
  TempDir dir;
  json j = run_file("train", 1, 64, {epoch(1, 0, 1, 1, 1, {}), epoch(2, 0, 1, 1, 1, {})});
  j["epochs"][0]["train_loss"] = 4.0;
  j["epochs"][1]["train_loss"] = 3.0;
  write_json(dir / "t.json", j);
  const auto curve = loss_curve(load_run(dir / "t.json"));
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_EQ(curve[0], std::make_pair(1.0, 4.0));
  EXPECT_EQ(curve[1], std::make_pair(2.0, 3.0));
}

TEST(PlotsStatistics, SpeedupsAreRatiosOfTheMeans) {
  Summary s;
  auto add = [&](const std::string& key, double time, double tps) {
    RunResult r;
    r.key = key;
    r.stats.training_time = {time, 0, 2};
    r.stats.tokens_per_sec = {tps, 0, 2};
    s.runs.push_back(r);
  };
  add("dp_single", 10, 1000);
  add("dp_multi", 6, 1800);
  add("model_parallel", 8, 500);
  compute_speedups(s);
  ASSERT_TRUE(s.speedups.dp_tokens_per_sec_ratio.has_value());
  EXPECT_DOUBLE_EQ(*s.speedups.dp_tokens_per_sec_ratio, 1.8) << "tokens/s world 2 / world 1";
  EXPECT_DOUBLE_EQ(*s.speedups.dp_training_time_speedup, 10.0 / 6.0) << "training time world 1 / world 2";
  EXPECT_FALSE(s.speedups.pp_tokens_per_sec_ratio.has_value()) << "no --pipeline run: no pipeline ratio";
  add("pipeline", 4, 1250);
  compute_speedups(s);
  EXPECT_DOUBLE_EQ(*s.speedups.pp_tokens_per_sec_ratio, 2.5) << "tokens/s pipeline / model parallel";
  EXPECT_DOUBLE_EQ(*s.speedups.pp_training_time_speedup, 2.0);
}

TEST(PlotsStatistics, EpochListsReadWell) {
  EXPECT_EQ(format_epochs({2, 3, 4}), "2-4");
  EXPECT_EQ(format_epochs({1}), "1");
  EXPECT_EQ(format_epochs({2, 4, 5}), "2,4,5");
}

}  // namespace
