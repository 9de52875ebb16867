// Problem 7.2: the token-slice pipeline. Its schedule is pinned exactly and replayed by
// Problem 3's simulator; then GPT-2 runs as K stages of one process (P2P hands the messages
// over in memory), micro-batches cut into token slices, and the batch loss and the gradient
// of every parameter must equal the plain model's on the whole batch (float64, 1e-10):
// uniform and uneven slicings, one-token slices, a single slice, two micro-batches, stages of
// two blocks each, and 2 processes holding 2 stages each (Gloo, the tied embedding's gradient
// summed across them). A slice that runs before the slice it needs the keys and values of is
// a clear error. With dropout on (0.1), the pipeline from the same generator state draws the
// masks of the slice-by-slice reference (sliced_reference.h), and its backward must use them.
//
// The subject parts run the student's schedule and slice steps (the given executor around
// them) and record the schedules, losses and gradients; the whole model's, the reference's,
// the simulator's replay and every check are the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "float64_model.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "kit/errors.h"
#include "model/gpt2.h"
#include "pipeline_training/simulate.h"
#include "rank_roles.h"
#include "terapipe/pipeline.h"
#include "terapipe/slicing.h"
#include "train/loss.h"
#include "sliced_reference.h"
#include "slicing_reference.h"

namespace {
namespace pp = kit::pp;
namespace tp = kit::terapipe;
namespace judge = kit::judge;

constexpr int64_t kVocab = 64, kTime = 16, kRows = 4, kStages = 3;

kit::GPT2 tiny_model(int64_t n_layer = kStages, double dropout = 0) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = kVocab;
  cfg.n_layer = n_layer;
  cfg.dropout = dropout;
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
// sliced_schedule's order). The grads of the parameters this rank holds. With `passes`, a hook
// on every parameter counts the backward passes that reach it, by "stage s: name".
Outcome sliced(const kit::GPT2& model, const std::vector<int64_t>& lengths, int64_t m,
               pp::RankSchedule schedule = {}, int64_t p = 1, int64_t chunks = kStages, int64_t rank = 0,
               std::map<std::string, int64_t>* passes = nullptr) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  const pp::PipelineShape shape{p, m * n, chunks};
  auto stages = tp::build_sliced_stages(model, shape, rank);
  std::vector<std::pair<torch::Tensor, unsigned>> hooks;
  for (size_t s = 0; passes && s < stages.size(); ++s)
    for (const auto& [name, param] : stages[s]->named_model_parameters()) {
      const std::string key = "stage " + std::to_string(s) + ": " + name;
      hooks.emplace_back(param, param.register_hook([passes, key](const torch::Tensor&) { ++(*passes)[key]; }));
    }
  pp::P2P p2p(shape, rank, torch::TensorOptions().dtype(torch::kFloat64));
  tp::SlicedExecutor ex(stages, shape, lengths, rank, p2p);
  const Data d = batch();
  if (schedule.empty()) schedule = tp::make_sliced_schedule(shape, n, rank);
  const auto result = ex.run(schedule, pp::split_batch(d.idx, d.labels, d.mask, m));
  for (auto& [param, hook] : hooks) param.remove_hook(hook);
  pp::sum_tied_gradients(tp::as_stage_modules(stages), shape, rank);
  Outcome o{result.loss, {}};
  for (const auto& s : stages)
    for (const auto& [name, p] : s->named_model_parameters())
      o.grads[name] = p.grad().defined() ? p.grad().clone() : torch::zeros_like(p);
  return o;
}

// The subject part: sliced(...) run, its loss and gradients recorded.
judge::Record pipeline_in_subject(const kit::GPT2& model, const std::vector<int64_t>& lengths, int64_t m,
                                const pp::RankSchedule& schedule = {}) {
  return judge::subject([&](judge::Record& out) {
    const Outcome o = sliced(model, lengths, m, schedule);
    out.put("loss", o.loss);
    out.put("grads", o.grads);
  });
}

// got (the pipeline's loss and gradients, as recorded) against want, parameter by parameter.
void expect_same_grads(const Outcome& want, const judge::Record& rec, const std::string& what) {
  const Outcome got{rec.get<double>("loss"), rec.get<std::map<std::string, torch::Tensor>>("grads")};
  if (!rec.ok()) return;
  EXPECT_NEAR(got.loss, want.loss, 1e-10) << what << ": the batch loss";
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what << ": every parameter is on one stage";
  for (const auto& [name, g] : want.grads) {
    ASSERT_TRUE(got.grads.count(name)) << what << ": no stage holds " << name;
    const torch::Tensor& mine = got.grads.at(name);
    ASSERT_TRUE(mine.defined() && mine.sizes() == g.sizes()) << what << ": the gradient of " << name;
    EXPECT_LT((mine - g).abs().max().item<double>(), 1e-10) << what << ": the gradient of " << name;
  }
}

void expect_equal_to_whole(const std::vector<int64_t>& lengths, int64_t m = 1, int64_t n_layer = kStages) {
  const kit::GPT2 model = tiny_model(n_layer);
  const judge::Record got = pipeline_in_subject(model, lengths, m);
  if (!judge::judging()) return;
  const Outcome want = whole(model);
  expect_same_grads(want, got, "m = " + std::to_string(m) + ", slices " + tp::to_string(lengths));
}

// A schedule as data: [op (0 forward, 1 backward), unit, chunk] per action.
std::vector<std::vector<int64_t>> schedule_data(const pp::RankSchedule& s) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& a : s) out.push_back({a.op == pp::Op::Forward ? 0 : 1, a.microbatch, a.chunk});
  return out;
}
pp::RankSchedule schedule_of(const std::vector<std::vector<int64_t>>& data) {
  pp::RankSchedule out;
  for (const auto& a : data)
    if (a.size() == 3) out.push_back({a[0] == 0 ? pp::Op::Forward : pp::Op::Backward, a[1], a[2]});
  return out;
}

std::string order(const pp::RankSchedule& s) { return pp::to_string(s); }

// 2 processes, 2 stages each (rank r holds stages r and 2 + r), 2 blocks per stage, 2
// micro-batches of uneven slices: each rank's gradients are the whole model's for the
// parameters it holds, and the rank with the last stage has the batch loss. Each rank records
// its loss and gradients; the judge compares them.
constexpr int64_t kTwoRanksChunks = 2;
const std::vector<int64_t> kTwoRanksLengths{3, 7, 6};

RANK_SUBJECT(sliced_two_ranks) {
  const int64_t p = 2, chunks = kTwoRanksChunks, r = group.rank();
  const kit::GPT2 model = tiny_model(2 * p * chunks);
  const Outcome got = sliced(model, kTwoRanksLengths, 2, {}, p, chunks, r);
  out.put("loss", got.loss);
  out.put("grads", got.grads);
}

}  // namespace

// p = 2 ranks, m = 2 micro-batches of n = 3 slices (units 0..5): every forward in order, then
// each micro-batch's slices backwards, last slice first.
TEST(SlicedPipeline, ScheduleIsGPipeOrderWithSlicesBackwardsLastFirst) {
  const pp::PipelineShape shape{2, 6, 1};
  const pp::PipelineShape one_rank{1, 2, 2};  // both stages on one rank: each unit through both
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (int64_t r = 0; r < 2; ++r) out.put("rank " + std::to_string(r), order(tp::make_sliced_schedule(shape, 3, r)));
    out.put("one rank", order(tp::make_sliced_schedule(one_rank, 2, 0)));
  });
  JUDGE {
    for (int64_t r = 0; r < 2; ++r)
      EXPECT_EQ(got.get<std::string>("rank " + std::to_string(r)), "F0 F1 F2 F3 F4 F5 B2 B1 B0 B5 B4 B3") << "rank " << r;
    EXPECT_EQ(got.get<std::string>("one rank"), "F0 F0.1 F1 F1.1 B1.1 B1 B0.1 B0");
  }
}

// Problem 3's simulator replays it: no deadlock, and with K stages and n equal slices of
// one time unit forward and two backward the makespan is (n + K - 1) * 3.
TEST(SlicedPipeline, SimulatorReplaysTheSchedule) {
  const int64_t K = 3, n = 4;
  const pp::PipelineShape shape{K, n, 1};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::vector<std::vector<std::vector<int64_t>>> all;
    for (int64_t r = 0; r < K; ++r) all.push_back(schedule_data(tp::make_sliced_schedule(shape, n, r)));
    out.put("schedules", all);
  });
  JUDGE {
    pp::Schedules all;
    for (const auto& s : got.get<std::vector<std::vector<std::vector<int64_t>>>>("schedules")) all.push_back(schedule_of(s));
    if (!got.ok()) return;
    ASSERT_EQ(static_cast<int64_t>(all.size()), K) << "one schedule per rank";
    const pp::Timeline t = pp::simulate(all, shape, pp::Costs{1.0, 2.0, 0.0, {}, {}});
    EXPECT_DOUBLE_EQ(t.makespan, static_cast<double>((n + K - 1) * 3));
  }
}

TEST(SlicedPipeline, UniformSlicesEqualTheWholeModel) { expect_equal_to_whole({4, 4, 4, 4}); }
TEST(SlicedPipeline, UnevenSlicesEqualTheWholeModel) { expect_equal_to_whole({1, 6, 2, 7}); }
TEST(SlicedPipeline, OneTokenSlicesEqualTheWholeModel) { expect_equal_to_whole(std::vector<int64_t>(kTime, 1)); }
TEST(SlicedPipeline, OneSliceEqualsTheWholeModel) { expect_equal_to_whole({kTime}); }
TEST(SlicedPipeline, TwoMicroBatchesOfSlicesEqualTheWholeModel) { expect_equal_to_whole({5, 3, 8}, 2); }
TEST(SlicedPipeline, StagesOfTwoBlocksEachEqualTheWholeModel) { expect_equal_to_whole({5, 3, 8}, 2, 2 * kStages); }
TEST(SlicedPipeline, TwoProcessesOfTwoStagesEachEqualTheWholeModel) {
  const int n = 2;
  const auto run = kit_test::subject_ranks(n, "sliced_two_ranks", 60);
  if (!judge::judging()) return;
  if (!kit_test::expect_ranks_ok(run, n, "the sliced pipeline")) return;
  const Outcome want = whole(tiny_model(2 * n * kTwoRanksChunks));
  for (int r = 0; r < n; ++r) {
    const judge::Record& rec = run.records[static_cast<size_t>(r)];
    const Outcome got{rec.get<double>("loss"), rec.get<std::map<std::string, torch::Tensor>>("grads")};
    const std::string what = "rank " + std::to_string(r) + " of 2, 2 stages of 2 blocks each, m = 2, slices " +
                             tp::to_string(kTwoRanksLengths);
    if (r == 1) EXPECT_NEAR(got.loss, want.loss, 1e-10) << what << ": the batch loss (rank 1 holds the last stage)";
    EXPECT_FALSE(got.grads.empty()) << what << ": this rank holds no parameter";
    for (const auto& [name, g] : got.grads) {
      ASSERT_TRUE(want.grads.count(name)) << what << ": " << name << " is not a parameter of the model";
      const torch::Tensor& w = want.grads.at(name);
      ASSERT_TRUE(g.defined() && g.sizes() == w.sizes()) << what << ": the gradient of " << name;
      EXPECT_LT((g - w).abs().max().item<double>(), 1e-10) << what << ": the gradient of " << name;
    }
  }
}

// Each slice's backward is one pass over its graph: the output and every block's kept keys and
// values back-propagated together (one torch::autograd::backward). Separate backward calls give
// the same gradients (they are linear in the seeds) but walk the graph below block b again for
// each of its keys and values; a hook on every parameter counts the passes that reach it: one
// per slice and micro-batch, on every stage.
TEST(SlicedPipeline, EachSliceBackwardIsOnePassOverItsGraph) {
  const std::vector<int64_t> lengths{5, 3, 8};
  const int64_t m = 2;
  const kit::GPT2 model = tiny_model();
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::map<std::string, int64_t> passes;
    sliced(model, lengths, m, {}, 1, kStages, 0, &passes);
    out.put("passes", passes);
  });
  JUDGE {
    const auto passes = got.get<std::map<std::string, int64_t>>("passes");
    if (!got.ok()) return;
    const int64_t want = m * static_cast<int64_t>(lengths.size());
    std::set<std::string> stages;
    for (const auto& [key, n] : passes) {
      stages.insert(key.substr(0, key.find(':')));
      EXPECT_EQ(n, want) << key << ": backward passes that reached it, m = " << m << " micro-batches of slices "
                         << tp::to_string(lengths) << " (one torch::autograd::backward per slice, over its output "
                         << "and its blocks' keys and values together?)";
    }
    EXPECT_EQ(static_cast<int64_t>(stages.size()), kStages) << "a hook on the parameters of every stage";
  }
}

// Dropout 0.1, one rank holding the 3 stages, the GPipe order written out above (so that only
// the slice steps and the sliced attention are under test): from the same generator state
// every slice's forward draws the masks the slice-by-slice reference draws (each slice embedded
// at its own positions, then block by block), and the backward goes through those same masks:
// loss and gradients equal the reference's. A backward that runs a slice's forward again draws
// other masks.
TEST(SlicedPipeline, WithDropoutEqualsTheSliceBySliceReference) {
  const std::vector<int64_t> lengths{3, 7, 6};
  const kit::GPT2 model = tiny_model(kStages, 0.1);
  const pp::RankSchedule order = terapipe_test::gpipe_slice_order(1, static_cast<int64_t>(lengths.size()), kStages);
  const judge::Record got = pipeline_in_subject(model, lengths, 1, order);
  if (!judge::judging()) return;
  kit::GPT2 reference = model;  // the judge's copy of the model is untouched by the subject
  const Data d = batch();        // the generator as sliced() leaves it before the first forward
  reference->zero_grad();
  const torch::Tensor loss = kit::masked_cross_entropy(
      terapipe_test::reference_pipeline_logits(*reference, d.idx, lengths), d.labels, d.mask);
  loss.backward();
  Outcome want{loss.item<double>(), {}};
  for (const auto& p : reference->named_parameters()) want.grads[p.key()] = p.value().grad().clone();
  expect_same_grads(want, got,
              "dropout 0.1, slices " + tp::to_string(lengths) +
                  ", against the reference slice by slice from the same generator state (does each slice's "
                  "backward go through the graph its forward kept, with its dropout masks?)");
}

// A slice cannot run before the slice whose keys and values it attends to.
TEST(SlicedPipeline, SliceBeforeItsContextIsAClearError) {
  const kit::GPT2 model = tiny_model();
  pp::RankSchedule swapped{pp::F(1, 0), pp::F(1, 1), pp::F(1, 2), pp::F(0, 0), pp::F(0, 1), pp::F(0, 2),
                           pp::B(1, 2), pp::B(1, 1), pp::B(1, 0), pp::B(0, 2), pp::B(0, 1), pp::B(0, 0)};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("swapped", [&] { sliced(model, {8, 8}, 1, swapped); });
  });
  JUDGE {
    const auto o = got.get<judge::Outcome>("swapped");
    if (!o.threw()) {
      ADD_FAILURE() << "slice 1 ran before slice 0";
      return;
    }
    ASSERT_EQ(o.kind, "kit::Error") << o.describe();
    EXPECT_NE(o.message.find("context"), std::string::npos) << o.message;
  }
}

// Given: a slicing must cover the sequence, and a shape must hold whole micro-batches.
TEST(SlicedPipeline, BadSlicingsAndShapesAreClearErrors) {
  const kit::GPT2 model = tiny_model();
  const pp::RankSchedule any{pp::F(0, 0)};  // the checks come first: no step runs
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("8+4 of 16", [&] { sliced(model, {8, 4}, 1, any); });  // 12 of 16 tokens
    out.outcome("8+0+8", [&] { sliced(model, {8, 0, 8}, 1, any); });
    out.outcome("6 units, 4 slices", [&] { tp::make_sliced_schedule(pp::PipelineShape{2, 6, 1}, 4, 0); });
    out.outcome("rank 2 of 2", [&] { tp::make_sliced_schedule(pp::PipelineShape{2, 6, 1}, 3, 2); });
  });
  JUDGE {
    for (const char* what : {"8+4 of 16", "8+0+8", "6 units, 4 slices", "rank 2 of 2"})
      EXPECT_EQ(got.get<judge::Outcome>(what).kind, "kit::Error") << what << ": " << got.get<judge::Outcome>(what).describe();
  }
}
