// Problem 2.2: Pipe::forward and Pipe::compute. A pipe must compute exactly what the
// plain Sequential computes, outputs AND gradients, for any batch and micro-batch size,
// on the CPU (every stage a worker thread), and must report a stage's error, not hang.
// The subject parts run the pipe and record what it produced and what its stages saw; the plain
// model's outputs and gradients, and every check, are the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <mutex>

#include "judge/judge.h"
#include "judge/tensor.h"
#include "kit/errors.h"
#include "pipeline/pipe.h"
#include "pipeline_test_util.h"

namespace kit {
namespace {

using test::Affine;
using test::max_abs_diff;
using test::Probe;
using test::run_with_timeout;
using test::stage;  // pipeline_test_util.h: a stage on the CPU

constexpr double kTol = 1e-10;  // float64 throughout: a correct pipe agrees to rounding
constexpr double kHangSeconds = 20;

// Three stages, parameters on every stage and a parameter-free layer pinned to stage 1.
torch::nn::Sequential three_stage_model() {
  torch::manual_seed(7);
  torch::nn::Sequential seq(WithDevice(torch::nn::Linear(5, 8), stage(0)), WithDevice(torch::nn::Tanh(), stage(0)),
                            WithDevice(torch::nn::Linear(8, 8), stage(1)), WithDevice(Affine(0.5, 0.25), stage(1)),
                            WithDevice(torch::nn::Linear(8, 3), stage(2)));
  seq->to(torch::kFloat64);
  return seq;
}

struct Gradients {
  torch::Tensor output, input_grad;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  void put(judge::Record& out) const {
    out.put("output", output);
    out.put("input_grad", input_grad);
    out.put("params", params);
  }
  static Gradients get(const judge::Record& got) {
    return {got.get<torch::Tensor>("output"), got.get<torch::Tensor>("input_grad"),
            got.get<std::vector<std::pair<std::string, torch::Tensor>>>("params")};
  }
};

// Runs `forward` on x, backpropagates a fixed weighted sum of the output (so every row and
// column counts differently), and collects the gradients.
Gradients run(const std::function<torch::Tensor(const torch::Tensor&)>& forward, torch::nn::Module& model,
              const torch::Tensor& x_in, const torch::Tensor& weights) {
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  auto x = x_in.clone().requires_grad_(true);
  Gradients g;
  g.output = forward(x);
  (g.output * weights).sum().backward();
  g.input_grad = x.grad().defined() ? x.grad().clone() : torch::Tensor();
  for (const auto& p : model.named_parameters())
    g.params.emplace_back(p.key(), p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor());
  return g;
}

// Compares micro-batch by micro-batch, so a failure names the micro-batch.
void expect_same_output(const torch::Tensor& want, const torch::Tensor& got, int64_t split_size,
                        const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": the pipe returned an undefined tensor";
  ASSERT_EQ(got.sizes(), want.sizes()) << what << ": output shape " << got.sizes() << ", expected " << want.sizes()
                                       << " (were all micro-batches concatenated?)";
  const int64_t B = want.size(0);
  for (int64_t i = 0, row = 0; row < B; ++i, row += split_size) {
    const int64_t end = std::min(B, row + split_size);
    const double d = max_abs_diff(want.slice(0, row, end), got.slice(0, row, end));
    EXPECT_LE(d, kTol) << what << ": micro-batch " << i << " (rows " << row << ".." << end - 1
                       << ") differs from the plain model, max abs difference " << d;
  }
}

void expect_same_gradients(const Gradients& want, const Gradients& got, const std::string& what) {
  ASSERT_EQ(want.params.size(), got.params.size());
  for (size_t k = 0; k < want.params.size(); ++k) {
    const auto& [name, g_want] = want.params[k];
    const auto& g_got = got.params[k].second;
    ASSERT_TRUE(g_got.defined()) << what << ": parameter " << name
                                 << " got no gradient through the pipe (was the graph recorded in the workers?)";
    const double d = max_abs_diff(g_want, g_got);
    EXPECT_LE(d, kTol) << what << ": gradient of parameter " << name << " differs, max abs difference " << d;
  }
  ASSERT_TRUE(got.input_grad.defined()) << what << ": the input got no gradient through the pipe";
  EXPECT_LE(max_abs_diff(want.input_grad, got.input_grad), kTol) << what << ": gradient of the input differs";
}

// ---- outputs and gradients equal the plain model's, over batch x micro-batch sizes ----

struct Sizes {
  int64_t batch, split;
};
void PrintTo(const Sizes& s, std::ostream* os) { *os << "batch " << s.batch << ", split_size " << s.split; }

class PipeMatchesPlainModel : public ::testing::TestWithParam<Sizes> {};

TEST_P(PipeMatchesPlainModel, OutputAndGradients) {
  const auto [B, split] = GetParam();
  auto seq = three_stage_model();
  torch::manual_seed(11);
  const auto x = torch::randn({B, 5}, torch::kFloat64);
  const auto w = torch::randn({B, 3}, torch::kFloat64);

  const judge::Record rec = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, split, /*threads_per_stage=*/1);
    out.put("partitions", static_cast<int64_t>(pipe->partitions().size()));
    Gradients got;
    out.put("status", run_with_timeout(
                          [&] { got = run([&](const torch::Tensor& in) { return pipe->forward(in); }, *seq, x, w); },
                          kHangSeconds));
    got.put(out);
  });
  if (!judge::judging()) return;
  const Gradients want = run([&](const torch::Tensor& in) { return seq->forward(in); }, *seq, x, w);
  ASSERT_EQ(rec.get<int64_t>("partitions"), 3) << "three stages, three partitions";
  const std::string what = "batch " + std::to_string(B) + " in micro-batches of " + std::to_string(split);
  ASSERT_EQ(rec.get<std::string>("status"), "") << what << ": the pipe did not finish cleanly";
  const Gradients got = Gradients::get(rec);
  expect_same_output(want.output, got.output, split, what);
  expect_same_gradients(want, got, what);
}

INSTANTIATE_TEST_SUITE_P(BatchBySplit, PipeMatchesPlainModel,
                         ::testing::Values(Sizes{1, 1}, Sizes{1, 2}, Sizes{1, 4}, Sizes{1, 8}, Sizes{1, 16},
                                           Sizes{16, 1}, Sizes{16, 2}, Sizes{16, 4}, Sizes{16, 8}, Sizes{16, 16},
                                           Sizes{32, 1}, Sizes{32, 2}, Sizes{32, 4}, Sizes{32, 8}, Sizes{32, 16},
                                           Sizes{64, 1}, Sizes{64, 2}, Sizes{64, 4}, Sizes{64, 8}, Sizes{64, 16},
                                           Sizes{10, 4}, Sizes{7, 3}),
                         [](const ::testing::TestParamInfo<Sizes>& info) {
                           return "batch" + std::to_string(info.param.batch) + "_split" +
                                  std::to_string(info.param.split);
                         });

// ---- micro-batches: split semantics, order ----

// Records the micro-batches each stage sees, in order (their first rows' values).
struct Seen {
  std::mutex mutex;
  std::vector<std::vector<int64_t>> rows_per_stage{3};
  std::vector<std::vector<int64_t>> sizes_per_stage{3};
  void add(size_t stage, const torch::Tensor& x) {
    std::lock_guard<std::mutex> lock(mutex);
    rows_per_stage[stage].push_back(static_cast<int64_t>(x[0][0].item<double>()));
    sizes_per_stage[stage].push_back(x.size(0));
  }
};

// What the stages saw, as the subject recorded it.
struct SeenData {
  std::string status;
  std::vector<std::vector<int64_t>> rows_per_stage, sizes_per_stage;
};

torch::nn::Sequential probed_identity(Seen& seen) {
  torch::nn::Sequential seq;
  for (int64_t j = 0; j < 3; ++j)
    seq->push_back(WithDevice(Probe([&seen, j](const torch::Tensor& x) { seen.add(static_cast<size_t>(j), x); }),
                              stage(j)));
  return seq;
}

// Runs rows 0..rows-1 (row r holds r) through three probed identity stages in micro-batches of
// `split` in the subject; status "" when the pipe finished (run_with_timeout's status).
SeenData forward_probed(int64_t rows, int64_t split) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    Seen seen;
    Pipe pipe(probed_identity(seen), split, 1);
    const auto x = torch::arange(rows, torch::kFloat64).unsqueeze(1);
    out.put("status", run_with_timeout([&] { pipe->forward(x); }, kHangSeconds));
    std::lock_guard<std::mutex> lock(seen.mutex);
    out.put("rows", seen.rows_per_stage);
    out.put("sizes", seen.sizes_per_stage);
  });
  SeenData d{got.get<std::string>("status"), got.get<std::vector<std::vector<int64_t>>>("rows"),
             got.get<std::vector<std::vector<int64_t>>>("sizes")};
  d.rows_per_stage.resize(3);
  d.sizes_per_stage.resize(3);
  return d;
}

TEST(PipeMicrobatches, TenRowsInFoursAreFourFourTwo) {
  const SeenData seen = forward_probed(10, 4);
  if (!judge::judging()) return;
  ASSERT_EQ(seen.status, "");
  for (size_t j = 0; j < 3; ++j)
    EXPECT_EQ(seen.sizes_per_stage[j], (std::vector<int64_t>{4, 4, 2}))
        << "stage " << j << " saw micro-batches of the wrong sizes: 10 rows with split_size 4 are 4, 4, 2 "
        << "(x.split(4), not x.chunk(4), which gives 3, 3, 3, 1)";
}

TEST(PipeMicrobatches, EveryStageSeesTheMicrobatchesInOrder) {
  const SeenData seen = forward_probed(12, 2);
  if (!judge::judging()) return;
  ASSERT_EQ(seen.status, "");
  for (size_t j = 0; j < 3; ++j)
    EXPECT_EQ(seen.rows_per_stage[j], (std::vector<int64_t>{0, 2, 4, 6, 8, 10}))
        << "stage " << j << " must see micro-batches 0..5 in order (listed by their first row)";
}

TEST(PipeMicrobatches, OutputRowsStayInInputOrder) {
  // Three parameter-free stages: y = ((x * 2 + 1) * 3 - 1) * 0.5 = 3x + 1. Row r of the
  // output must come from row r of the input.
  torch::nn::Sequential seq(WithDevice(Affine(2, 1), stage(0)), WithDevice(Affine(3, -1), stage(1)),
                            WithDevice(Affine(0.5, 0), stage(2)));
  const int64_t B = 11;
  const auto x = torch::arange(B, torch::kFloat64).unsqueeze(1);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, 3, 1);
    torch::Tensor y;
    out.put("status", run_with_timeout([&] { y = pipe->forward(x); }, kHangSeconds));
    out.put("y", y);
  });
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<std::string>("status"), "");
  const torch::Tensor y = got.get<torch::Tensor>("y");
  ASSERT_TRUE(y.defined());
  ASSERT_EQ(y.size(0), B) << "the output must have one row per input row";
  for (int64_t r = 0; r < B; ++r) {
    const double source_row = (y[r][0].item<double>() - 1) / 3;
    EXPECT_NEAR(source_row, static_cast<double>(r), 1e-9)
        << "output row " << r << " (micro-batch " << r / 3 << ") holds the result for input row " << source_row
        << ": the micro-batches were put back together out of order";
  }
}

TEST(PipeMicrobatches, LayoutABAComputesInLayerOrder) {
  // Stages 0, 1, 0: the last layer shares stage 0's worker but must run last.
  torch::nn::Sequential seq(WithDevice(Affine(2, 0), stage(0)), WithDevice(Affine(1, 5), stage(1)),
                            WithDevice(Affine(3, 0), stage(0)));
  const auto x = torch::arange(6, torch::kFloat64).unsqueeze(1);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, 2, 1);
    out.put("partitions", static_cast<int64_t>(pipe->partitions().size()));
    out.put("workers", static_cast<int64_t>(pipe->workers().num_workers()));
    torch::Tensor y;
    out.put("status", run_with_timeout([&] { y = pipe->forward(x); }, kHangSeconds));
    out.put("y", y);
  });
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<int64_t>("partitions"), 3) << "stages 0, 1, 0 are three partitions";
  EXPECT_EQ(got.get<int64_t>("workers"), 2) << "partitions on the same stage share its worker";
  ASSERT_EQ(got.get<std::string>("status"), "");
  const torch::Tensor y = got.get<torch::Tensor>("y");
  const auto want = (x * 2 + 5) * 3;
  EXPECT_LE(max_abs_diff(y, want), kTol) << "expected (2x + 5) * 3 for stages A, B, A";
}

// ---- errors: carried back and re-raised, never a hang ----

TEST(PipeErrors, ExceptionInAStageReachesTheCaller) {
  std::atomic<bool> fail{true};
  // y = 2x + 3 over three stages; stage 1 throws on micro-batch 2 (rows 4, 5: 2x = 8, 10).
  torch::nn::Sequential seq(
      WithDevice(Affine(2, 0), stage(0)),
      WithDevice(Probe([&](const torch::Tensor& x) {
                   if (fail && x[0][0].item<double>() == 8) throw std::runtime_error("stage 1 failed on purpose");
                 }),
                 stage(1)),
      WithDevice(Affine(1, 3), stage(2)));
  const auto x = torch::arange(8, torch::kFloat64).unsqueeze(1);
  const auto x2 = x + 100;  // the next call's input: new values, so stale results show
  const judge::Record got = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, 2, 1);
    out.put("status", run_with_timeout([&] { pipe->forward(x); }, kHangSeconds));
    // Nothing of the failed call may leak into the next one.
    fail = false;
    torch::Tensor y;
    out.put("status_after", run_with_timeout([&] { y = pipe->forward(x2); }, kHangSeconds));
    out.put("y", y);
  });
  if (!judge::judging()) return;
  const std::string status = got.get<std::string>("status");
  ASSERT_NE(status, "timeout") << "forward hung after a stage threw: the worker's error must come back as a Result";
  ASSERT_NE(status, "") << "forward returned normally although stage 1 threw on micro-batch 2: the error was "
                           "swallowed; re-throw it on the caller";
  EXPECT_NE(status.find("stage 1 failed on purpose"), std::string::npos)
      << "the caller must see the stage's own exception, got: " << status;

  ASSERT_EQ(got.get<std::string>("status_after"), "");
  const torch::Tensor y = got.get<torch::Tensor>("y");
  ASSERT_TRUE(y.defined() && y.sizes() == x2.sizes()) << "the call after an error returned no or a wrong-sized output";
  for (int64_t i = 0; i < 4; ++i) {
    const double d = max_abs_diff(y.slice(0, 2 * i, 2 * i + 2), x2.slice(0, 2 * i, 2 * i + 2) * 2 + 3);
    EXPECT_LE(d, kTol) << "after an error, the next forward got micro-batch " << i << " wrong (max abs difference "
                       << d << "): results of the failed call were left in the queues and picked up by this one. "
                          "Collect all of a clock's results before re-throwing.";
  }
}

TEST(PipeErrors, ExceptionInTheFirstStageOnTheFirstClock) {
  torch::nn::Sequential seq(
      WithDevice(Probe([](const torch::Tensor&) { throw Error("no input accepted"); }), stage(0)),
      WithDevice(Affine(1, 0), stage(1)));
  const std::string status = judge::subject([&](judge::Record& out) {
                               Pipe pipe(seq, 1, 1);
                               out.put("status", run_with_timeout(
                                                     [&] { pipe->forward(torch::zeros({3, 1}, torch::kFloat64)); },
                                                     kHangSeconds));
                             }).get<std::string>("status");
  if (!judge::judging()) return;
  ASSERT_NE(status, "timeout") << "forward hung after the first stage threw";
  EXPECT_NE(status.find("no input accepted"), std::string::npos) << "got: " << status;
}

// Two steps of one clock fail: compute re-throws the error of the clock's first step (the
// first it collects), not the last one it saw, and still collects every result.
TEST(PipeErrors, TwoFailuresInOneClockReThrowTheFirstStepsError) {
  torch::nn::Sequential seq(
      WithDevice(Probe([](const torch::Tensor&) { throw Error("stage 0 failed"); }), stage(0)),
      WithDevice(Probe([](const torch::Tensor&) { throw Error("stage 1 failed"); }), stage(1)),
      WithDevice(Affine(1, 0), stage(2)));
  const judge::Record got = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, 1, 1);
    std::vector<torch::Tensor> batches = {torch::zeros({1, 1}, torch::kFloat64), torch::ones({1, 1}, torch::kFloat64)};
    // Micro-batch 1 on stage 0 first, micro-batch 0 on stage 1 second.
    out.put("status", run_with_timeout([&] { pipe->compute(batches, {Step{1, 0}, Step{0, 1}}); }, kHangSeconds));
    // The clock after: stage 2 alone, which must not see a result left over from the failed one.
    std::vector<torch::Tensor> next = {torch::full({1, 1}, 7.0, torch::kFloat64)};
    out.put("status_after", run_with_timeout([&] { pipe->compute(next, {Step{0, 2}}); }, kHangSeconds));
    out.put("after", next[0]);
  });
  if (!judge::judging()) return;
  const std::string status = got.get<std::string>("status");
  ASSERT_NE(status, "timeout") << "compute hung after two steps of a clock threw";
  EXPECT_NE(status.find("stage 0 failed"), std::string::npos)
      << "the clock's first step (micro-batch 1 on stage 0) failed first in the clock: its error is the one to "
         "re-throw, not the last one collected; got: " << status;
  ASSERT_EQ(got.get<std::string>("status_after"), "");
  EXPECT_LE(max_abs_diff(got.get<torch::Tensor>("after"), torch::full({1, 1}, 7.0, torch::kFloat64)), kTol);
}

TEST(PipeErrors, BadArgumentsAreRejected) {
  torch::nn::Sequential seq(WithDevice(Affine(1, 0), stage(0)));
  // One stage index cannot be two devices.
  torch::nn::Sequential clash(WithDevice(Affine(1, 0), stage(0)),
                              WithDevice(Affine(1, 0), StageDevice{0, torch::Device(torch::kCUDA, 0)}));
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("split_size 0", [&] { Pipe(seq, 0); });
    out.outcome("threads_per_stage -1", [&] { Pipe(seq, 1, -1); });
    out.outcome("an empty batch", [&] {
      Pipe pipe(seq, 1, 1);
      pipe->forward(torch::zeros({0, 3}));
    });
    out.outcome("stage 0 on two devices", [&] { Pipe(clash, 1); });
  });
  if (!judge::judging()) return;
  for (const char* what : {"split_size 0", "threads_per_stage -1", "an empty batch", "stage 0 on two devices"})
    EXPECT_EQ(got.get<judge::Outcome>(what).kind, "kit::Error")
        << what << " must be a kit::Error; the pipe " << got.get<judge::Outcome>(what).describe();
}

// ---- per-thread settings applied in the workers ----

TEST(PipeWorkers, ApplyTheCallersGradMode) {
  std::mutex mutex;
  std::vector<bool> grad_mode;
  auto probe = [&](const torch::Tensor&) {
    std::lock_guard<std::mutex> lock(mutex);
    grad_mode.push_back(torch::GradMode::is_enabled());
  };
  torch::manual_seed(3);
  torch::nn::Sequential seq(WithDevice(torch::nn::Linear(2, 2), stage(0)), WithDevice(Probe(probe), stage(1)),
                            WithDevice(torch::nn::Linear(2, 2), stage(1)));
  Pipe pipe(seq, 1, 1);
  const auto x = torch::randn({2, 2});
  torch::Tensor y;
  ASSERT_EQ(run_with_timeout(
                [&] {
                  torch::NoGradGuard no_grad;  // on the thread that calls forward: grad mode is per thread
                  y = pipe->forward(x);
                },
                kHangSeconds),
            "");
  EXPECT_FALSE(y.requires_grad()) << "under NoGradGuard the pipe built an autograd graph: workers must run "
                                     "tasks in the caller's grad mode (grad mode is per thread)";
  ASSERT_FALSE(grad_mode.empty());
  for (bool g : grad_mode) EXPECT_FALSE(g) << "a worker ran with grad mode on while the caller had it off";
  grad_mode.clear();
  ASSERT_EQ(run_with_timeout([&] { y = pipe->forward(x); }, kHangSeconds), "");
  EXPECT_TRUE(y.requires_grad()) << "with grad mode on, the output must carry the graph for backward()";
  for (bool g : grad_mode) EXPECT_TRUE(g) << "a worker ran with grad mode off while the caller had it on";
}

TEST(PipeWorkers, UseTheConfiguredThreadCount) {
  for (int threads : {1, 2}) {
    std::mutex mutex;
    std::vector<int> seen;
    auto probe = [&](const torch::Tensor&) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.push_back(at::get_num_threads());
    };
    torch::nn::Sequential seq(WithDevice(Probe(probe), stage(0)), WithDevice(Probe(probe), stage(1)));
    Pipe pipe(seq, 1, threads);
    ASSERT_EQ(run_with_timeout([&] { pipe->forward(torch::zeros({2, 1})); }, kHangSeconds), "");
    ASSERT_EQ(seen.size(), 4u);
    for (int n : seen) EXPECT_EQ(n, threads) << "a worker ran with " << n << " intra-op threads, configured " << threads;
  }
}

TEST(PipeWorkers, StagesRunOnTheirOwnThreads) {
  std::mutex mutex;
  std::vector<std::vector<std::thread::id>> ids(3);
  torch::nn::Sequential seq;
  for (int64_t j = 0; j < 3; ++j)
    seq->push_back(WithDevice(Probe([&, j](const torch::Tensor&) {
                                std::lock_guard<std::mutex> lock(mutex);
                                ids[static_cast<size_t>(j)].push_back(std::this_thread::get_id());
                              }),
                              stage(j)));
  Pipe pipe(seq, 1, 1);
  ASSERT_EQ(run_with_timeout([&] { pipe->forward(torch::zeros({4, 1})); }, kHangSeconds), "");
  for (size_t j = 0; j < 3; ++j) {
    ASSERT_EQ(ids[j].size(), 4u) << "stage " << j << " must run each of the 4 micro-batches once";
    for (const auto& id : ids[j]) EXPECT_EQ(id, ids[j][0]) << "stage " << j << " ran on more than one thread";
  }
  EXPECT_NE(ids[0][0], ids[1][0]);
  EXPECT_NE(ids[1][0], ids[2][0]);
  EXPECT_NE(ids[0][0], ids[2][0]);
}

// ---- devices: the output is on the last stage (needs a GPU; skipped without one) ----

TEST(PipeDevices, OutputLandsOnTheLastStagesDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs CUDA";
  torch::manual_seed(5);
  torch::nn::Linear first(4, 4), second(4, 2);
  torch::nn::Sequential seq(WithDevice(first, stage(0)),
                            WithDevice(second, StageDevice{1, torch::Device(torch::kCUDA, 0)}));
  const auto x = torch::randn({6, 4});
  const judge::Record got = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, 4, 1);
    torch::Tensor y;
    out.put("status", run_with_timeout([&] { y = pipe->forward(x); }, kHangSeconds));
    out.put("on_cuda", y.defined() && y.device().is_cuda());
    out.put("y", y);
    if (y.defined()) y.sum().backward();
    out.put("first_weight_grad", first->weight.grad());
  });
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<std::string>("status"), "");
  EXPECT_TRUE(got.get<bool>("on_cuda")) << "the output must be on the last stage's device (cuda:0)";
  const auto want = second->forward(first->forward(x).to(torch::Device(torch::kCUDA, 0)));
  EXPECT_LE(max_abs_diff(got.get<torch::Tensor>("y"), want), 1e-5);
  ASSERT_TRUE(got.get<torch::Tensor>("first_weight_grad").defined())
      << "no gradient reached the CPU stage across devices";
}

}  // namespace
}  // namespace kit
