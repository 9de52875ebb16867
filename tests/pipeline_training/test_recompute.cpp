// Problem 6.3: activation recomputation (pipeline_training/recompute.h), in float64 on the
// tiny preset with dropout on (0.1), so that every dropout mask matters.
//
//   - One block, and a whole one-stage model (embedding dropout, blocks, the tied output and
//     the loss): the loss and every gradient, the input's and each parameter's, equal those
//     without recomputation to 1e-12. A recomputation that does not restore the generator's
//     state draws other dropout masks and is off by the scale of a gradient; one run under
//     NoGradGuard gives the parameters no gradient. The random numbers drawn after the
//     backward are the ones drawn without recomputation (the state is put back). Two
//     backwards through a kept graph (retain_graph) give the same input gradient twice.
//   - Memory (kit/memory.h's counting allocator): the bytes a middle stage's forward keeps
//     alive with recomputation are its input, its blocks' outputs (the next blocks' inputs
//     and the stage's output): (blocks + 1) x b x T x C x 8, plus at most 16 KiB per block
//     (the saved generator state is about 5 KB); without recomputation several times more.
//   - Counted (given counters): one forward and backward of a stage runs each block's forward
//     twice with recomputation (once inside the backward), once without.
//   - 1F1B on 2 processes (the reference schedule, run here with the given P2P and stages,
//     not Problem 3.2's executor, so that only recompute is graded), dropout 0.1, 3 batches
//     with AdamW steps: each rank's gradients after the first batch (1e-9 of their scale) and
//     the losses (1e-5 relative) equal those without recomputation. Rank 0 runs two forwards
//     before its first backward: a recomputation that leaves the generator at the recomputed
//     forward's state gives the next micro-batch the previous one's masks.
//   - RecomputeRun (no rubric item: it runs the executor too): train_parallel
//     --recompute, 2 processes, 1F1B, dropout 0.1, gives the losses of the run without.
// The subject parts (and the ranks, RANK_SUBJECT) run recompute (student code) and record its
// outputs, gradients, kept bytes and counters; the runs without recomputation (given code
// only: StageModule::forward without recompute never calls it) and every check are the
// judge's (tests/judge/judge.h). The 2-process 1F1B without recomputation is computed in the
// judge in one process (one_process_1f1b): every rank's own model copy, optimizer and dropout
// generator, the messages handed over in memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "judge/judge.h"
#include "judge/tensor.h"
#include "kit/config.h"
#include "kit/memory.h"
#include "kit/precision.h"
#include "model/gpt2.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/recompute.h"
#include "pipeline_training/stage_model.h"
#include "rank_roles.h"
#include "reference_schedules.h"
#include "run_test_util.h"

// What the subject parts record, as data (judge::Fields): one block's run, one stage's run,
// the given recompute counters of a stage's forward and backward.
namespace rc_test {
struct BlockRun {
  torch::Tensor out, x_grad, after;  // after: random numbers drawn after the backward
  std::map<std::string, torch::Tensor> grads;
};
struct StageRun {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
};
struct BlockCounts {
  int64_t blocks = 0, after_forward = 0, forwards = 0, recomputed = 0;  // after_forward: block forwards then
};
}  // namespace rc_test

namespace kit::judge {
template <>
struct Codec<rc_test::BlockRun> : Fields<rc_test::BlockRun> {
  static auto fields() {
    using R = rc_test::BlockRun;
    return std::make_tuple(field("out", &R::out), field("x_grad", &R::x_grad), field("after", &R::after),
                           field("grads", &R::grads));
  }
};
template <>
struct Codec<rc_test::StageRun> : Fields<rc_test::StageRun> {
  static auto fields() {
    return std::make_tuple(field("loss", &rc_test::StageRun::loss), field("grads", &rc_test::StageRun::grads));
  }
};
template <>
struct Codec<rc_test::BlockCounts> : Fields<rc_test::BlockCounts> {
  static auto fields() {
    using K = rc_test::BlockCounts;
    return std::make_tuple(field("blocks", &K::blocks), field("after_forward", &K::after_forward),
                           field("forwards", &K::forwards), field("recomputed", &K::recomputed));
  }
};
}  // namespace kit::judge

namespace {
using kit::pp::MicroBatch;
using kit::pp::StageModule;
using rc_test::BlockCounts;
using rc_test::BlockRun;
using rc_test::StageRun;
namespace judge = kit::judge;

constexpr int64_t kRcBatch = 2, kRcSeqLen = 16, kRcVocab = 64;
constexpr uint64_t kRcSeed = 23;
constexpr double kRcDropout = 0.1;

// The tiny preset in float64 with dropout on.
kit::GPT2 rc_model(int64_t n_layer) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = kRcDropout;
  cfg.n_layer = n_layer;
  kit::GPT2 m = kit::build_model(cfg, kRcVocab, kRcSeqLen, kRcSeed);
  m->to(torch::kFloat64);
  return m;
}

StageModule rc_stage(const kit::GPT2& full, int64_t stage, int64_t n_stages, bool recompute) {
  StageModule s(full, stage, n_stages);
  s->to(torch::kFloat64);
  s->train();
  s->set_recompute(recompute);
  return s;
}

MicroBatch rc_microbatch() {
  torch::manual_seed(kRcSeed + 1);
  const torch::Tensor t = torch::randint(kRcVocab, {kRcBatch, kRcSeqLen + 1}, torch::kInt64);
  MicroBatch mb;
  mb.idx = t.narrow(1, 0, kRcSeqLen).contiguous();
  mb.labels = t.narrow(1, 1, kRcSeqLen).contiguous();
  mb.mask = torch::ones({kRcBatch, kRcSeqLen}, torch::kFloat64);
  return mb;
}

std::map<std::string, torch::Tensor> grads_of(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters())
    out[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::Tensor();
  return out;
}

// Every parameter's gradient defined and within 1e-12 of the reference's.
void expect_same_grads(const std::map<std::string, torch::Tensor>& got, const std::map<std::string, torch::Tensor>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const torch::Tensor& g = got.at(name);
    ASSERT_TRUE(w.defined()) << name << " has no gradient even without recomputation";
    ASSERT_TRUE(g.defined()) << what << ": " << name << " got no gradient with recomputation: is the block re-run "
                             << "with gradients on (the engine runs the backward with them off: AutoGradMode(true)) "
                             << "and its output back-propagated?";
    EXPECT_LE((g - w).abs().max().item<double>(), 1e-12)
        << what << ": the gradient of " << name << " differs by " << (g - w).abs().max().item<double>()
        << " (scale " << w.abs().max().item<double>() << "): does the recomputed forward draw the forward's dropout "
        << "masks (the generator's state saved in the forward, restored before re-running the block)?";
  }
}

// The run with recomputation (student code) in the subject, recorded as data; the same run
// without (given code) in the judge. Both, {recomputed, plain}, in the judge; nothing in the subject.
template <typename Run>
auto recomputed_and_plain(const Run& run, const std::string& what) {
  using R = decltype(run(true));
  const judge::Record got = judge::subject([&](judge::Record& out) { out.put("run", run(true)); }, what);
  return judge::judging() ? std::optional<std::pair<R, R>>({got.get<R>("run"), run(false)}) : std::nullopt;
}

// One block (dropout inside), a fixed weighting of its output as the loss. Between the forward
// and the backward something else draws random numbers (another micro-batch's forward), and
// after the backward the test draws some more: those must be what they are without recompute.
// `precision` BF16: the block in float32 under bf16 autocast on the CPU (--precision bf16):
// the forward runs its matrix products in bf16, the backward outside autocast, as the
// programs do. FP32 means the float64 block here (exact comparisons).
BlockRun run_one_block_in(bool with_recompute, kit::Precision precision) {
  const bool bf16 = precision == kit::Precision::BF16;
  const auto type = bf16 ? torch::kFloat32 : torch::kFloat64;
  kit::GPT2 full = rc_model(1);
  full->to(type);
  kit::Block block(full->h->ptr<kit::BlockImpl>(0));
  block->train();
  torch::manual_seed(kRcSeed + 2);
  const torch::Tensor x = torch::randn({kRcBatch, kRcSeqLen, full->config().n_embd}, type).requires_grad_(true);
  const torch::Tensor weight = torch::randn_like(x);
  kit::BlockImpl* b = block.get();
  const kit::pp::BlockFn fn = [b](const torch::Tensor& in) { return b->forward(in); };
  torch::manual_seed(kRcSeed + 3);
  torch::Tensor y;
  {
    kit::Autocast autocast(precision, c10::DeviceType::CPU);
    y = with_recompute ? kit::pp::recompute(fn, x) : fn(x);
  }
  const torch::Tensor meanwhile = torch::rand({16}, type);  // another forward's draws
  (y.to(type) * weight).sum().backward();
  BlockRun r;
  r.out = y.detach().to(type).clone();
  r.x_grad = x.grad().defined() ? x.grad().clone() : torch::Tensor();
  r.after = torch::rand({16}, type);
  r.grads = grads_of(*block);
  (void)meanwhile;
  return r;
}
BlockRun run_one_block(bool with_recompute) { return run_one_block_in(with_recompute, kit::Precision::FP32); }

TEST(Recompute, OneBlockGradientsEqualWithDropout) {
  const auto both = recomputed_and_plain(run_one_block, "recompute of one block");
  if (!both) return;
  const auto& [rec, plain] = *both;
  ASSERT_TRUE(rec.out.defined() && rec.after.defined()) << "recompute(block, x) returned no tensor";
  ASSERT_EQ(rec.out.sizes(), plain.out.sizes());
  EXPECT_LE((rec.out - plain.out).abs().max().item<double>(), 1e-12)
      << "recompute(block, x) must return block(x), dropout masks included";
  ASSERT_TRUE(rec.x_grad.defined()) << "the input got no gradient: backward must return the input's gradient";
  EXPECT_LE((rec.x_grad - plain.x_grad).abs().max().item<double>(), 1e-12)
      << "the input's gradient differs by " << (rec.x_grad - plain.x_grad).abs().max().item<double>() << " (scale "
      << plain.x_grad.abs().max().item<double>() << "): the recomputed forward's dropout masks must be the forward's";
  expect_same_grads(rec.grads, plain.grads, "one block");
  EXPECT_TRUE(torch::equal(rec.after, plain.after))
      << "the random numbers drawn after the backward differ from those without recomputation: after the "
      << "recomputation the generator must get back the state it had before the backward restored the forward's";
}

// The graph kept (retain_graph) and back-propagated twice: the recomputation runs twice, and
// each run must give the first one's gradients. A backward that re-runs the block on the saved
// input itself (no fresh detach()) accumulates the input's gradient across the two: the second
// is twice the first.
TEST(Recompute, TwoBackwardsThroughAKeptGraphGiveTheSameGradients) {
  const judge::Record got = judge::subject(
      [&](judge::Record& out) {
        kit::GPT2 full = rc_model(1);
        kit::Block block(full->h->ptr<kit::BlockImpl>(0));
        block->train();
        torch::manual_seed(kRcSeed + 2);  // run_one_block's input, weighting and dropout masks
        const torch::Tensor x =
            torch::randn({kRcBatch, kRcSeqLen, full->config().n_embd}, torch::kFloat64).requires_grad_(true);
        const torch::Tensor weight = torch::randn_like(x);
        kit::BlockImpl* b = block.get();
        torch::manual_seed(kRcSeed + 3);
        const torch::Tensor y = kit::pp::recompute([b](const torch::Tensor& in) { return b->forward(in); }, x);
        const torch::Tensor loss = (y * weight).sum();
        loss.backward({}, /*retain_graph=*/true);
        out.put("first", x.grad().defined() ? x.grad().clone() : torch::Tensor());
        if (x.grad().defined()) x.grad().zero_();
        loss.backward();
        out.put("second", x.grad().defined() ? x.grad().clone() : torch::Tensor());
      },
      "two backwards through one recomputed block");
  if (!judge::judging()) return;
  const torch::Tensor first = got.get<torch::Tensor>("first"), second = got.get<torch::Tensor>("second");
  ASSERT_TRUE(first.defined() && second.defined()) << "the input got no gradient: backward must return it";
  EXPECT_LE((first - run_one_block(false).x_grad).abs().max().item<double>(), 1e-12)
      << "the first backward's input gradient is not the block's without recomputation";
  EXPECT_LE((second - first).abs().max().item<double>(), 1e-12)
      << "the second backward gave the input a gradient " << (second / first).mean().item<double>()
      << " times the first: each backward must re-run the block on a fresh leaf (the saved input detach()ed "
      << "again), not on the saved tensor itself, whose .grad keeps what the last backward left";
}

// run_one_block under bf16 autocast: the recomputation must run the block as its first
// forward ran (autocast's setting travels with the generators' states, save_generators): run
// again in fp32 it keeps other activations, and the gradients move by bf16's rounding, about
// 1e-3 of their scale.
TEST(Recompute, UnderBf16AutocastTheBlockRunsAgainAsItFirstRan) {
  const auto both = recomputed_and_plain([](bool r) { return run_one_block_in(r, kit::Precision::BF16); },
                                         "recompute of one block under bf16 autocast");
  if (!both) return;
  const auto& [rec, plain] = *both;
  ASSERT_TRUE(rec.out.defined() && rec.x_grad.defined()) << "no output or no input gradient under autocast";
  const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
    return (got - want).abs().max().item<double>() <= 1e-6 * std::max(1.0, want.abs().max().item<double>());
  };
  EXPECT_TRUE(close(rec.out, plain.out)) << "recompute(block, x) under autocast must return block(x) under autocast";
  EXPECT_TRUE(close(rec.x_grad, plain.x_grad))
      << "under bf16 autocast the input's gradient differs by " << (rec.x_grad - plain.x_grad).abs().max().item<double>()
      << " (scale " << plain.x_grad.abs().max().item<double>() << "): the backward runs outside autocast, so the "
      << "recomputation must put autocast's setting of the forward back (restore_generators of the states "
      << "save_generators(x.device()) took) before it runs the block again";
  ASSERT_EQ(rec.grads.size(), plain.grads.size());
  for (const auto& [name, w] : plain.grads) {
    const torch::Tensor& g = rec.grads.at(name);
    ASSERT_TRUE(g.defined()) << name << " got no gradient with recomputation under autocast";
    EXPECT_TRUE(close(g, w)) << "under bf16 autocast the gradient of " << name << " differs by "
                             << (g - w).abs().max().item<double>() << " (scale " << w.abs().max().item<double>()
                             << "): is the block re-run under the forward's autocast setting?";
  }
}

// Steps of a whole stage, one after another: with recomputation nothing of a step may outlive
// its backward, just as without. Keeping the block's output in the autograd context
// (saved_data, which autograd never releases) makes a cycle output -> its grad_fn -> the
// context -> output: every block's output of every step stays alive.
TEST(Recompute, NothingOfAStepOutlivesItsBackward) {
  kit::memory::enable_cpu_counting();
  const kit::GPT2 full = rc_model(4);
  const auto growth = [&](bool with_recompute) {
    StageModule stage = rc_stage(full, 0, 1, with_recompute);
    const MicroBatch mb = rc_microbatch();
    const auto step = [&] {
      torch::manual_seed(kRcSeed + 6);
      stage->loss(stage->forward(mb.idx), mb).backward();
    };
    step();  // the gradients exist from here on; later steps add into them
    const int64_t before = kit::memory::cpu_bytes_now();
    for (int k = 0; k < 3; ++k) step();
    return kit::memory::cpu_bytes_now() - before;
  };
  const judge::Record got = judge::subject([&](judge::Record& out) { out.put("growth", growth(true)); },
                                           "three steps of a stage with recomputation");
  if (!judge::judging()) return;
  const int64_t with = got.get<int64_t>("growth"), without = growth(false);
  const int64_t activation = kRcBatch * kRcSeqLen * full->config().n_embd * 8;
  std::cout << "bytes alive after three more steps: " << with << " with recomputation, " << without << " without"
            << std::endl;
  ASSERT_LE(without, activation / 2) << "the steps without recomputation keep " << without << " bytes";
  EXPECT_LE(with, activation / 2)
      << "three steps with recomputation left " << with << " more bytes alive than before them (one block output "
      << "is " << activation << " bytes; without recomputation: " << without << "): something of each step "
      << "outlives its backward. Keep only the input and the generators' states in the context, never the "
      << "block's output (its grad_fn holds the context: a cycle that is never freed)";
}

// A whole one-stage model (stage 0 of 1: ids -> logits -> loss), two blocks.
StageRun run_whole_stage(bool with_recompute) {
  const kit::GPT2 full = rc_model(2);
  StageModule stage = rc_stage(full, 0, 1, with_recompute);
  const MicroBatch mb = rc_microbatch();
  torch::manual_seed(kRcSeed + 4);
  const torch::Tensor loss = stage->loss(stage->forward(mb.idx), mb);
  loss.backward();
  return {loss.item<double>(), grads_of(*stage)};
}

TEST(Recompute, StageLossAndGradientsEqualWithDropout) {
  const auto both = recomputed_and_plain(run_whole_stage, "a whole stage with recomputation");
  if (!both) return;
  const auto& [rec, plain] = *both;
  EXPECT_NEAR(rec.loss, plain.loss, 1e-12) << "the stage's loss changed with recomputation on";
  expect_same_grads(rec.grads, plain.grads, "a whole stage");
}

// A middle stage (stage 1 of 3, blocks 2 and 3 of 6): the bytes its forward keeps alive.
TEST(Recompute, StageKeepsOnlyBlockInputs) {
  kit::memory::enable_cpu_counting();  // before the model: every buffer below is counted
  const int64_t b = 4, T = 32;
  const kit::GPT2 full = rc_model(6);
  const int64_t C = full->config().n_embd;
  const auto kept_by_forward = [&](bool with_recompute, int64_t* blocks) {
    StageModule stage = rc_stage(full, 1, 3, with_recompute);
    *blocks = stage->num_blocks();
    torch::manual_seed(kRcSeed + 5);
    {  // whatever a first forward makes once exists before the count
      const torch::Tensor x = torch::randn({b, T, C}, torch::kFloat64).requires_grad_(true);
      stage->forward(x);
    }
    const int64_t before = kit::memory::cpu_bytes_now();
    const torch::Tensor x = torch::randn({b, T, C}, torch::kFloat64).requires_grad_(true);
    const torch::Tensor y = stage->forward(x);
    return kit::memory::cpu_bytes_now() - before;
  };
  // With recomputation (student code) in the subject; without (given code) in the judge.
  const judge::Record got = judge::subject(
      [&](judge::Record& out) {
        int64_t blocks_with = 0;
        out.put("with", kept_by_forward(true, &blocks_with));
      },
      "a middle stage's forward with recomputation");
  if (!judge::judging()) return;
  int64_t blocks = 0;
  const int64_t without = kept_by_forward(false, &blocks);
  const int64_t with = got.get<int64_t>("with");
  ASSERT_EQ(blocks, 2);
  const int64_t activation = b * T * C * 8, want = (blocks + 1) * activation, slack = blocks * 16 * 1024;
  const std::string sizes = "; with recomputation the forward kept " + std::to_string(with) + " bytes, without " +
                            std::to_string(without) + " (one b x T x C activation is " + std::to_string(activation) +
                            " bytes; the input, " + std::to_string(blocks) + " block outputs: " + std::to_string(want) + ")";
  std::cout << "kept by the forward of a middle stage" << sizes << std::endl;
  EXPECT_GE(with, want) << "less than the input and the blocks' outputs" << sizes;
  EXPECT_LE(with, want + slack) << "more than the blocks' inputs and the output (plus " << slack
                                << " bytes of slack): does the forward keep a graph through the block, or anything "
                                << "the block computes inside?" << sizes;
  EXPECT_GE(without, 3 * want) << "without recomputation a forward keeps every block's activations" << sizes;
}

// The given counters: each block's forward runs twice with recomputation, once without.
BlockCounts count_block_forwards(const kit::GPT2& full, const MicroBatch& mb, bool with_recompute) {
  StageModule stage = rc_stage(full, 0, 1, with_recompute);
  BlockCounts k;
  k.blocks = stage->num_blocks();
  kit::pp::reset_recompute_counters();
  const torch::Tensor loss = stage->loss(stage->forward(mb.idx), mb);
  k.after_forward = kit::pp::recompute_counters().forwards;
  loss.backward();
  const kit::pp::RecomputeCounters c = kit::pp::recompute_counters();
  k.forwards = c.forwards;
  k.recomputed = c.recomputed;
  return k;
}

TEST(Recompute, EachBlockRunsTwiceWithRecomputeOnceWithout) {
  const kit::GPT2 full = rc_model(2);
  const MicroBatch mb = rc_microbatch();
  // With recomputation (student code) in the subject, which records the given counters.
  const auto both = recomputed_and_plain([&](bool r) { return count_block_forwards(full, mb, r); },
                                         "a stage's forward and backward with recomputation");
  if (!both) return;
  for (const bool with_recompute : {false, true}) {
    const BlockCounts k = with_recompute ? both->first : both->second;
    const int64_t n = rc_stage(full, 0, 1, false)->num_blocks();  // the stage's blocks (given code)
    const kit::pp::RecomputeCounters c{k.forwards, k.recomputed};
    SCOPED_TRACE(with_recompute ? "with recomputation" : "without recomputation");
    EXPECT_EQ(k.after_forward, n) << "the forward must run each of the " << n << " blocks once";
    EXPECT_EQ(c.forwards, with_recompute ? 2 * n : n)
        << "block forwards in one forward and backward of a stage of " << n << " blocks";
    EXPECT_EQ(c.recomputed, with_recompute ? n : 0) << "block forwards run inside the backward";
    std::cout << (with_recompute ? "with" : "without") << " recomputation: " << c.forwards << " block forwards, "
              << c.recomputed << " inside the backward (" << n << " blocks)" << std::endl;
  }
}

// 1F1B on 2 processes, written out here with the given P2P and stages (not the executor of
// Problem 3.2, so that this case grades recompute alone): the reference schedule, 3 batches
// of 4 micro-batches, AdamW steps between them, float64, dropout 0.1, every rank drawing from
// its own seed. Returns the last stage's batch losses and this rank's gradients after the
// first batch.
struct OneFOneBRun {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> grads;
};
// `steps` batches of `rows` sequences, each split into m micro-batches: the same on every rank
// and in the judge's one-process run (manual_seed first).
std::vector<std::vector<MicroBatch>> rc_batches(int64_t steps, int64_t rows, int64_t m) {
  torch::manual_seed(kRcSeed + 10);
  std::vector<std::vector<MicroBatch>> batches;
  for (int64_t k = 0; k < steps; ++k) {
    const torch::Tensor t = torch::randint(kRcVocab, {rows, kRcSeqLen + 1}, torch::kInt64);
    batches.push_back(kit::pp::split_batch(t.narrow(1, 0, kRcSeqLen).contiguous(), t.narrow(1, 1, kRcSeqLen).contiguous(),
                                           torch::ones({rows, kRcSeqLen}, torch::kFloat64), m));
  }
  return batches;
}

OneFOneBRun run_two_stage_1f1b(const kit::dist::Group& group, bool with_recompute) {
  const int64_t p = group.size(), rank = group.rank(), m = 4, rows = 8, steps = 3;
  const kit::pp::PipelineShape shape{p, m, 1};
  const kit::GPT2 full = rc_model(2);
  const int64_t C = full->config().n_embd;
  std::vector<StageModule> chunks{rc_stage(full, rank, p, with_recompute)};
  StageModule& stage = chunks[0];
  torch::optim::AdamW opt(stage->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
  kit::pp::P2P p2p(shape, rank, torch::TensorOptions().dtype(torch::kFloat64));
  const std::vector<kit::pp::Action> schedule = pp_test::ref_all_1f1b(p, m)[static_cast<size_t>(rank)];
  const std::vector<std::vector<MicroBatch>> batches = rc_batches(steps, rows, m);  // the same on every rank
  torch::manual_seed(kRcSeed + 20 + static_cast<uint64_t>(rank));  // dropout: this rank's own
  OneFOneBRun run;
  for (int64_t k = 0; k < steps; ++k) {
    opt.zero_grad();
    const auto& micro = batches[static_cast<size_t>(k)];
    std::map<int64_t, std::pair<torch::Tensor, torch::Tensor>> kept;  // micro-batch: (input, output or loss)
    double loss = 0;
    for (const kit::pp::Action& a : schedule) {
      const int64_t i = a.microbatch;
      const MicroBatch& mb = micro[static_cast<size_t>(i)];
      const std::vector<int64_t> act{mb.idx.size(0), mb.idx.size(1), C};
      if (a.op == kit::pp::Op::Forward) {
        const torch::Tensor input = rank == 0 ? mb.idx : p2p.recv_activation(rank - 1, i, act).requires_grad_(true);
        torch::Tensor out = stage->forward(input);
        if (rank == p - 1) {
          out = stage->loss(out, mb);
          loss += out.item<double>();
        } else {
          p2p.send_activation(out.detach(), rank + 1, i);
        }
        kept[i] = {input, out};
      } else {
        const auto [input, out] = kept.at(i);
        kept.erase(i);
        if (rank == p - 1)
          out.backward();
        else
          out.backward(p2p.recv_gradient(rank + 1, i, act));
        if (rank > 0) p2p.send_gradient(input.grad(), rank - 1, i);
      }
    }
    p2p.finish();
    kit::pp::sum_tied_gradients(chunks, shape, rank);
    if (k == 0) run.grads = grads_of(*stage);
    run.losses.push_back(loss);
    opt.step();
  }
  return run;
}

// 1F1B without recomputation on p stages, in this one process: what run_two_stage_1f1b(group,
// false) computes on each rank r of p, with given code only. Every rank has its own copy of the
// model, its own AdamW and its own dropout generator (the default generator's state swapped in
// around its actions); the activations and gradients go from rank to rank in memory, in the
// schedule's order; the tied wte's gradient is summed as sum_tied_gradients does (a + b on both).
std::vector<OneFOneBRun> one_process_1f1b(int64_t p) {
  const int64_t m = 4, rows = 8, steps = 3;
  struct Rank {
    std::vector<StageModule> chunks;
    std::unique_ptr<torch::optim::AdamW> opt;
    kit::pp::RankSchedule schedule;
    torch::Tensor rng;  // the rank's generator state between its actions
    size_t next = 0;
    std::map<int64_t, std::pair<torch::Tensor, torch::Tensor>> kept;  // micro-batch: (input, output or loss)
    double loss = 0;
  };
  std::vector<Rank> ranks(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) {
    Rank& k = ranks[static_cast<size_t>(r)];
    const kit::GPT2 full = rc_model(2);  // each rank builds its own
    k.chunks.push_back(rc_stage(full, r, p, false));
    k.opt = std::make_unique<torch::optim::AdamW>(k.chunks[0]->parameters(),
                                                  torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
    k.schedule = pp_test::ref_all_1f1b(p, m)[static_cast<size_t>(r)];
  }
  const std::vector<std::vector<MicroBatch>> batches = rc_batches(steps, rows, m);  // the same on every rank
  at::Generator gen = at::globalContext().defaultGenerator(torch::kCPU);
  const auto get_state = [&] {
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
  };
  const auto set_state = [&](const torch::Tensor& state) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  };
  for (int64_t r = 0; r < p; ++r) {
    torch::manual_seed(kRcSeed + 20 + static_cast<uint64_t>(r));  // dropout: this rank's own
    ranks[static_cast<size_t>(r)].rng = get_state();
  }
  std::vector<OneFOneBRun> runs(static_cast<size_t>(p));
  for (int64_t step = 0; step < steps; ++step) {
    const auto& micro = batches[static_cast<size_t>(step)];
    std::map<std::pair<int64_t, int64_t>, torch::Tensor> activations, gradients;  // (to rank, micro-batch)
    for (auto& k : ranks) {
      k.opt->zero_grad();
      k.next = 0;
      k.loss = 0;
      k.kept.clear();
    }
    // Each rank performs its next action as soon as its message is there, until none can.
    for (bool progress = true; progress;) {
      progress = false;
      for (int64_t r = 0; r < p; ++r) {
        Rank& k = ranks[static_cast<size_t>(r)];
        StageModule& stage = k.chunks[0];
        while (k.next < k.schedule.size()) {
          const kit::pp::Action& a = k.schedule[k.next];
          const int64_t i = a.microbatch;
          const MicroBatch& mb = micro[static_cast<size_t>(i)];
          if (a.op == kit::pp::Op::Forward) {
            if (r > 0 && !activations.count({r, i})) break;
            set_state(k.rng);
            torch::Tensor input = mb.idx;
            if (r > 0) {
              input = activations.at({r, i}).requires_grad_(true);
              activations.erase({r, i});
            }
            torch::Tensor out = stage->forward(input);
            if (r == p - 1) {
              out = stage->loss(out, mb);
              k.loss += out.item<double>();
            } else {
              activations[{r + 1, i}] = out.detach().clone();
            }
            k.kept[i] = {input, out};
            k.rng = get_state();
          } else {
            if (r < p - 1 && !gradients.count({r, i})) break;
            set_state(k.rng);
            const auto [input, out] = k.kept.at(i);
            k.kept.erase(i);
            if (r == p - 1) {
              out.backward();
            } else {
              out.backward(gradients.at({r, i}));
              gradients.erase({r, i});
            }
            if (r > 0) gradients[{r - 1, i}] = input.grad().clone();
            k.rng = get_state();
          }
          ++k.next;
          progress = true;
        }
      }
    }
    for (int64_t r = 0; r < p; ++r)
      if (ranks[static_cast<size_t>(r)].next != ranks[static_cast<size_t>(r)].schedule.size())
        throw kit::Error("one_process_1f1b: rank " + std::to_string(r) + " is stuck");
    {  // sum_tied_gradients: the first and the last stage's copies of wte both get a + b
      torch::NoGradGuard no_grad;
      torch::Tensor w0 = ranks.front().chunks[0]->tied_weight(), w1 = ranks.back().chunks[0]->tied_weight();
      for (torch::Tensor* w : {&w0, &w1})
        if (!w->grad().defined()) w->mutable_grad() = torch::zeros_like(*w);
      const torch::Tensor g0 = w0.grad().clone(), g1 = w1.grad().clone();
      w0.grad().add_(g1);
      w1.grad().add_(g0);
    }
    for (int64_t r = 0; r < p; ++r) {
      Rank& k = ranks[static_cast<size_t>(r)];
      OneFOneBRun& run = runs[static_cast<size_t>(r)];
      if (step == 0) run.grads = grads_of(*k.chunks[0]);
      run.losses.push_back(k.loss);
      k.opt->step();
    }
  }
  return runs;
}

// A rank with recomputation (student code): records its gradients after the first batch and
// its batch losses.
RANK_SUBJECT(recompute_1f1b) {
  const OneFOneBRun rec = run_two_stage_1f1b(group, true);
  out.put("grads", rec.grads);
  out.put("losses", rec.losses);
}

TEST(Recompute, OneFOneBTwoProcessesMatchWithoutRecompute) {
  const int n = 2;
  const kit_test::RankRun run = kit_test::subject_ranks(n, "recompute_1f1b", 60);
  if (!judge::judging()) return;
  if (!kit_test::expect_ranks_ok(run, n, "1F1B with recomputation against without (dropout 0.1)")) return;
  const std::vector<OneFOneBRun> plains = one_process_1f1b(n);
  for (int r = 0; r < n; ++r) {
    const OneFOneBRun& plain = plains[static_cast<size_t>(r)];
    const judge::Record& got_rank = run.records[static_cast<size_t>(r)];
    const OneFOneBRun rec{got_rank.get<std::vector<double>>("losses"),
                          got_rank.get<std::map<std::string, torch::Tensor>>("grads")};
    const std::string where = "rank " + std::to_string(r) + " of " + std::to_string(n);
    for (const auto& [name, want] : plain.grads) {
      ASSERT_TRUE(rec.grads.count(name)) << where << ": " << name << " got no gradient";
      const torch::Tensor& got = rec.grads.at(name);
      ASSERT_TRUE(want.defined() && got.defined()) << where << ": " << name << " got no gradient";
      ASSERT_EQ(got.sizes(), want.sizes()) << where << ": " << name;
      EXPECT_LE((got - want).abs().max().item<double>(), 1e-9 * std::max(1.0, want.abs().max().item<double>()))
          << where << ": the gradient of " << name << " after the first batch differs with recomputation by "
          << (got - want).abs().max().item<double>() << " (scale " << want.abs().max().item<double>()
          << "): the recomputed dropout masks must be the forward's, and after each recomputation the generator "
          << "must be back where it was (rank 0 runs two forwards before its first backward)";
    }
    if (r != n - 1) continue;
    ASSERT_EQ(rec.losses.size(), plain.losses.size());
    for (size_t k = 0; k < plain.losses.size(); ++k)
      EXPECT_NEAR(rec.losses[k], plain.losses[k], 1e-5 * std::abs(plain.losses[k]))
          << "batch " << k << ": the loss with recomputation differs from the one without";
  }
}

// train_parallel --pp 2 --recompute on processes against the same run without (ungraded:
// it runs the executor of Problem 3.2 too).
std::vector<double> program_losses(bool with_recompute) {
  const pp_run::RunSpec spec{2, "1f1b", 4, 1, 2};
  kit_test::TempDir dir(std::string("pp_recompute_") + (with_recompute ? "on" : "off"));
  auto args = pp_run::program_args(spec, dir.path());
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--dropout") args[i + 1] = std::to_string(kRcDropout);
  pp_run::write_schedule_file(dir / "schedule.json", pp_test::ref_all_1f1b(spec.ranks, spec.microbatches));
  args.insert(args.end(), {"--save-ranks", dir / "save", "--schedule-file", dir / "schedule.json"});
  if (with_recompute) args.push_back("--recompute");
  const auto r = pp_run::run_program(args, {}, dir / "run.log");
  EXPECT_EQ(r.exitcode, 0) << pp_run::describe(r);
  if (r.exitcode != 0) return {};
  auto last = kit_test::load_rank_file(dir / "save/rank1.pt");
  std::vector<double> losses;
  for (int64_t k = 0; k < pp_run::kSteps; ++k) {
    const std::string key = "loss/step" + std::to_string(k);
    EXPECT_TRUE(last.count(key)) << "the last stage's rank saved no " << key;
    if (last.count(key)) losses.push_back(last[key].item<double>());
  }
  return losses;
}

TEST(RecomputeRun, ProgramWithRecomputeMatchesWithout) {
  const std::vector<double> plain = program_losses(false);
  ASSERT_EQ(plain.size(), static_cast<size_t>(pp_run::kSteps));
  const std::vector<double> rec = program_losses(true);
  ASSERT_EQ(rec.size(), plain.size());
  for (size_t k = 0; k < plain.size(); ++k)
    EXPECT_NEAR(rec[k], plain[k], 1e-5 * std::abs(plain[k]))
        << "step " << k << ": train_parallel's loss with --recompute differs from the one without";
}

}  // namespace

// The one case a rank process runs (tests/rank_roles.h).
RANK_ROLE_MAIN
