// Problem 2.3: GPT-2 through the pipe equals GPT-2 without it (logits and every
// parameter's gradient), and the model-parallel baseline does too.
// The graded cases' subject parts run the student's pipelined model and record its logits,
// gradients and losses; the plain model's, and the checks, are the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "float64_model.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "kit/config.h"
#include "kit/errors.h"
#include "model/gpt2.h"
#include "pipeline/model_parallel.h"
#include "pipeline_test_util.h"
#include "project/utils.h"
#include "train/loss.h"

namespace kit {
namespace {

using test::max_abs_diff;
using test::run_with_timeout;

constexpr double kGpt2Tol = 1e-9;  // float64 (pipe_test.cpp, in the same unity batch, has its own kTol)

GPT2Config small_config(int64_t n_layer) {
  GPT2Config cfg = gpt2_preset("tiny");
  cfg.n_layer = n_layer;
  cfg.dropout = 0;  // dropout draws random numbers in a different order when micro-batched
  cfg.vocab_size = 50;
  cfg.n_positions = 16;
  return cfg;
}

GPT2 make_model(const GPT2Config& cfg, uint64_t seed = 1) { return kit_test::float64_model(cfg, seed); }

Batch make_batch(int64_t B, int64_t T, int64_t vocab) {
  torch::manual_seed(99);
  Batch b;
  b.input = torch::randint(vocab, {B, T}, torch::kLong);
  b.labels = torch::randint(vocab, {B, T}, torch::kLong);
  b.mask = (torch::rand({B, T}) < 0.7).to(torch::kFloat32);
  b.mask.select(1, T - 1).fill_(1);  // every example counts at least one token
  return b;
}

struct Outcome {
  torch::Tensor logits;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
  void put(judge::Record& out) const {
    out.put("logits", logits);
    out.put("grads", grads);
  }
  static Outcome get(const judge::Record& got) {
    return {got.get<torch::Tensor>("logits"), got.get<std::vector<std::pair<std::string, torch::Tensor>>>("grads")};
  }
};

Outcome forward_backward(const std::function<torch::Tensor(const torch::Tensor&)>& forward, GPT2& model,
                     const Batch& b) {
  model->zero_grad();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  Outcome r;
  r.logits = forward(b.input);
  masked_cross_entropy(r.logits, b.labels, b.mask).backward();
  for (const auto& p : model->named_parameters())
    r.grads.emplace_back(p.key(), p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor());
  return r;
}

void expect_same(const Outcome& want, const Outcome& got, const std::string& what) {
  ASSERT_TRUE(got.logits.defined()) << what << ": no logits";
  ASSERT_EQ(got.logits.sizes(), want.logits.sizes()) << what;
  for (int64_t r = 0; r < want.logits.size(0); ++r) {
    const double d = max_abs_diff(want.logits[r], got.logits[r]);
    EXPECT_LE(d, kGpt2Tol) << what << ": logits of example " << r << " differ, max abs difference " << d;
  }
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t k = 0; k < want.grads.size(); ++k) {
    const auto& name = want.grads[k].first;
    ASSERT_TRUE(got.grads[k].second.defined())
        << what << ": parameter " << name << " got no gradient (are the model's own blocks in the pipe?)";
    const double d = max_abs_diff(want.grads[k].second, got.grads[k].second);
    EXPECT_LE(d, kGpt2Tol) << what << ": gradient of " << name << " differs, max abs difference " << d;
  }
}

void check_pipeline_matches(int64_t n_layer, int64_t stages, int64_t B, int64_t split) {
  GPT2 model = make_model(small_config(n_layer));
  const Batch b = make_batch(B, 12, 50);

  const judge::Record rec = judge::subject([&](judge::Record& out) {
    GPT2ModelParallel mp(model, cpu_stages(stages));
    mp.prepare_pipeline_parallel(split, /*threads_per_stage=*/1);
    out.put("pipelined", mp.pipeline_parallel());
    Outcome got;
    out.put("status", run_with_timeout(
                          [&] { got = forward_backward([&](const torch::Tensor& x) { return mp.forward(x); }, model, b); },
                          60));
    got.put(out);
  });
  if (!judge::judging()) return;
  const Outcome want = forward_backward([&](const torch::Tensor& x) { return model->forward(x); }, model, b);
  ASSERT_TRUE(rec.get<bool>("pipelined")) << "prepare_pipeline_parallel must set up the pipe";
  ASSERT_EQ(rec.get<std::string>("status"), "");
  const Outcome got = Outcome::get(rec);
  expect_same(want, got,
              std::to_string(n_layer) + " blocks on " + std::to_string(stages) + " stages, batch " +
                  std::to_string(B) + " in micro-batches of " + std::to_string(split));
}

TEST(GPT2Pipeline, TinyPresetOnTwoStagesMatchesThePlainModel) { check_pipeline_matches(2, 2, 6, 4); }

TEST(GPT2Pipeline, ThreeBlocksOnThreeStagesMatchesThePlainModel) { check_pipeline_matches(3, 3, 5, 2); }

TEST(GPT2Pipeline, PipeHoldsTheModelsOwnBlocksOnTheirStages) {
  GPT2 model = make_model(small_config(4));
  // The subject records, per partition, which of the model's blocks each layer is (-1: none of
  // them, e.g. a copy) and the pipe's devices next to the stages'.
  const judge::Record got = judge::subject([&](judge::Record& out) {
    GPT2ModelParallel mp(model, cpu_stages(2));
    mp.prepare_pipeline_parallel(3, 2);
    out.put("pipelined", mp.pipeline_parallel());
    if (!mp.pipeline_parallel()) return;
    const auto& pipe = mp.pipe();
    out.put("split_size", pipe->split_size());
    out.put("threads_per_worker", static_cast<int64_t>(pipe->workers().threads_per_worker()));
    std::vector<std::vector<int64_t>> blocks;
    for (const auto& part : pipe->partitions()) {
      std::vector<int64_t> which;
      for (size_t k = 0; k < part->size(); ++k) {
        const auto* layer = test::unwrapped(part->ptr(k));
        int64_t at = -1;
        for (size_t i = 0; i < model->h->size(); ++i)
          if (layer == model->h[i].get()) at = static_cast<int64_t>(i);
        which.push_back(at);
      }
      blocks.push_back(which);
    }
    out.put("blocks", blocks);
    std::vector<std::string> devices, stages;
    for (const auto& d : pipe->devices()) devices.push_back(to_string(d));
    for (const auto& s : mp.stages()) stages.push_back(to_string(s));
    out.put("devices", devices);
    out.put("stages", stages);
  });
  if (!judge::judging()) return;
  ASSERT_TRUE(got.get<bool>("pipelined"));
  EXPECT_EQ(got.get<int64_t>("split_size"), 3) << "prepare_pipeline_parallel(3, 2): the pipe's micro-batches are "
                                                  "split_size rows (pass it on to Pipe)";
  EXPECT_EQ(got.get<int64_t>("threads_per_worker"), 2)
      << "prepare_pipeline_parallel(3, 2): each stage's worker runs threads_per_stage threads (pass it on to Pipe)";
  const auto blocks = got.get<std::vector<std::vector<int64_t>>>("blocks");
  ASSERT_EQ(blocks.size(), 2u) << "4 blocks on 2 stages: two partitions of 2 consecutive blocks";
  const auto devices = got.get<std::vector<std::string>>("devices");
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices, got.get<std::vector<std::string>>("stages")) << "the pipe's stages must be the model's";
  EXPECT_EQ(got.get<std::vector<std::string>>("stages"),
            (std::vector<std::string>{to_string(cpu_stages(2)[0]), to_string(cpu_stages(2)[1])}));
  // The pipe must train the model's parameters, not copies of them.
  int64_t b = 0;
  for (const auto& part : blocks)
    for (size_t k = 0; k < part.size(); ++k, ++b)
      EXPECT_EQ(part[k], b) << "partition layer " << k << " is not block " << b << " of the model";
  EXPECT_EQ(b, 4) << "every block must be in the pipe, in order";
}

TEST(GPT2Pipeline, EvaluationThroughThePipeBuildsNoGraph) {
  GPT2 model = make_model(small_config(2));
  const Batch b = make_batch(5, 8, 50);
  model->eval();
  const judge::Record rec = judge::subject([&](judge::Record& out) {
    GPT2ModelParallel mp(model, cpu_stages(2));
    mp.prepare_pipeline_parallel(2, 1);
    torch::Tensor got;
    out.put("status", run_with_timeout(
                          [&] {
                            torch::NoGradGuard no_grad;
                            got = mp.forward(b.input);
                          },
                          60));
    out.put("requires_grad", got.defined() && got.requires_grad());
    out.put("logits", got);
  });
  if (!judge::judging()) return;
  torch::Tensor want;
  {
    torch::NoGradGuard no_grad;
    want = model->forward(b.input);
  }
  ASSERT_EQ(rec.get<std::string>("status"), "");
  EXPECT_FALSE(rec.get<bool>("requires_grad")) << "evaluation under NoGradGuard built a graph inside the pipe";
  const torch::Tensor got = rec.get<torch::Tensor>("logits");
  ASSERT_TRUE(got.defined() && got.sizes() == want.sizes()) << "no logits, or logits of the wrong shape";
  EXPECT_LE(max_abs_diff(want, got), kGpt2Tol);
}

TEST(GPT2Pipeline, TrainingStepsMatchThePlainModel) {
  // Two AdamW steps, pipelined and not, from the same initial weights.
  const GPT2Config cfg = small_config(2);
  const Batch b = make_batch(7, 10, 50);
  // One step, written out (the kit's optimizer and loss): the plain model's in the judge, and the
  // student's pipelined model's in the subject.
  const auto step = [&](const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                        torch::optim::Optimizer& opt) {
    opt.zero_grad();
    auto loss = masked_cross_entropy(forward(b.input), b.labels, b.mask);
    loss.backward();
    opt.step();
    return loss.item<double>();
  };
  const judge::Record rec = judge::subject([&](judge::Record& out) {
    GPT2 piped = make_model(cfg, 5);
    torch::optim::AdamW opt_piped(piped->parameters(), torch::optim::AdamWOptions(1e-2));
    GPT2ModelParallel mp(piped, cpu_stages(2));
    mp.prepare_pipeline_parallel(3, 1);
    std::vector<double> losses;
    for (int k = 0; k < 2; ++k) {
      double l = 0;
      const std::string status = run_with_timeout([&] { l = step([&](const torch::Tensor& x) { return mp.forward(x); }, opt_piped); }, 60);
      if (!status.empty()) throw Error("step " + std::to_string(k) + ": " + status);
      losses.push_back(l);
    }
    out.put("losses", losses);
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (const auto& p : piped->named_parameters()) params.emplace_back(p.key(), p.value());
    out.put("params", params);
  });
  if (!judge::judging()) return;
  GPT2 plain = make_model(cfg, 5);
  torch::optim::AdamW opt_plain(plain->parameters(), torch::optim::AdamWOptions(1e-2));
  const auto losses = rec.get<std::vector<double>>("losses");
  ASSERT_EQ(losses.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const double l_plain = step([&](const torch::Tensor& x) { return plain->forward(x); }, opt_plain);
    EXPECT_NEAR(l_plain, losses[static_cast<size_t>(k)], 1e-9) << "loss of step " << k;
  }
  const auto want = plain->named_parameters();
  const auto got = rec.get<std::vector<std::pair<std::string, torch::Tensor>>>("params");
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, value] : got) {
    ASSERT_TRUE(want.contains(name)) << name << " is not a parameter of GPT-2";
    const double d = max_abs_diff(want[name], value);
    EXPECT_LE(d, 1e-8) << "after two steps, parameter " << name << " differs by " << d;
  }
}

TEST(GPT2ModelParallelBaseline, MatchesThePlainModel) {
  GPT2 model = make_model(small_config(3));
  const Batch b = make_batch(4, 12, 50);
  const Outcome want = forward_backward([&](const torch::Tensor& x) { return model->forward(x); }, model, b);
  GPT2ModelParallel mp(model, cpu_stages(3));
  EXPECT_FALSE(mp.pipeline_parallel());
  const Outcome got = forward_backward([&](const torch::Tensor& x) { return mp.forward(x); }, model, b);
  expect_same(want, got, "model parallel on 3 stages");
}

TEST(GPT2Placement, ConsecutiveBlocksPerStage) {
  EXPECT_EQ(blocks_per_stage(4, 2), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(blocks_per_stage(12, 4), (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(blocks_per_stage(12, 1), (std::vector<int64_t>{12}));
  EXPECT_EQ(blocks_per_stage(5, 2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(blocks_per_stage(4, 3), (std::vector<int64_t>{2, 1, 1})) << "no stage may be left without blocks";

  GPT2 model = make_model(small_config(4));
  GPT2ModelParallel mp(model, cpu_stages(3));
  std::vector<int64_t> got;
  for (const auto& s : mp.block_stages()) got.push_back(s.index);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 1, 2}));
}

TEST(GPT2Placement, MoreStagesThanBlocksIsRejected) {
  EXPECT_THROW(blocks_per_stage(2, 3), Error);
  EXPECT_THROW(blocks_per_stage(2, 0), Error);
  GPT2 model = make_model(small_config(2));
  try {
    GPT2ModelParallel mp(model, cpu_stages(3));
    FAIL() << "3 stages for 2 blocks must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 2"), std::string::npos) << "say what would work: " << e.what();
  }
}

}  // namespace
}  // namespace kit
