// Graded variants of tests/pipeline/pipe_test.cpp: the same checks (outputs and gradients
// equal the plain model's; micro-batches cut with split, seen in order) on a model, seed,
// batch sizes, micro-batch sizes and stage layouts the public tests do not use.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "judge/tensor.h"
#include "pipeline/pipe.h"
#include "pipeline/pipeline_test_util.h"

namespace kit {
namespace {

using test::max_abs_diff;
using test::Probe;
using test::run_with_timeout;

constexpr double kTol = 1e-10;  // float64 throughout, as in the public test
constexpr double kHangSeconds = 20;

StageDevice stage(int64_t j) { return {j, torch::Device(torch::kCPU)}; }

// One Linear per entry of `layout` (its stage), each but the last followed by a Tanh on the
// same stage. Seed 23: the public tests use 7.
torch::nn::Sequential hidden_model(const std::vector<int64_t>& layout) {
  torch::manual_seed(23);
  torch::nn::Sequential seq;
  for (size_t k = 0; k < layout.size(); ++k) {
    const bool last = k + 1 == layout.size();
    seq->push_back(WithDevice(torch::nn::Linear(k == 0 ? 6 : 5, last ? 2 : 5), stage(layout[k])));
    if (!last) seq->push_back(WithDevice(torch::nn::Tanh(), stage(layout[k])));
  }
  seq->to(torch::kFloat64);
  return seq;
}

struct Outcome {
  torch::Tensor output, input_grad;
  std::vector<torch::Tensor> param_grads;  // in named_parameters() order
};

// forward(x), then backward of a fixed weighted sum of the output, so that every row and
// column counts differently.
Outcome run(const std::function<torch::Tensor(const torch::Tensor&)>& forward, torch::nn::Module& model,
            const torch::Tensor& x_in, const torch::Tensor& weights) {
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  auto x = x_in.clone().requires_grad_(true);
  Outcome o;
  o.output = forward(x);
  (o.output * weights).sum().backward();
  o.input_grad = x.grad();
  for (const auto& p : model.parameters()) o.param_grads.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
  return o;
}

// The subject runs the pipe and records its output and gradients; the judge runs the plain model.
void expect_pipe_matches_plain_model(const std::vector<int64_t>& layout, int64_t batch, int64_t split) {
  auto seq = hidden_model(layout);
  torch::manual_seed(31);
  const auto x = torch::randn({batch, 6}, torch::kFloat64);
  const auto w = torch::randn({batch, 2}, torch::kFloat64);

  const judge::Record rec = judge::subject([&](judge::Record& out) {
    Pipe pipe(seq, split, /*threads_per_stage=*/1);
    out.put("partitions", static_cast<int64_t>(pipe->partitions().size()));
    Outcome got;
    out.put("status", run_with_timeout(
                          [&] { got = run([&](const torch::Tensor& in) { return pipe->forward(in); }, *seq, x, w); },
                          kHangSeconds));
    out.put("output", got.output);
    out.put("input_grad", got.input_grad);
    out.put("param_grads", got.param_grads);
  });
  if (!judge::judging()) return;
  const Outcome want = run([&](const torch::Tensor& in) { return seq->forward(in); }, *seq, x, w);
  int64_t runs = 1;  // a new partition wherever the stage changes
  for (size_t k = 1; k < layout.size(); ++k) runs += layout[k] != layout[k - 1];
  ASSERT_EQ(rec.get<int64_t>("partitions"), runs) << "one partition per run of consecutive layers on one stage";

  const std::string what = "batch " + std::to_string(batch) + " in micro-batches of " + std::to_string(split);
  ASSERT_EQ(rec.get<std::string>("status"), "") << what << ": the pipe did not finish cleanly";
  const Outcome got{rec.get<torch::Tensor>("output"), rec.get<torch::Tensor>("input_grad"),
                    rec.get<std::vector<torch::Tensor>>("param_grads")};
  ASSERT_TRUE(got.output.defined()) << what << ": the pipe returned an undefined tensor";
  ASSERT_EQ(got.output.sizes(), want.output.sizes()) << what << ": wrong output shape";
  for (int64_t i = 0, row = 0; row < batch; ++i, row += split) {
    const int64_t end = std::min(batch, row + split);
    const double d = max_abs_diff(want.output.slice(0, row, end), got.output.slice(0, row, end));
    EXPECT_LE(d, kTol) << what << ": micro-batch " << i << " (rows " << row << ".." << end - 1
                       << ") differs from the plain model, max abs difference " << d;
  }
  const auto names = seq->named_parameters().keys();
  ASSERT_EQ(got.param_grads.size(), want.param_grads.size());
  for (size_t k = 0; k < want.param_grads.size(); ++k) {
    ASSERT_TRUE(got.param_grads[k].defined()) << what << ": parameter " << names[k] << " got no gradient";
    EXPECT_LE(max_abs_diff(want.param_grads[k], got.param_grads[k]), kTol)
        << what << ": gradient of parameter " << names[k] << " differs";
  }
  ASSERT_TRUE(got.input_grad.defined()) << what << ": the input got no gradient through the pipe";
  EXPECT_LE(max_abs_diff(want.input_grad, got.input_grad), kTol) << what << ": gradient of the input differs";
}

const std::vector<int64_t> kThreeStages = {0, 1, 2};

TEST(HiddenPipeMatchesPlainModel, Batch5Split5) { expect_pipe_matches_plain_model(kThreeStages, 5, 5); }
TEST(HiddenPipeMatchesPlainModel, Batch9Split2) { expect_pipe_matches_plain_model(kThreeStages, 9, 2); }
TEST(HiddenPipeMatchesPlainModel, Batch11Split3) { expect_pipe_matches_plain_model(kThreeStages, 11, 3); }
TEST(HiddenPipeMatchesPlainModel, Batch6Split4) { expect_pipe_matches_plain_model(kThreeStages, 6, 4); }
TEST(HiddenPipeMatchesPlainModel, Batch3Split8) { expect_pipe_matches_plain_model(kThreeStages, 3, 8); }
TEST(HiddenPipeMatchesPlainModel, Batch12Split1) { expect_pipe_matches_plain_model(kThreeStages, 12, 1); }
TEST(HiddenPipeMatchesPlainModel, TwoStagesBatch13Split4) { expect_pipe_matches_plain_model({0, 1}, 13, 4); }
TEST(HiddenPipeMatchesPlainModel, FourStagesBatch10Split3) { expect_pipe_matches_plain_model({0, 1, 2, 3}, 10, 3); }
// Stages 0, 1, 2, 0: four partitions on three workers; the last layer must run last.
TEST(HiddenPipeMatchesPlainModel, LayoutABCABatch8Split3) { expect_pipe_matches_plain_model({0, 1, 2, 0}, 8, 3); }
// Stage indices 1, 2, 3: a stage's index names its worker, it is not a partition's position
// (partition j's worker is Workers::in_queue(j), whatever its stage is called).
TEST(HiddenPipeMatchesPlainModel, StagesNumberedFromOneBatch7Split2) {
  expect_pipe_matches_plain_model({1, 2, 3}, 7, 2);
}

// The micro-batches every stage sees: their sizes and first rows, in order. One pipe runs each
// batch of `batches` in turn (a pipe is built once and fed batches of any size, the last
// batch of an epoch smaller).
void expect_microbatches(const std::vector<int64_t>& batches, int64_t split) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::mutex mutex;
    std::vector<std::vector<int64_t>> sizes(3), firsts(3);
    torch::nn::Sequential seq;
    for (size_t j = 0; j < 3; ++j)
      seq->push_back(WithDevice(Probe([&, j](const torch::Tensor& x) {
                                  std::lock_guard<std::mutex> lock(mutex);
                                  sizes[j].push_back(x.size(0));
                                  firsts[j].push_back(static_cast<int64_t>(x[0][0].item<double>()));
                                }),
                                stage(static_cast<int64_t>(j))));
    Pipe pipe(seq, split, 1);
    std::string status;
    for (const int64_t batch : batches) {
      const auto x = torch::arange(batch, torch::kFloat64).unsqueeze(1);
      if (status.empty()) status = run_with_timeout([&] { pipe->forward(x); }, kHangSeconds);
    }
    out.put("status", status);
    std::lock_guard<std::mutex> lock(mutex);
    out.put("sizes", sizes);
    out.put("firsts", firsts);
  });
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<std::string>("status"), "");
  auto sizes = got.get<std::vector<std::vector<int64_t>>>("sizes"), firsts = got.get<std::vector<std::vector<int64_t>>>("firsts");
  sizes.resize(3);
  firsts.resize(3);
  std::vector<int64_t> want_sizes, want_firsts;
  for (const int64_t batch : batches)
    for (int64_t row = 0; row < batch; row += split) {
      want_sizes.push_back(std::min(split, batch - row));
      want_firsts.push_back(row);
    }
  std::string batch;
  for (const int64_t b : batches) batch += (batch.empty() ? "" : ", then ") + std::to_string(b);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(sizes[j], want_sizes) << "stage " << j << ": " << batch << " rows with split_size " << split
                                    << " are micro-batches of split_size rows, the last one smaller (x.split)";
    EXPECT_EQ(firsts[j], want_firsts) << "stage " << j << " must see the micro-batches in order (by first row)";
  }
}

TEST(HiddenPipeMicrobatches, NineRowsInTwos) { expect_microbatches({9}, 2); }
TEST(HiddenPipeMicrobatches, TenRowsInThrees) { expect_microbatches({10}, 3); }
// 4, 2, not 3, 3: rows in split_size pieces, not ceil(B / split_size) equal ones.
TEST(HiddenPipeMicrobatches, SixRowsInFours) { expect_microbatches({6}, 4); }
// One pipe, three batches: the schedule belongs to each batch, not to the pipe.
TEST(HiddenPipeMicrobatches, OnePipeEightThenFiveThenTwelveRowsInTwos) { expect_microbatches({8, 5, 12}, 2); }

}  // namespace
}  // namespace kit
