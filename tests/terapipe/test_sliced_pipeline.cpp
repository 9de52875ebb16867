// Problem 7.2: the token-slice pipeline. Its schedule is pinned exactly and replayed by
// Problem 3's simulator; then GPT-2 runs as K stages of one process (P2P hands the messages
// over in memory), micro-batches cut into token slices, and the batch loss and the gradient
// of every parameter must equal the plain model's on the whole batch (float64, 1e-10):
// uniform and uneven slicings, one-token slices, a single slice, two micro-batches, stages of
// two blocks each, and 2 processes holding 2 stages each (Gloo, the tied embedding's gradient
// summed across them). A slice that runs before the slice it needs the keys and values of is
// a clear error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "float64_model.h"
#include "kit/errors.h"
#include "model/gpt2.h"
#include "pipeline_training/simulate.h"
#include "rank_roles.h"
#include "terapipe/pipeline.h"
#include "terapipe/slicing.h"
#include "train/loss.h"

namespace {
namespace pp = kit::pp;
namespace tp = kit::terapipe;

constexpr int64_t kVocab = 64, kTime = 16, kRows = 4, kStages = 3;

kit::GPT2 tiny_model(int64_t n_layer = kStages) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = kVocab;
  cfg.n_layer = n_layer;
  cfg.dropout = 0;
  return kit_test::float64_model(cfg, 3);
}

struct Data {
  torch::Tensor idx, labels, mask;
};
Data batch() {
  torch::manual_seed(5);
  Data d{torch::randint(kVocab, {kRows, kTime}, torch::kLong), torch::randint(kVocab, {kRows, kTime}, torch::kLong),
         torch::ones({kRows, kTime})};
  d.mask.narrow(0, 1, 1).narrow(1, 0, 5).zero_();  // a row with fewer counted tokens
  return d;
}

struct Outcome {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // by the full model's names
};

// The plain model on the whole batch.
Outcome whole(kit::GPT2 model) {
  const Data d = batch();
  model->zero_grad();
  auto loss = kit::masked_cross_entropy(model->forward(d.idx), d.labels, d.mask);
  loss.backward();
  Outcome o{loss.item<double>(), {}};
  for (const auto& p : model->named_parameters()) o.grads[p.key()] = p.value().grad().clone();
  return o;
}

// This rank's stages of a pipeline of p ranks holding `chunks` stages each (default: kStages
// stages on one rank), m micro-batches of `lengths` slices, through `schedule` (default:
// sliced_schedule's order). The grads of the parameters this rank holds.
Outcome sliced(const kit::GPT2& model, const std::vector<int64_t>& lengths, int64_t m,
               pp::RankSchedule schedule = {}, int64_t p = 1, int64_t chunks = kStages, int64_t rank = 0) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  const pp::PipelineShape shape{p, m * n, chunks};
  auto stages = tp::build_sliced_stages(model, shape, rank);
  pp::P2P p2p(shape, rank, torch::TensorOptions().dtype(torch::kFloat64));
  tp::SlicedExecutor ex(stages, shape, lengths, rank, p2p);
  const Data d = batch();
  if (schedule.empty()) schedule = tp::make_sliced_schedule(shape, n, rank);
  const auto result = ex.run(schedule, pp::split_batch(d.idx, d.labels, d.mask, m));
  pp::sum_tied_gradients(tp::as_stage_modules(stages), shape, rank);
  Outcome o{result.loss, {}};
  for (const auto& s : stages)
    for (const auto& [name, p] : s->named_model_parameters())
      o.grads[name] = p.grad().defined() ? p.grad().clone() : torch::zeros_like(p);
  return o;
}

void expect_equal_to_whole(const std::vector<int64_t>& lengths, int64_t m = 1, int64_t n_layer = kStages) {
  const kit::GPT2 model = tiny_model(n_layer);
  const Outcome want = whole(model), got = sliced(model, lengths, m);
  const std::string what = "m = " + std::to_string(m) + ", slices " + tp::to_string(lengths);
  EXPECT_NEAR(got.loss, want.loss, 1e-10) << what << ": the batch loss";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what << ": every parameter is on one stage";
  for (const auto& [name, g] : want.grads) {
    ASSERT_TRUE(got.grads.count(name)) << what << ": no stage holds " << name;
    EXPECT_LT((got.grads.at(name) - g).abs().max().item<double>(), 1e-10) << what << ": the gradient of " << name;
  }
}

std::string order(const pp::RankSchedule& s) { return pp::to_string(s); }

// 2 processes, 2 stages each (rank r holds stages r and 2 + r), 2 blocks per stage, 2
// micro-batches of uneven slices: each rank's gradients are the whole model's for the
// parameters it holds, and the rank with the last stage has the batch loss.
RANK_ROLE(sliced_two_ranks) {
  const int64_t p = 2, chunks = 2, r = group.rank();
  const std::vector<int64_t> lengths{3, 7, 6};
  const kit::GPT2 model = tiny_model(2 * p * chunks);
  const Outcome want = whole(model), got = sliced(model, lengths, 2, {}, p, chunks, r);
  const std::string what = "rank " + std::to_string(r) + " of 2, 2 stages of 2 blocks each, m = 2, slices " +
                           tp::to_string(lengths);
  if (r == 1) EXPECT_NEAR(got.loss, want.loss, 1e-10) << what << ": the batch loss (rank 1 holds the last stage)";
  EXPECT_FALSE(got.grads.empty()) << what << ": this rank holds no parameter";
  for (const auto& [name, g] : got.grads) {
    ASSERT_TRUE(want.grads.count(name)) << what << ": " << name << " is not a parameter of the model";
    EXPECT_LT((g - want.grads.at(name)).abs().max().item<double>(), 1e-10) << what << ": the gradient of " << name;
  }
}

}  // namespace

// p = 2 ranks, m = 2 micro-batches of n = 3 slices (units 0..5): every forward in order, then
// each micro-batch's slices backwards, last slice first.
TEST(SlicedPipeline, ScheduleIsGPipeOrderWithSlicesBackwardsLastFirst) {
  const pp::PipelineShape shape{2, 6, 1};
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_EQ(order(tp::make_sliced_schedule(shape, 3, r)), "F0 F1 F2 F3 F4 F5 B2 B1 B0 B5 B4 B3") << "rank " << r;
  const pp::PipelineShape one_rank{1, 2, 2};  // both stages on one rank: each unit through both
  EXPECT_EQ(order(tp::make_sliced_schedule(one_rank, 2, 0)), "F0 F0.1 F1 F1.1 B1.1 B1 B0.1 B0");
  }

// Problem 3's simulator replays it: no deadlock, and with K stages and n equal slices of
// one time unit forward and two backward the makespan is (n + K - 1) * 3.
TEST(SlicedPipeline, SimulatorReplaysTheSchedule) {
  const int64_t K = 3, n = 4;
  const pp::PipelineShape shape{K, n, 1};
  pp::Schedules all;
  for (int64_t r = 0; r < K; ++r) all.push_back(tp::make_sliced_schedule(shape, n, r));
  const pp::Timeline t = pp::simulate(all, shape, pp::Costs{1.0, 2.0, 0.0, {}, {}});
  EXPECT_DOUBLE_EQ(t.makespan, static_cast<double>((n + K - 1) * 3));
}

TEST(SlicedPipeline, UniformSlicesEqualTheWholeModel) { expect_equal_to_whole({4, 4, 4, 4}); }
TEST(SlicedPipeline, UnevenSlicesEqualTheWholeModel) { expect_equal_to_whole({1, 6, 2, 7}); }
TEST(SlicedPipeline, OneTokenSlicesEqualTheWholeModel) { expect_equal_to_whole(std::vector<int64_t>(kTime, 1)); }
TEST(SlicedPipeline, OneSliceEqualsTheWholeModel) { expect_equal_to_whole({kTime}); }
TEST(SlicedPipeline, TwoMicroBatchesOfSlicesEqualTheWholeModel) { expect_equal_to_whole({5, 3, 8}, 2); }
TEST(SlicedPipeline, StagesOfTwoBlocksEachEqualTheWholeModel) { expect_equal_to_whole({5, 3, 8}, 2, 2 * kStages); }
TEST(SlicedPipeline, TwoProcessesOfTwoStagesEachEqualTheWholeModel) {
  rank_test::expect_all_ranks_pass(rank_test::run_ranks(2, "sliced_two_ranks", 60), 2, "the sliced pipeline");
}

// A slice cannot run before the slice whose keys and values it attends to.
TEST(SlicedPipeline, SliceBeforeItsContextIsAClearError) {
  const kit::GPT2 model = tiny_model();
  pp::RankSchedule swapped{pp::F(1, 0), pp::F(1, 1), pp::F(1, 2), pp::F(0, 0), pp::F(0, 1), pp::F(0, 2),
                           pp::B(1, 2), pp::B(1, 1), pp::B(1, 0), pp::B(0, 2), pp::B(0, 1), pp::B(0, 0)};
  try {
    sliced(model, {8, 8}, 1, swapped);
    ADD_FAILURE() << "slice 1 ran before slice 0";
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
}

// Given: a slicing must cover the sequence, and a shape must hold whole micro-batches.
TEST(SlicedPipeline, BadSlicingsAndShapesAreClearErrors) {
  const kit::GPT2 model = tiny_model();
  const pp::RankSchedule any{pp::F(0, 0)};  // the checks come first: no step runs
  EXPECT_THROW(sliced(model, {8, 4}, 1, any), kit::Error);  // 12 of 16 tokens
  EXPECT_THROW(sliced(model, {8, 0, 8}, 1, any), kit::Error);
  EXPECT_THROW(tp::make_sliced_schedule(pp::PipelineShape{2, 6, 1}, 4, 0), kit::Error);  // 6 units, 4 slices
  EXPECT_THROW(tp::make_sliced_schedule(pp::PipelineShape{2, 6, 1}, 3, 2), kit::Error);  // rank 2 of 2
}
