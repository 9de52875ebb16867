// Problem 1.2 end to end: run_data_parallel as real Gloo worker processes on CPU,
// checked against one process training on the full batch.
//
// Each run takes a few steps with --save-grads; every rank writes the averaged gradient
// of its first step, its parameters after the last step, the example indices it used,
// and what it all-reduced. This test then rebuilds the same model in its own process,
// trains it on the union of the ranks' examples (the full global batch), and requires:
//   - every rank's averaged gradient == the full-batch gradient, for every parameter;
//   - every rank's parameters after the steps == the single-process parameters;
//   - the ranks' examples are disjoint, batch_size / world_size per rank per step;
//   - the bytes all-reduced in one step == the model's unique parameter bytes.
// Tolerance: |a - b| <= 1e-4 * max|reference| + 1e-7 for gradients, 1e-5 + 1e-4 * |b|
// for parameters: float32 sums taken in another order differ by ~1e-7 relative, while
// each wrong version below is off by 10-100 % of the gradient's scale.
// Also: the ranks' whole partitions are disjoint and of equal size.
// Caught: overlapping partitions, SUM without dividing, gradients dropped or left local,
// averaging after the optimizer step, the tied wte/lm_head weight reduced twice, ranks
// starting from different weights; stale or empty files cannot pass (fresh directory,
// every parameter required).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "dp_test_util.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "project/utils.h"
#include "train/loop.h"
#include "build_programs.h"


namespace {
namespace fs = std::filesystem;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 8;
constexpr double kLr = 1e-3;
constexpr uint64_t kSeed = 7;

// The tiny setup shared by the runs and the single-process reference.
struct Tiny {
  explicit Tiny(const dp_test::TempDir& dir) : root(dir.path()) {}
  std::string root;
  std::string data_dir() const { return root + "/data"; }
  std::string grads_dir() const { return root + "/grads"; }

  kit::DataConfig data_config() const {
    kit::DataConfig c;
    c.dir = data_dir();
    c.n_train = 96;
    c.n_valid = 16;
    c.n_test = 8;
    c.seq_len = 32;
    c.vocab_size = 200;
    return c;
  }
  std::vector<std::string> args() const {
    const auto c = data_config();
    return {kit_test::build_program("run_data_parallel"), "--preset", "tiny", "--dropout", "0", "--data-dir", c.dir,
            "--n-train", std::to_string(c.n_train), "--n-valid", std::to_string(c.n_valid),
            "--n-test", std::to_string(c.n_test), "--seq-len", std::to_string(c.seq_len),
            "--vocab-size", std::to_string(c.vocab_size), "--batch-size", std::to_string(kGlobalBatch),
            "--lr", std::to_string(kLr), "--seed", std::to_string(kSeed), "--threads", "1", "--no-progress",
            "--out", root + "/metrics/{rank}.json"};
  }
  std::vector<std::string> save_args() const {
    auto a = args();
    a.insert(a.end(), {"--save-grads", grads_dir(), "--steps", std::to_string(kSteps)});
    return a;
  }
};

// Runs the program, under a deadline, with the launch variables cleared unless given.
dp_test::RunResult run_program(const std::vector<std::string>& argv, Env env, const std::string& log,
                               double timeout_s = 90) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "KIT_STORE_HOSTED",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_STEPID"}) {
    bool given = false;
    for (const auto& e : env) given = given || e.first == v;
    if (!given && std::getenv(v)) env.push_back({v, ""});  // empty counts as unset
  }
  env.push_back({"KIT_DIST_TIMEOUT", "30"});
  return dp_test::run(argv, env, log, timeout_s);
}

struct Difference {
  double max_abs = 0;
  double allowed = 0;
  double ratio = 0;  // |actual| / |expected| in the largest entries: 2.0 = SUM without dividing
};

Difference compare(const torch::Tensor& actual, const torch::Tensor& expected, double rtol_of_max, double atol) {
  Difference d;
  const double scale = expected.abs().max().item<double>();
  d.max_abs = (actual - expected).abs().max().item<double>();
  d.allowed = rtol_of_max * scale + atol;
  d.ratio = actual.norm().item<double>() / std::max(expected.norm().item<double>(), 1e-30);
  return d;
}

std::string hint_for(const Difference& d) {
  if (std::abs(d.ratio - 2.0) < 0.05) return " (about 2x the full-batch gradient: summed over 2 ranks, not divided by world_size?)";
  if (std::abs(d.ratio - 0.5) < 0.05) return " (about half: divided by world_size twice, or reduced on one side only?)";
  return " (gradients not averaged across ranks, different examples, or different starting weights?)";
}

// Everything this file checks about one finished --save-grads run of `world` ranks.
void expect_matches_single_process(const Tiny& tiny, int world) {
  const int64_t per_rank = kGlobalBatch / world;
  std::vector<std::map<std::string, torch::Tensor>> ranks;
  for (int r = 0; r < world; ++r) {
    const std::string path = tiny.grads_dir() + "/rank" + std::to_string(r) + ".pt";
    ASSERT_TRUE(fs::exists(path)) << "rank " << r << " wrote no " << path;
    ranks.push_back(dp_test::load_rank_file(path));
    ASSERT_TRUE(ranks.back().count("indices")) << path << " has no example indices";
    ASSERT_EQ(ranks.back()["indices"].sizes(), torch::IntArrayRef({kSteps, per_rank}))
        << "rank " << r << " did not take " << kSteps << " steps of batch_size / world_size = " << per_rank;
  }

  // The ranks' examples: disjoint, within a step and over the steps.
  std::map<int64_t, std::string> seen;
  for (int r = 0; r < world; ++r) {
    auto idx = ranks[r]["indices"];
    for (int64_t k = 0; k < kSteps; ++k)
      for (int64_t i = 0; i < per_rank; ++i) {
        const int64_t ex = idx[k][i].item<int64_t>();
        const std::string where = "rank " + std::to_string(r) + " step " + std::to_string(k);
        auto [it, fresh] = seen.emplace(ex, where);
        ASSERT_TRUE(fresh) << "example " << ex << " was used by " << it->second << " and by " << where
                           << ": the ranks' partitions overlap";
      }
  }

  // The ranks' whole partitions: disjoint, and together W equal shares of the data.
  std::map<int64_t, int> owner;
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(ranks[r].count("partition")) << "rank " << r << " saved no partition";
    const auto part = ranks[r]["partition"];
    EXPECT_EQ(part.numel(), ranks[0]["partition"].numel()) << "rank " << r << "'s partition differs in size from rank 0's";
    for (int64_t i = 0; i < part.numel(); ++i) {
      const int64_t ex = part[i].item<int64_t>();
      auto [it, fresh] = owner.emplace(ex, r);
      ASSERT_TRUE(fresh) << "example " << ex << " is in the partitions of rank " << it->second << " and rank " << r
                         << ": the ranks' partitions overlap";
    }
  }

  // The reference: one process, the same model and seed, the union of the ranks' examples.
  auto data = kit::load_training_data(tiny.data_config());
  kit::GPT2Config mc = kit::gpt2_preset("tiny");
  mc.dropout = 0;
  auto model = kit::build_model(mc, data.tokenizer->vocab_size(), tiny.data_config().seq_len, kSeed);
  kit::TrainConfig tc;
  tc.lr = kLr;
  auto opt = kit::make_optimizer(*model, tc);
  auto forward = [&](const torch::Tensor& x) { return model->forward(x); };
  std::map<std::string, torch::Tensor> ref_grads;
  for (int64_t k = 0; k < kSteps; ++k) {
    std::vector<kit::Example> full_batch;
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < per_rank; ++i) full_batch.push_back(data.train->get(ranks[r]["indices"][k][i].item<int64_t>()));
    kit::train_step(forward, *model, *opt, kit::collate(full_batch), 1);
    if (k == 0)
      for (const auto& p : model->named_parameters()) ref_grads[p.key()] = p.value().grad().detach().clone();
  }

  int64_t unique_bytes = 0;
  for (const auto& p : model->parameters()) unique_bytes += p.numel() * static_cast<int64_t>(p.element_size());

  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(world));
    auto& got = ranks[r];
    for (const auto& p : model->named_parameters()) {
      const std::string g = "grad/" + p.key(), w = "param/" + p.key();
      ASSERT_TRUE(got.count(g) && got[g].defined() && got[g].numel() > 0)
          << "no averaged gradient saved for " << p.key() << " (every parameter needs one)";
      ASSERT_EQ(got[g].sizes(), p.value().sizes()) << p.key();
      const Difference dg = compare(got[g], ref_grads[p.key()], 1e-4, 1e-7);
      EXPECT_LE(dg.max_abs, dg.allowed) << "gradient of " << p.key() << " after step 1 differs from the single-process "
                                        << "full-batch gradient: max abs difference " << dg.max_abs << " (allowed "
                                        << dg.allowed << "), norm ratio " << dg.ratio << hint_for(dg);
      ASSERT_TRUE(got.count(w) && got[w].defined()) << "no parameter saved for " << p.key();
      const double diff = (got[w] - p.value().detach()).abs().max().item<double>();
      const double allowed = 1e-5 + 1e-4 * p.value().abs().max().item<double>();
      EXPECT_LE(diff, allowed) << "parameter " << p.key() << " after " << kSteps << " steps differs from the "
                               << "single-process run by up to " << diff << " (allowed " << allowed
                               << "): every rank must step with the averaged gradient, averaged before "
                                  "optimizer.step(), from the same starting weights";
    }
    if (world > 1) {
      ASSERT_TRUE(got.count("allreduce_bytes_step0"));
      const int64_t bytes = got["allreduce_bytes_step0"].item<int64_t>();
      EXPECT_EQ(bytes, unique_bytes)
          << "one step all-reduced " << bytes << " bytes, the model's parameters hold " << unique_bytes
          << " bytes: each gradient must be reduced exactly once (the tied wte/lm_head weight is one parameter; "
          << (bytes > unique_bytes ? "something was reduced twice)" : "some gradient was not reduced)");
      EXPECT_GE(got["allreduce_calls_step0"].item<int64_t>(), 1);
    }
  }
}

std::string describe(const dp_test::RunResult& r) {
  std::ostringstream s;
  s << "exit code " << r.exitcode << (r.timed_out ? " (killed at the deadline)" : "") << " after " << r.seconds
    << " s; output:\n" << r.output;
  return s.str();
}

// Runs the program in `dir` on `world` ranks that the kit starts, saving the gradients, and
// checks them against one process on the full batch.
void expect_kit_started_world_matches_one_process(const dp_test::TempDir& dir, int world) {
  Tiny tiny(dir);
  auto args = tiny.save_args();
  args.insert(args.end(), {"--world-size", std::to_string(world)});
  auto r = run_program(args, {}, dir / "run.log");
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  expect_matches_single_process(tiny, world);
}

TEST(DataParallelRun, TwoRanksStartedByTheKitMatchOneProcessOnTheFullBatch) {
  dp_test::TempDir dir("kit2");
  ASSERT_NO_FATAL_FAILURE(expect_kit_started_world_matches_one_process(dir, 2));
  EXPECT_EQ(dp_test::leftovers_after(dir.path(), 5), std::vector<std::string>{});
}

// torchrun-style: the test starts the two ranks itself with RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rank 0 serves the rendezvous.
using EnvList = std::vector<std::pair<std::string, std::string>>;

// Starts two ranks of the program the way an outside launcher would: each with its own
// environment (no kit launcher, no store served by a parent), then checks them.
void run_two_ranks_from_environment(const char* name,
                                    const std::function<EnvList(int rank, const std::string& port)>& env) {
  dp_test::TempDir dir(name);
  Tiny tiny(dir);
  // Rank 0 prepares the data while rank 1 waits; both then read it. Prepare it first
  // here anyway so the ranks start together.
  kit::load_training_data(tiny.data_config());
  const std::string port = std::to_string(dp_test::free_port());
  std::vector<kit::Process> ranks;
  for (int r = 0; r < 2; ++r) {
    kit::Command cmd;
    cmd.argv = tiny.save_args();
    cmd.env = env(r, port);
    cmd.env.insert(cmd.env.end(), {{"KIT_STORE_HOSTED", ""}, {"KIT_DIST_TIMEOUT", "30"}});
    cmd.output = dir / ("rank" + std::to_string(r) + ".log");
    ranks.emplace_back(cmd, r);
  }
  for (auto& p : ranks) p.start();
  for (auto& p : ranks) {
    if (!p.join_for(std::chrono::seconds(90))) p.kill();
    p.join();
  }
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(ranks[r].exitcode(), std::optional<int>(0))
        << "rank " << r << " " << ranks[r].describe_exit() << ":\n" << dp_test::read_file(dir / ("rank" + std::to_string(r) + ".log"));
  expect_matches_single_process(tiny, 2);
}

TEST(DataParallelRun, TwoRanksFromTorchrunStyleVariablesMatchOneProcess) {
  run_two_ranks_from_environment("torchrun", [](int r, const std::string& port) -> EnvList {
    return {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
            {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  });
}

// What srun gives each task of a step (the port is set as a job script may, so that
// concurrent test runs never share one).
TEST(DataParallelRun, TwoRanksFromSrunVariablesMatchOneProcess) {
  run_two_ranks_from_environment("srun", [](int r, const std::string& port) -> EnvList {
    return {{"SLURM_PROCID", std::to_string(r)}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", std::to_string(r)},
            {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "4242"}, {"SLURM_NODELIST", "localhost"},
            {"SLURM_STEP_NODELIST", "localhost"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
            {"RANK", ""}, {"WORLD_SIZE", ""}};
  });
}

// The overlapped all-reduce (data_parallel/grad_buckets.h, given code) must give what
// average_gradients gives: the same averaged gradients and, after 3 steps, the same
// weights, from the same bytes. Small buckets, so that several all-reduces run during
// backward.
TEST(DataParallelBucketed, OverlappedBucketsGiveWhatAverageGradientsGives) {
  dp_test::TempDir dir("bucketed");
  Tiny tiny(dir);
  auto args = tiny.save_args();
  args.insert(args.end(), {"--world-size", "2"});
  auto r = run_program(args, {}, dir / "average.log");
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  std::vector<std::map<std::string, torch::Tensor>> averaged;
  for (int rank = 0; rank < 2; ++rank)
    averaged.push_back(dp_test::load_rank_file(tiny.grads_dir() + "/rank" + std::to_string(rank) + ".pt"));
  fs::remove_all(tiny.grads_dir());

  args.insert(args.end(), {"--bucket-mb", "0.01"});  // ~10 KB: the tiny model fills several buckets
  r = run_program(args, {}, dir / "bucketed.log");
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  expect_matches_single_process(tiny, 2);
  for (int rank = 0; rank < 2; ++rank) {
    auto got = dp_test::load_rank_file(tiny.grads_dir() + "/rank" + std::to_string(rank) + ".pt");
    EXPECT_GT(got["allreduce_calls_step0"].item<int64_t>(), 2) << "the buckets were not small enough to test overlap";
    for (const auto& [key, want] : averaged[rank]) {
      if (key.rfind("grad/", 0) != 0 && key.rfind("param/", 0) != 0) continue;
      ASSERT_TRUE(got.count(key) && got[key].defined()) << "the bucketed run saved no " << key;
      const double diff = (got[key] - want).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6) << "rank " << rank << ": " << key << " differs between --bucket-mb 0.01 and "
                            << "average_gradients by " << diff;
    }
  }
}

TEST(DataParallelRun, AWorldOfOneMatchesOneProcess) {
  dp_test::TempDir dir("world1");
  expect_kit_started_world_matches_one_process(dir, 1);
}

TEST(DataParallelRun, TrainsEpochsAndWritesEachRanksMetrics) {
  dp_test::TempDir dir("epochs");
  Tiny tiny(dir);
  auto args = tiny.args();
  args.insert(args.end(), {"--world-size", "2", "--epochs", "2", "--max-batches", "2"});
  auto r = run_program(args, {}, dir / "run.log");
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir / ("metrics/" + std::to_string(rank) + ".json");
    ASSERT_TRUE(fs::exists(path)) << path << "\n" << r.output;
    auto j = nlohmann::json::parse(dp_test::read_file(path));
    ASSERT_EQ(j["epochs"].size(), 2u);
    EXPECT_EQ(j["run"]["world_size"], 2);
    EXPECT_EQ(j["run"]["per_rank_batch_size"], kGlobalBatch / 2);
    for (const auto& e : j["epochs"]) {
      EXPECT_EQ(e["rank"], rank);
      EXPECT_EQ(e["batches"], 2);
      EXPECT_EQ(e["tokens"], 2 * (kGlobalBatch / 2) * tiny.data_config().seq_len) << "tokens = batches * B * T per rank";
      EXPECT_GT(e["tokens_per_sec"].get<double>(), 0);
      EXPECT_TRUE(e["validation_loss"].is_number());
    }
  }
  EXPECT_NE(r.output.find("tokens/s (sum over ranks)"), std::string::npos) << r.output;
}

// ------------------------------------------------------------------ failures

TEST(DataParallelFailure, AFailingRankStopsTheRunWithinSecondsAndIsNamed) {
  dp_test::TempDir dir("fail");
  Tiny tiny(dir);
  auto args = tiny.save_args();
  args.insert(args.end(), {"--world-size", "2", "--fail-rank", "1"});
  auto r = run_program(args, {}, dir / "run.log", 60);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_NE(r.exitcode, 0) << describe(r);
  EXPECT_LT(r.seconds, 30) << describe(r);
  EXPECT_NE(r.output.find("worker rank 1 exited with status 1"), std::string::npos)
      << "the launcher must name the failed rank first; " << describe(r);
  EXPECT_NE(r.output.find("fails on purpose"), std::string::npos) << "the rank's own error must be shown; "
                                                                   << describe(r);
  EXPECT_EQ(dp_test::leftovers_after(dir.path(), 5), std::vector<std::string>{}) << "processes left behind";
}

TEST(DataParallelFailure, ABusyPortIsAClearErrorNotAHang) {
  dp_test::TempDir dir("busy");
  Tiny tiny(dir);
  dp_test::BusyPort busy;
  const std::string port = std::to_string(busy.port());
  // The kit's launcher serves the rendezvous itself ...
  auto args = tiny.save_args();
  args.insert(args.end(), {"--world-size", "2", "--port", port});
  auto r = run_program(args, {}, dir / "launcher.log", 60);
  EXPECT_EQ(r.exitcode, 1) << describe(r);
  EXPECT_LT(r.seconds, 20) << describe(r);
  EXPECT_NE(r.output.find("port " + port + ": the port is already in use"), std::string::npos) << describe(r);
  EXPECT_NE(r.output.find("--port 0"), std::string::npos) << "the message must say how to fix it; " << describe(r);
  // ... and under torchrun-style variables rank 0 serves it.
  auto r0 = run_program(tiny.save_args(),
                        {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}},
                        dir / "rank0.log", 60);
  EXPECT_EQ(r0.exitcode, 1) << describe(r0);
  EXPECT_NE(r0.output.find("port " + port + ": the port is already in use"), std::string::npos) << describe(r0);
  EXPECT_EQ(dp_test::leftovers_after(dir.path(), 5), std::vector<std::string>{}) << "processes left behind";
}

TEST(DataParallelFailure, ABatchThatDoesNotSplitIsRejectedBeforeStarting) {
  dp_test::TempDir dir("batch");
  Tiny tiny(dir);
  auto args = tiny.args();
  args.insert(args.end(), {"--world-size", "3"});  // global batch 8
  auto r = run_program(args, {}, dir / "run.log", 30);
  EXPECT_EQ(r.exitcode, 1) << describe(r);
  EXPECT_NE(r.output.find("not divisible by --world-size 3"), std::string::npos) << describe(r);
}

}  // namespace
