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
//
// Subject and judge (tests/judge/judge.h): the program runs the student's code, so it runs in
// each case's subject part, which records what it did (exit code, output, seconds, processes
// left behind) and the contents of the ranks' files as tensors. The single-process reference
// is the judge's, computed with the kit's given code only (the model, masked_cross_entropy,
// AdamW: the step written out below), never with the student's train_step: a train_step that
// is wrong at world size 1 must not hide an average_gradients that is wrong at world size 2.
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
#include "process_harness.h"
#include "judge/judge.h"
#include "judge/run_result.h"
#include "judge/tensor.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "project/loop.h"
#include "train/loss.h"
#include "build_programs.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "env_guard.h"
#include "project/run_data_parallel.h"


namespace {
namespace fs = std::filesystem;
namespace judge = kit::judge;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 8;
constexpr double kLr = 1e-3;
constexpr uint64_t kSeed = 7;

// The tiny setup shared by the runs and the single-process reference.
struct Tiny {
  explicit Tiny(const kit_test::TempDir& dir) : root(dir.path()) {}
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
kit_test::RunResult run_program(const std::vector<std::string>& argv, Env env, const std::string& log,
                               double timeout_s = 90) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "KIT_STORE_HOSTED",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_STEPID"}) {
    bool given = false;
    for (const auto& e : env) given = given || e.first == v;
    if (!given && std::getenv(v)) env.push_back({v, ""});  // empty counts as unset
  }
  env.push_back({"KIT_DIST_TIMEOUT", "30"});
  return kit_test::run(argv, env, log, timeout_s);
}

// ------------------------------------------------------------------ records

// A program run as data: what a subject part records of it, and the judge reads back.
void put_run(judge::Record& out, const std::string& name, const kit_test::RunResult& r) { out.put(name, r); }
kit_test::RunResult get_run(const judge::Record& got, const std::string& name) {
  return got.get<kit_test::RunResult>(name);
}

using RankFile = std::map<std::string, torch::Tensor>;

// The subject's record of a finished --save-grads run of `world` ranks: each rank's file (its
// path, whether it exists, its tensors by key), under `name`.
void put_rank_files(judge::Record& out, const std::string& name, const Tiny& tiny, int world) {
  std::vector<std::string> paths;
  std::vector<bool> present;
  std::vector<RankFile> files;
  for (int r = 0; r < world; ++r) {
    const std::string path = tiny.grads_dir() + "/rank" + std::to_string(r) + ".pt";
    paths.push_back(path);
    present.push_back(fs::exists(path));
    files.push_back(present.back() ? kit_test::load_rank_file(path) : RankFile{});
  }
  out.put(name + "/paths", paths);
  out.put(name + "/present", present);
  out.put(name + "/files", files);
}

struct RankFiles {
  std::vector<std::string> paths;
  std::vector<bool> present;
  std::vector<RankFile> files;
};
RankFiles get_rank_files(const judge::Record& got, const std::string& name) {
  RankFiles f;
  f.paths = got.get<std::vector<std::string>>(name + "/paths");
  f.present = got.get<std::vector<bool>>(name + "/present");
  f.files = got.get<std::vector<RankFile>>(name + "/files");
  return f;
}

// ------------------------------------------------------------------ the judge's reference

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

// One single-process training step, written out with the kit's given code (what train_step
// does at world size 1): the judge's reference never calls the student's train_step.
void reference_step(kit::GPT2& model, torch::optim::Optimizer& opt, const kit::Batch& batch) {
  opt.zero_grad();
  auto logits = model->forward(batch.input);
  auto loss = kit::masked_cross_entropy(logits, batch.labels, batch.mask);
  loss.backward();
  opt.step();
}

// In a JUDGE part: everything this file checks about one finished --save-grads run of `world`
// ranks, whose files the subject recorded (put_rank_files), against one process training on
// the union of the ranks' examples, computed here.
void expect_matches_single_process(const Tiny& tiny, int world, const RankFiles& files) {
  const int64_t per_rank = kGlobalBatch / world;
  ASSERT_EQ(files.present.size(), static_cast<size_t>(world));
  ASSERT_TRUE(files.files.size() == files.present.size() && files.paths.size() == files.present.size());
  std::vector<RankFile> ranks;
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(files.present[r]) << "rank " << r << " wrote no " << files.paths[r];
    ranks.push_back(files.files[r]);
    ASSERT_TRUE(ranks.back().count("indices") && ranks.back()["indices"].defined())
        << files.paths[r] << " has no example indices";
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
    ASSERT_TRUE(ranks[r].count("partition") && ranks[r]["partition"].defined()) << "rank " << r << " saved no partition";
    const auto part = ranks[r]["partition"];
    EXPECT_EQ(part.numel(), ranks[0]["partition"].numel()) << "rank " << r << "'s partition differs in size from rank 0's";
    for (int64_t i = 0; i < part.numel(); ++i) {
      const int64_t ex = part.flatten()[i].item<int64_t>();
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
  std::map<std::string, torch::Tensor> ref_grads;
  for (int64_t k = 0; k < kSteps; ++k) {
    std::vector<kit::Example> full_batch;
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < per_rank; ++i) {
        const int64_t ex = ranks[r]["indices"][k][i].item<int64_t>();
        ASSERT_TRUE(ex >= 0 && ex < data.train->size())
            << "rank " << r << " step " << k << " used example " << ex << ", which is not in the training set of "
            << data.train->size();
        full_batch.push_back(data.train->get(ex));
      }
    reference_step(model, *opt, kit::collate(full_batch));
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
      ASSERT_EQ(got[w].sizes(), p.value().sizes()) << p.key();
      const double diff = (got[w] - p.value().detach()).abs().max().item<double>();
      const double allowed = 1e-5 + 1e-4 * p.value().abs().max().item<double>();
      EXPECT_LE(diff, allowed) << "parameter " << p.key() << " after " << kSteps << " steps differs from the "
                               << "single-process run by up to " << diff << " (allowed " << allowed
                               << "): every rank must step with the averaged gradient, averaged before "
                                  "optimizer.step(), from the same starting weights";
    }
    if (world > 1) {
      ASSERT_TRUE(got.count("allreduce_bytes_step0") && got["allreduce_bytes_step0"].numel() == 1);
      const int64_t bytes = got["allreduce_bytes_step0"].item<int64_t>();
      EXPECT_EQ(bytes, unique_bytes)
          << "one step all-reduced " << bytes << " bytes, the model's parameters hold " << unique_bytes
          << " bytes: each gradient must be reduced exactly once (the tied wte/lm_head weight is one parameter; "
          << (bytes > unique_bytes ? "something was reduced twice)" : "some gradient was not reduced)");
      ASSERT_TRUE(got.count("allreduce_calls_step0") && got["allreduce_calls_step0"].numel() == 1);
      EXPECT_GE(got["allreduce_calls_step0"].item<int64_t>(), 1);
    }
  }
}

std::string describe(const kit_test::RunResult& r) {
  std::ostringstream s;
  s << "exit code " << r.exitcode << (r.timed_out ? " (killed at the deadline)" : "") << " after " << r.seconds
    << " s; output:\n" << r.output;
  return s.str();
}

// ------------------------------------------------------------------ runs

// Runs the program in `dir` on `world` ranks that the kit starts, saving the gradients, and
// checks them against one process on the full batch; with `leftovers`, also that no process
// of the run outlives it.
void expect_kit_started_world_matches_one_process(const kit_test::TempDir& dir, int world, bool leftovers = false) {
  Tiny tiny(dir);
  const judge::Record got = judge::subject(
      [&](judge::Record& out) {
        auto args = tiny.save_args();
        args.insert(args.end(), {"--world-size", std::to_string(world)});
        const auto r = run_program(args, {}, dir / "run.log");
        put_run(out, "run", r);
        if (r.exitcode == 0) put_rank_files(out, "files", tiny, world);
        if (leftovers) out.put("leftovers", kit_test::leftovers_after(dir.path(), 5));
      },
      "run_data_parallel --world-size " + std::to_string(world));
  if (!judge::judging()) return;
  const auto r = get_run(got, "run");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  ASSERT_NO_FATAL_FAILURE(expect_matches_single_process(tiny, world, get_rank_files(got, "files")));
  if (leftovers) EXPECT_EQ(got.get<std::vector<std::string>>("leftovers"), std::vector<std::string>{});
}

TEST(DataParallelRun, TwoRanksStartedByTheKitMatchOneProcessOnTheFullBatch) {
  kit_test::TempDir dir("kit2");
  expect_kit_started_world_matches_one_process(dir, 2, /*leftovers=*/true);
}

// torchrun-style: the test starts the two ranks itself with RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rank 0 serves the rendezvous.
using EnvList = std::vector<std::pair<std::string, std::string>>;

// Starts two ranks of the program the way an outside launcher would: each with its own
// environment (no kit launcher, no store served by a parent), then checks them.
void run_two_ranks_from_environment(const char* name,
                                    const std::function<EnvList(int rank, const std::string& port)>& env) {
  kit_test::TempDir dir(name);
  Tiny tiny(dir);
  const judge::Record got = judge::subject(
      [&](judge::Record& out) {
        // Rank 0 prepares the data while rank 1 waits; both then read it. Prepare it first
        // here anyway so the ranks start together.
        kit::load_training_data(tiny.data_config());
        const std::string port = std::to_string(kit_test::free_port());
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
        std::vector<std::optional<int>> exitcodes;
        std::vector<std::string> exits, logs;
        for (int r = 0; r < 2; ++r) {
          exitcodes.push_back(ranks[r].exitcode());
          exits.push_back(ranks[r].describe_exit());
          logs.push_back(kit_test::read_file(dir / ("rank" + std::to_string(r) + ".log")));
        }
        out.put("exitcodes", exitcodes);
        out.put("exits", exits);
        out.put("logs", logs);
        put_rank_files(out, "files", tiny, 2);
      },
      name);
  if (!judge::judging()) return;
  const auto exitcodes = got.get<std::vector<std::optional<int>>>("exitcodes");
  const auto exits = got.get<std::vector<std::string>>("exits");
  const auto logs = got.get<std::vector<std::string>>("logs");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(exitcodes.size() == 2 && exits.size() == 2 && logs.size() == 2);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(exitcodes[r], std::optional<int>(0)) << "rank " << r << " " << exits[r] << ":\n" << logs[r];
  expect_matches_single_process(tiny, 2, get_rank_files(got, "files"));
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
  kit_test::TempDir dir("bucketed");
  Tiny tiny(dir);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    auto args = tiny.save_args();
    args.insert(args.end(), {"--world-size", "2"});
    auto r = run_program(args, {}, dir / "average.log");
    put_run(out, "average", r);
    if (r.exitcode != 0) return;
    put_rank_files(out, "averaged", tiny, 2);
    fs::remove_all(tiny.grads_dir());

    args.insert(args.end(), {"--bucket-mb", "0.01"});  // ~10 KB: the tiny model fills several buckets
    r = run_program(args, {}, dir / "bucketed.log");
    put_run(out, "bucketed", r);
    if (r.exitcode == 0) put_rank_files(out, "files", tiny, 2);
  });
  if (!judge::judging()) return;
  auto r = get_run(got, "average");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  const RankFiles averaged = get_rank_files(got, "averaged");
  r = get_run(got, "bucketed");
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  const RankFiles bucketed = get_rank_files(got, "files");
  expect_matches_single_process(tiny, 2, bucketed);
  ASSERT_TRUE(averaged.files.size() == 2 && bucketed.files.size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    auto got_rank = bucketed.files[rank];
    ASSERT_TRUE(got_rank.count("allreduce_calls_step0") && got_rank["allreduce_calls_step0"].numel() == 1);
    EXPECT_GT(got_rank["allreduce_calls_step0"].item<int64_t>(), 2) << "the buckets were not small enough to test overlap";
    for (const auto& [key, want] : averaged.files[rank]) {
      if (key.rfind("grad/", 0) != 0 && key.rfind("param/", 0) != 0) continue;
      ASSERT_TRUE(got_rank.count(key) && got_rank[key].defined()) << "the bucketed run saved no " << key;
      const double diff = (got_rank[key] - want).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6) << "rank " << rank << ": " << key << " differs between --bucket-mb 0.01 and "
                            << "average_gradients by " << diff;
    }
  }
}

TEST(DataParallelRun, AWorldOfOneMatchesOneProcess) {
  kit_test::TempDir dir("world1");
  expect_kit_started_world_matches_one_process(dir, 1);
}

TEST(DataParallelRun, TrainsEpochsAndWritesEachRanksMetrics) {
  kit_test::TempDir dir("epochs");
  Tiny tiny(dir);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    auto args = tiny.args();
    args.insert(args.end(), {"--world-size", "2", "--epochs", "2", "--max-batches", "2"});
    const auto r = run_program(args, {}, dir / "run.log");
    put_run(out, "run", r);
    std::vector<std::string> paths, metrics;
    std::vector<bool> present;
    for (int rank = 0; rank < 2; ++rank) {
      paths.push_back(dir / ("metrics/" + std::to_string(rank) + ".json"));
      present.push_back(fs::exists(paths.back()));
      metrics.push_back(present.back() ? kit_test::read_file(paths.back()) : std::string());
    }
    out.put("paths", paths);
    out.put("present", present);
    out.put("metrics", metrics);
  });
  if (!judge::judging()) return;
  const auto r = get_run(got, "run");
  const auto paths = got.get<std::vector<std::string>>("paths");
  const auto present = got.get<std::vector<bool>>("present");
  const auto metrics = got.get<std::vector<std::string>>("metrics");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(r.exitcode, 0) << describe(r);
  ASSERT_TRUE(paths.size() == 2 && present.size() == 2 && metrics.size() == 2);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(present[rank]) << paths[rank] << "\n" << r.output;
    const auto j = nlohmann::json::parse(metrics[rank], nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << paths[rank] << " is not JSON:\n" << metrics[rank];
    ASSERT_TRUE(j.is_object() && j.contains("epochs") && j["epochs"].is_array() && j.contains("run"))
        << paths[rank] << ":\n" << metrics[rank];
    ASSERT_EQ(j["epochs"].size(), 2u);
    EXPECT_EQ(j["run"]["world_size"], 2);
    EXPECT_EQ(j["run"]["per_rank_batch_size"], kGlobalBatch / 2);
    for (const auto& e : j["epochs"]) {
      EXPECT_EQ(e["rank"], rank);
      EXPECT_EQ(e["batches"], 2);
      EXPECT_EQ(e["tokens"], 2 * (kGlobalBatch / 2) * tiny.data_config().seq_len) << "tokens = batches * B * T per rank";
      ASSERT_TRUE(e["tokens_per_sec"].is_number()) << paths[rank] << ": tokens_per_sec";
      EXPECT_GT(e["tokens_per_sec"].get<double>(), 0);
      EXPECT_TRUE(e["validation_loss"].is_number());
    }
  }
  EXPECT_NE(r.output.find("tokens/s (sum over ranks)"), std::string::npos) << r.output;
}

// ------------------------------------------------------------------ failures

TEST(DataParallelFailure, AFailingRankStopsTheRunWithinSecondsAndIsNamed) {
  kit_test::TempDir dir("fail");
  Tiny tiny(dir);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    auto args = tiny.save_args();
    args.insert(args.end(), {"--world-size", "2", "--fail-rank", "1"});
    put_run(out, "run", run_program(args, {}, dir / "run.log", 60));
    out.put("leftovers", kit_test::leftovers_after(dir.path(), 5));
  });
  if (!judge::judging()) return;
  const auto r = get_run(got, "run");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_NE(r.exitcode, 0) << describe(r);
  EXPECT_LT(r.seconds, 30) << describe(r);
  EXPECT_NE(r.output.find("worker rank 1 exited with status 1"), std::string::npos)
      << "the launcher must name the failed rank first; " << describe(r);
  EXPECT_NE(r.output.find("fails on purpose"), std::string::npos) << "the rank's own error must be shown; "
                                                                   << describe(r);
  EXPECT_EQ(got.get<std::vector<std::string>>("leftovers"), std::vector<std::string>{}) << "processes left behind";
}

TEST(DataParallelFailure, ABusyPortIsAClearErrorNotAHang) {
  kit_test::TempDir dir("busy");
  Tiny tiny(dir);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit_test::BusyPort busy;
    const std::string port = std::to_string(busy.port());
    out.put("port", port);
    // The kit's launcher serves the rendezvous itself ...
    auto args = tiny.save_args();
    args.insert(args.end(), {"--world-size", "2", "--port", port});
    put_run(out, "launcher", run_program(args, {}, dir / "launcher.log", 60));
    // ... and under torchrun-style variables rank 0 serves it.
    put_run(out, "rank0",
            run_program(tiny.save_args(),
                        {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}},
                        dir / "rank0.log", 60));
    out.put("leftovers", kit_test::leftovers_after(dir.path(), 5));
  });
  if (!judge::judging()) return;
  const auto port = got.get<std::string>("port");
  const auto r = get_run(got, "launcher"), r0 = get_run(got, "rank0");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(r.exitcode, 1) << describe(r);
  EXPECT_LT(r.seconds, 20) << describe(r);
  EXPECT_NE(r.output.find("port " + port + ": the port is already in use"), std::string::npos) << describe(r);
  EXPECT_NE(r.output.find("--port 0"), std::string::npos) << "the message must say how to fix it; " << describe(r);
  EXPECT_EQ(r0.exitcode, 1) << describe(r0);
  EXPECT_NE(r0.output.find("port " + port + ": the port is already in use"), std::string::npos) << describe(r0);
  EXPECT_EQ(got.get<std::vector<std::string>>("leftovers"), std::vector<std::string>{}) << "processes left behind";
}

// setup passes its backend on to the dist layer: an unknown one is its error, not a Gloo world.
TEST(DataParallelFailure, SetupPassesItsBackendOnSoAnUnknownOneIsAnError) {
  kit::RendezvousServer server(0);  // somewhere to meet, should setup start a world anyway
  kit_test::EnvGuard env({"MASTER_ADDR", "MASTER_PORT", "KIT_STORE_HOSTED", "KIT_DIST_TIMEOUT"});
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", std::to_string(server.rendezvous().master_port));
  env.set("KIT_STORE_HOSTED", "1");
  env.set("KIT_DIST_TIMEOUT", "10");
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("setup", [] { kit::setup(0, 1, "mpi"); });
    kit::dist::destroy_process_group();
  });
  if (!judge::judging()) return;
  const auto o = got.get<judge::Outcome>("setup");
  EXPECT_EQ(o.kind, "kit::Error") << "setup(0, 1, \"mpi\"): " << o.describe();
  EXPECT_NE(o.message.find("unknown backend 'mpi'"), std::string::npos)
      << "setup(rank, world_size, backend) must hand `backend` to dist::init_process_group (a backend it does not "
         "know is its error); got: " << o.describe();
}

TEST(DataParallelFailure, ABatchThatDoesNotSplitIsRejectedBeforeStarting) {
  kit_test::TempDir dir("batch");
  Tiny tiny(dir);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    auto args = tiny.args();
    args.insert(args.end(), {"--world-size", "3"});  // global batch 8
    put_run(out, "run", run_program(args, {}, dir / "run.log", 30));
  });
  if (!judge::judging()) return;
  const auto r = get_run(got, "run");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(r.exitcode, 1) << describe(r);
  EXPECT_NE(r.output.find("not divisible by --world-size 3"), std::string::npos) << describe(r);
}

}  // namespace
