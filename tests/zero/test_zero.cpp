// Problem 5.2: ZeRO stages 1 and 2 on n = 2, 3, 4 Gloo processes against one process running
// torch::optim::AdamW on the whole batch (weight decay and bias correction included): tiny
// GPT-2, 5 steps, each rank a 2-row share of the batch, in float64: parameters must agree
// within 1e-9 + 1e-9 |want|. (In float32 they cannot: some gradients are zero up to rounding,
// the key biases' for one, and Adam divides such noise by its own size, turning two different
// roundings into updates of opposite sign. In float64 the noise stays far below eps.) Also,
// in float32: the state and gradient bytes each rank holds, measured from its tensors, and the
// bytes it sends per step, and the tensor storage a step leaves alive (counted by the kit's
// counting allocator, so a view that keeps a whole buffer alive counts as the whole buffer);
// update_shard alone, with Adam's eps large enough to matter; saving and loading the state.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "collectives/ring.h"
#include "dist/dist.h"
#include "kit/memory.h"
#include "model/gpt2.h"
#include "rank_roles.h"
#include "train/loop.h"
#include "train/loss.h"
#include "zero/zero.h"
#include "zero_test_util.h"

namespace {
namespace zero = kit::zero;
namespace dist = kit::dist;
using rank_test::expect_all_ranks_pass;
using rank_test::expect_ranks_pass_for;
using rank_test::run_ranks;
// Declarations, not `using namespace`: in a unity batch a name another file declares would
// otherwise silently hide one of these instead of failing to compile.
using zero_test::kSteps;
using zero_test::options;
using zero_test::tiny_model;
using zero_test::parameter_count;
using zero_test::batch;
using zero_test::share;
using zero_test::loss_of;
using zero_test::reference_parameters;
using zero_test::expect_parameters_close;

// Rank r's ZeRO training step on its share (the optimizer averages the gradients).
void zero_step(kit::GPT2& model, zero::ZeroAdamW& opt, int64_t k, const dist::Group& group) {
  opt.zero_grad();
  loss_of(model, share(batch(k, group.size()), group.rank())).backward();
  opt.step();
}

// Stage `stage` for 5 steps equals torch's AdamW on the whole batch (float64).
void zero_matches_adamw(int stage, const dist::Group& group) {
  const int64_t n = group.size(), r = group.rank();
  const zero::ZeroOptions o = options(stage);
  kit::GPT2 model = tiny_model();
  zero::ZeroAdamW opt(model->parameters(), group, o);
  for (int64_t k = 0; k < kSteps; ++k) zero_step(model, opt, k, group);
  expect_parameters_close(model, reference_parameters(o, n, kSteps),
                          "after 5 ZeRO-" + std::to_string(stage) + " steps, rank " + std::to_string(r) + " of " +
                              std::to_string(n) + ", against torch::optim::AdamW on the whole batch");
  EXPECT_EQ(opt.steps_taken(), kSteps);
}

// One float32 step: the bytes this rank holds and sends, measured.
void zero_bytes(int stage, const dist::Group& group) {
  const int64_t n = group.size(), r = group.rank();
  kit::GPT2 model = tiny_model(torch::kFloat32);
  const int64_t P = parameter_count(model), S = (P + n - 1) / n;
  zero::ZeroAdamW opt(model->parameters(), group, options(stage));
  group.reset_counters();
  zero_step(model, opt, 0, group);
  // One reduce-scatter and one all-gather of the padded n*S buffer: a ring all-reduce's
  // 2(n-1)/n of it, 2(n-1) S floats (S = ceil(P/n)).
  const dist::Counters c = group.counters();
  EXPECT_EQ(c.send_bytes, 2 * (n - 1) * S * 4) << "bytes rank " << r << " sent in a step (P = " << P << ")";
  EXPECT_LE(c.send_bytes, 2.0 * (n - 1) / n * P * 4 + 2 * (n - 1) * 4) << "more than an all-reduce of P floats";
  EXPECT_EQ(opt.state_bytes(), S * 2 * 4) << "AdamW's two moments for this rank's shard only: ceil(P/n) * 2 * 4 "
                                             "bytes (P = " << P << ", n = " << n << ")";
  EXPECT_EQ(opt.gradient_bytes(), (stage == 1 ? P : S) * 4)
      << "gradient bytes kept after a step, stage " << stage << " (P = " << P << ", S = " << S << ")";
  if (n == 3) EXPECT_NE(P % n, 0) << "P = " << P << ": this case must keep a world size that does not divide P";
}

// The storage one float32 step leaves alive, counted by the allocator (kit/memory.h): the
// gradients kept (stage 1: the model's P; stage 2: this rank's S), nothing of the n*S flat
// gradient buffer. Element counts cannot see a view of that buffer kept as the "shard": the
// allocator sees its whole storage.
void zero_storage_kept(int stage, const dist::Group& group) {
  kit::memory::enable_cpu_counting();  // before the model: every buffer below is counted
  const int64_t n = group.size(), r = group.rank();
  kit::GPT2 model = tiny_model(torch::kFloat32);
  const int64_t P = parameter_count(model), S = (P + n - 1) / n;
  zero::ZeroAdamW opt(model->parameters(), group, options(stage));
  opt.zero_grad();
  loss_of(model, share(batch(0, n), r)).backward();  // anything made once, on a first pass, exists now
  opt.zero_grad();
  const int64_t before = kit::memory::cpu_bytes_now();
  zero_step(model, opt, 1, group);
  const int64_t kept = kit::memory::cpu_bytes_now() - before, want = (stage == 1 ? P : S) * 4;
  EXPECT_LE(kept, want + 4096) << "rank " << r << " of " << n << ", stage " << stage << ": a step left " << kept
                               << " bytes of tensor storage alive, the gradients it keeps are " << want
                               << " (P = " << P << ", S = " << S << "). " << (kept >= n * S * 4 ? "That is as large "
                               "as the whole flat gradient buffer: is it still referenced (kept, or a view of it kept as "
                               "the shard instead of a copy)?" : "");
}

RANK_ROLE(zero_stage1) {
  zero_matches_adamw(1, group);
  zero_bytes(1, group);
  zero_storage_kept(1, group);
}
RANK_ROLE(zero_stage2) {
  zero_matches_adamw(2, group);
  zero_bytes(2, group);
  zero_storage_kept(2, group);
}

// Inside data-parallel groups smaller than the world (as in the 3D grid): world 4, groups
// {0, 2} and {1, 3}, each training on its own as two ranks. Code that shards, reduces or
// divides over the world instead of the group it is given fails here.
RANK_ROLE(zero_subgroups) {
  const dist::Group even = dist::new_group({0, 2}, "zero_even");
  const dist::Group odd = dist::new_group({1, 3}, "zero_odd");
  const dist::Group& mine = even.is_member() ? even : odd;
  zero_matches_adamw(2, mine);
  zero_bytes(2, mine);
  zero_matches_adamw(1, mine);
}

// The parameters as one flat tensor, in order.
torch::Tensor flat(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : params) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

// update_shard on its own: torch's AdamW on the shard's elements (two steps, so the bias
// correction must advance), and not one element of the other shards touched. Run twice: with
// the default eps, and with eps = 0.5 and gradients of about 0.05, where AdamW's
// sqrt(v / (1 - beta2^t)) + eps differs from eps inside the root or before the correction.
void update_shard_matches_adamw(const dist::Group& group, double eps, double grad_scale) {
  const int64_t n = group.size(), r = group.rank();
  torch::manual_seed(3);
  std::vector<torch::Tensor> params = {torch::randn({5, 3}), torch::randn({7})};  // P = 22
  const int64_t P = 22;
  zero::ZeroOptions o = options(1);
  o.lr = 0.1;
  o.eps = eps;
  zero::ZeroAdamW opt(params, group, o);
  const kit::ring::Range sh = opt.shard();
  ASSERT_EQ(sh.begin, r * ((P + n - 1) / n));
  // torch's AdamW on a copy of the shard (its padding past P included: zeros).
  torch::Tensor before = flat(params);
  torch::Tensor x = torch::zeros({sh.size()});
  const int64_t visible = std::max<int64_t>(0, std::min(sh.end, P) - sh.begin);
  x.narrow(0, 0, visible).copy_(before.narrow(0, sh.begin, visible));
  x.set_requires_grad(true);
  torch::optim::AdamW ref({x}, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                                   o.weight_decay));
  for (int step = 1; step <= 2; ++step) {
    torch::manual_seed(50 + static_cast<uint64_t>(10 * r + step));
    const torch::Tensor g = torch::randn({sh.size()}) * grad_scale;
    x.mutable_grad() = g.clone();
    ref.step();
    opt.update_shard(g.clone());
    const torch::Tensor after = flat(params);
    EXPECT_TRUE(rank_test::close(after.narrow(0, sh.begin, visible), x.detach().narrow(0, 0, visible), 1e-6, 1e-6))
        << "rank " << r << "'s shard after update_shard call " << step << " (eps = " << eps
        << ") differs from torch::optim::AdamW's step " << step
        << (eps > 1e-3 ? ": AdamW adds eps after the bias-corrected root, sqrt(v) / sqrt(1 - beta2^t) + eps" : "");
    const torch::Tensor outside = torch::ones({P}, torch::kBool);
    outside.narrow(0, std::min(sh.begin, P), visible).fill_(false);
    EXPECT_TRUE(torch::equal(after.masked_select(outside), before.masked_select(outside)))
        << "update_shard call " << step << " on rank " << r << " changed elements outside its shard ["
        << sh.begin << ", " << sh.end << "): weight decay or the update applied to the whole buffer?";
    EXPECT_EQ(opt.steps_taken(), step);
  }
}
RANK_ROLE(zero_update_shard) {
  update_shard_matches_adamw(group, options(1).eps, 1.0);
  update_shard_matches_adamw(group, 0.5, 0.05);
}

// Save after 2 steps, load into a new model + optimizer, 3 more steps: identical to 5 steps
// straight. Then the files loaded by a group of 2 ranks: a clear error.
RANK_ROLE(zero_save_load) {
  const std::string dir = std::getenv("KIT_TEST_DIR");
  const int64_t r = group.rank();
  const std::string file = dir + "/zero_rank" + std::to_string(r) + ".pt";
  const zero::ZeroOptions o = options(2);

  kit::GPT2 a = tiny_model();
  zero::ZeroAdamW opt_a(a->parameters(), group, o);
  std::vector<torch::Tensor> at2;
  for (int64_t k = 0; k < kSteps; ++k) {
    if (k == 2) {
      opt_a.save(file);
      for (const auto& p : a->parameters()) at2.push_back(p.detach().clone());
    }
    zero_step(a, opt_a, k, group);
  }

  kit::GPT2 b = tiny_model();
  {
    torch::NoGradGuard no_grad;
    auto ps = b->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].copy_(at2[i]);
  }
  zero::ZeroAdamW opt_b(b->parameters(), group, o);
  opt_b.load(file);
  EXPECT_EQ(opt_b.steps_taken(), 2);
  for (int64_t k = 2; k < kSteps; ++k) zero_step(b, opt_b, k, group);
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i << " after save at step 2, load, 3 more steps";

  dist::barrier(group);  // every file written
  const dist::Group pair = dist::new_group({0, 1}, "zero_pair");
  if (pair.is_member()) {
    kit::GPT2 c = tiny_model();
    zero::ZeroAdamW opt_c(c->parameters(), pair, o);
    rank_test::expect_error_naming([&] { opt_c.load(file); }, {"3 ranks", "resume with 3"},
                                   "loading a 3-rank ZeRO state on 2 ranks");
  }
}

}  // namespace

TEST(Zero, ShardOfCoversEveryElementExactlyOnce) {
  for (const int64_t numel : {1, 7, 22, 1000, 124439})
    for (const int64_t n : {1, 2, 3, 4, 5, 8}) {
      const int64_t S = (numel + n - 1) / n;
      std::vector<int> owners(static_cast<size_t>(S * n), 0);
      for (int64_t r = 0; r < n; ++r) {
        const kit::ring::Range s = zero::shard_of(numel, r, n);
        EXPECT_EQ(s.size(), S) << "rank " << r << " of " << n << ", " << numel << " elements: every shard has "
                               << "ceil(P/n) elements (the last ones reach into the padding)";
        for (int64_t i = std::max<int64_t>(0, s.begin); i < std::min(s.end, S * n); ++i) ++owners[static_cast<size_t>(i)];
      }
      for (int64_t i = 0; i < numel; ++i)
        if (owners[static_cast<size_t>(i)] != 1) {
          ADD_FAILURE() << "element " << i << " of " << numel << " belongs to " << owners[static_cast<size_t>(i)]
                        << " shards on " << n << " ranks, not 1";
          break;
        }
    }
}

TEST(Zero, UpdateShardIsAdamWOnItsShardAlone) {
  const auto run = run_ranks(3, "zero_update_shard", 60);
  expect_all_ranks_pass(run, 3, "update_shard");
}

TEST(Zero, Stage1MatchesAdamWOnTheWholeBatch) {
  expect_ranks_pass_for({2, 3, 4}, "zero_stage1", "ZeRO stage 1", 90);
}

TEST(Zero, Stage2MatchesAdamWAndKeepsOnlyItsGradientShard) {
  expect_ranks_pass_for({2, 3, 4}, "zero_stage2", "ZeRO stage 2", 90);
}

TEST(Zero, BothStagesMatchAdamWInsideGroupsSmallerThanTheWorld) {
  expect_all_ranks_pass(run_ranks(4, "zero_subgroups", 120), 4, "ZeRO on groups {0, 2} and {1, 3} of 4 ranks");
}

TEST(Zero, SavedStateContinuesTrainingIdentically) {
  dp_test::TempDir dir("zero_save_load");
  expect_all_ranks_pass(run_ranks(3, "zero_save_load", 90, {{"KIT_TEST_DIR", dir.path()}}), 3,
                        "ZeRO save and load");
}

TEST(Zero, StageThreeIsAClearError) {
  // Given code: the constructor refuses what it does not build, before any communication.
  std::vector<torch::Tensor> params = {torch::zeros({3})};
  zero::ZeroOptions o;
  o.stage = 3;
  rank_test::expect_error_naming([&] { zero::ZeroAdamW(params, dist::Group(), o); }, {"stage 3", "use 1"},
                                 "ZeRO stage 3");
}
