// Problem 4.3: shard_qkv, ParallelAttention, ParallelMLP and ParallelBlock on t = 1, 2, 4
// ranks against the CausalSelfAttention, MLP and Block (model/gpt2.h) every rank builds from
// the same seed: output, input gradient, and each parameter's gradient equal to this rank's
// share of the full layer's (tp_test::expected_share). A block communicates exactly twice
// forward and twice backward, each time B*T*C values (counted on the group).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/gpt2.h"
#include "tensor_parallel/blocks.h"
#include "tp_test_util.h"

namespace {
namespace tp = kit::tp;
using tp_test::close;

constexpr int64_t kB = 2, kT = 6;

// Runs the single-device layer and the parallel one on the same input and upstream
// gradient, and compares output, input gradient and every parameter gradient.
template <typename Full, typename Par>
void expect_parallel_equals_full(Full full, Par par, const kit::dist::Group& group, const char* what) {
  par->load_full(*full);
  const int64_t C = tp_test::tiny_config().n_embd;
  torch::manual_seed(7);
  const torch::Tensor x0 = torch::randn({kB, kT, C}), G = torch::randn({kB, kT, C});
  auto xf = x0.clone().requires_grad_(true);
  auto want = full(xf);
  (want * G).sum().backward();

  auto x = x0.clone().requires_grad_(true);
  auto y = par(x);
  EXPECT_TRUE(close(y, want)) << what << " output, rank " << group.rank() << " of " << group.size();
  (y * G).sum().backward();
  EXPECT_TRUE(close(x.grad(), xf.grad())) << what << " input gradient, rank " << group.rank();
  tp_test::expect_grads_are_shares(*par, *full, group);
}

TEST(TPBlock, ShardQkvTakesEachRanksHeadsRowsOfQKAndV) {
  const int64_t C = 8;
  const auto weight = torch::arange(3 * C * 5, torch::kFloat32).view({3 * C, 5});
  const auto bias = torch::arange(3 * C, torch::kFloat32);
  for (int64_t t : {1, 2, 4})
    for (int64_t r = 0; r < t; ++r) {
      EXPECT_TRUE(close(tp::shard_qkv(weight, r, t), tp_test::qkv_rows(weight, r, t), 0, 0))
          << "c_attn weight, rank " << r << " of " << t << ": q's rows of its heads, then k's, then v's";
      EXPECT_TRUE(close(tp::shard_qkv(bias, r, t), tp_test::qkv_rows(bias, r, t), 0, 0))
          << "c_attn bias, rank " << r << " of " << t;
    }
}

TP_ROLE(parallel_attention) {
  torch::manual_seed(3);
  expect_parallel_equals_full(kit::CausalSelfAttention(tp_test::tiny_config()),
                              tp::ParallelAttention(tp_test::tiny_config(), group), group, "attention");
}

TP_ROLE(parallel_mlp) {
  torch::manual_seed(3);
  expect_parallel_equals_full(kit::MLP(tp_test::tiny_config()), tp::ParallelMLP(tp_test::tiny_config(), group),
                              group, "MLP");
}

TP_ROLE(parallel_block) {
  torch::manual_seed(3);
  const auto cfg = tp_test::tiny_config();
  kit::Block full(cfg);
  tp::ParallelBlock par(cfg, group);
  expect_parallel_equals_full(full, par, group, "block");

  // Megatron's count: g after attention and after the MLP forward, f before each backward.
  par->zero_grad();
  torch::manual_seed(8);
  auto x = torch::randn({kB, kT, cfg.n_embd}, torch::requires_grad());
  group.reset_counters();
  auto y = par(x);
  const auto fwd = group.counters();
  y.backward(torch::randn_like(y));
  const auto all = group.counters();
  const int64_t activation_bytes = kB * kT * cfg.n_embd * 4;
  EXPECT_EQ(fwd.all_reduce_calls, 2) << "a block's forward all-reduces exactly twice (attention's and the MLP's g)";
  EXPECT_EQ(all.all_reduce_calls - fwd.all_reduce_calls, 2)
      << "a block's backward all-reduces exactly twice (attention's and the MLP's f)";
  EXPECT_EQ(all.all_reduce_bytes, 4 * activation_bytes) << "each all-reduce carries B*T*C float32 values";
  EXPECT_EQ(all.all_gather_calls, 0) << "a block never gathers";
}

// Tensor groups smaller than the world (as in the 3D grid): world 4, groups {0, 2} and {1, 3}.
TP_ROLE(parallel_block_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  torch::manual_seed(3);
  const auto cfg = tp_test::tiny_config();
  expect_parallel_equals_full(kit::Block(cfg), tp::ParallelBlock(cfg, mine), mine, "block on a tensor group");
}

// Dropout on (p = 0.5): in eval mode the parallel layer still equals the full one (a dropout
// that ignores the mode fails); in training, attention's dropout acts on the probabilities
// (the output changes) and the residual dropout after the all-reduce (about half the output
// exactly zero: a dropout before the sum zeroes only where every rank dropped). The masks
// themselves are each rank's own draw, so only these properties can be compared.
double zero_fraction(const torch::Tensor& y) { return (y == 0).to(torch::kFloat64).mean().item<double>(); }

kit::GPT2Config dropout_config() {
  auto cfg = tp_test::tiny_config();
  cfg.dropout = 0.5;
  return cfg;
}

// Builds the full layer and the parallel one with dropout 0.5 (seed 3), checks the parallel
// one against the full one in eval mode, then puts it in training mode and runs
// training_checks(par, x) without gradients, on input x (seed 8).
template <typename Full, typename Par, typename Checks>
void in_training_with_dropout(const kit::dist::Group& group, const char* what, Checks training_checks) {
  torch::manual_seed(3);
  Full full(dropout_config());
  Par par(dropout_config(), group);
  par->load_full(*full);
  full->eval();
  par->eval();
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({kB, kT, tp_test::tiny_config().n_embd});
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(close(par(x), full(x))) << what << " in eval mode with dropout 0.5 differs from the full layer, rank "
                                        << group.rank() << " of " << group.size() << " (where the cases without "
                                        << "dropout pass, a dropout acts in eval mode: it must act in training only)";
  }
  par->train();
  torch::manual_seed(8);
  const torch::Tensor training_x = torch::randn({kB, kT, tp_test::tiny_config().n_embd});
  torch::NoGradGuard no_grad;
  training_checks(par, training_x);
}

void expect_output_dropout(double frac, const kit::dist::Group& group, const char* what) {
  EXPECT_TRUE(frac > 0.4 && frac < 0.6)
      << what << " in training with its output dropout at p = 0.5, rank " << group.rank() << " of " << group.size()
      << ": " << frac << " of the output is exactly 0, not about half (no dropout there, or one before the "
      << "all-reduce, where a value is 0 only if every rank dropped it)";
}

void attention_with_dropout(const kit::dist::Group& group) {
  in_training_with_dropout<kit::CausalSelfAttention, tp::ParallelAttention>(
      group, "attention", [&](tp::ParallelAttention& par, const torch::Tensor& x) {
        par->resid_dropout->options.p(0.0);  // attention's dropout alone
        const torch::Tensor eval_y = [&] { par->eval(); auto y = par(x); par->train(); return y; }();
        EXPECT_FALSE(close(par(x), eval_y))
            << "attention in training with attn_dropout at p = 0.5 gave its eval output, "
               "rank " << group.rank() << ": the attention probabilities were not dropped";
        par->attn_dropout->options.p(0.0);  // the residual dropout alone
        par->resid_dropout->options.p(0.5);
        expect_output_dropout(zero_fraction(par(x)), group, "attention");
      });
}

void mlp_with_dropout(const kit::dist::Group& group) {
  in_training_with_dropout<kit::MLP, tp::ParallelMLP>(group, "MLP", [&](tp::ParallelMLP& par, const torch::Tensor& x) {
    expect_output_dropout(zero_fraction(par(x)), group, "MLP");
  });
}

TP_ROLE(dropout_layers) {
  attention_with_dropout(group);
  mlp_with_dropout(group);
}

TEST(TPBlock, ParallelAttentionEqualsCausalSelfAttention) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "parallel_attention", "attention");
}

TEST(TPBlock, ParallelMLPEqualsMLP) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "parallel_mlp", "MLP");
}

TEST(TPBlock, ParallelBlockEqualsBlockWithTwoAllReducesForwardAndTwoBackward) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "parallel_block", "block");
}

TEST(TPBlock, DropoutActsInTrainingOnlyAndAfterTheAllReduce) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "dropout_layers", "attention and MLP with dropout");
}

TEST(TPBlock, ParallelBlockOnTensorGroupsSmallerThanTheWorld) {
  tp_test::expect_all_ranks_pass(tp_test::run_ranks(4, "parallel_block_subgroups"), 4,
                                 "block on tensor groups {0, 2} and {1, 3}");
}

}  // namespace
