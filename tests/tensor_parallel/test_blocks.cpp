// Problem 4.3: shard_qkv, ParallelAttention, ParallelMLP and ParallelBlock on t = 1, 2, 4
// ranks against the CausalSelfAttention, MLP and Block (model/gpt2.h) built from the same
// seed: output, input gradient, and each parameter's gradient equal to this rank's share of
// the full layer's (tp_test::expected_share). A block communicates exactly twice forward and
// twice backward, each time B*T*C values (counted on the group). Each rank loads the full
// layer's weights into its parallel layer and records what it gave and counted; the judge runs
// the full layer itself and compares.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/gpt2.h"
#include "tensor_parallel/blocks.h"
#include "tp_test_util.h"

namespace {
namespace tp = kit::tp;
namespace judge = kit::judge;
using tp_test::close;

constexpr int64_t kB = 2, kT = 6;

// The input and upstream gradient of the cases without dropout (seed 7).
std::pair<torch::Tensor, torch::Tensor> input_and_upstream() {
  const int64_t C = tp_test::tiny_config().n_embd;
  torch::manual_seed(7);
  torch::Tensor x0 = torch::randn({kB, kT, C});
  torch::Tensor G = torch::randn({kB, kT, C});
  return {x0, G};
}

// Subject: the parallel layer, loaded with the full one's weights, on the same input and
// upstream gradient: its output, input gradient and every parameter's gradient.
template <typename Full, typename Par>
void run_parallel(Full full, Par par, judge::Record& out) {
  par->load_full(*full);
  const auto [x0, G] = input_and_upstream();
  auto x = x0.clone().requires_grad_(true);
  auto y = par(x);
  out.put("y", y);
  (y * G).sum().backward();
  out.put("x_grad", x.grad());
  out.put("grads", tp_test::named_grads(*par));
}

// Judge: the full layer (seed 3, built as the rank built it) on the same input and upstream
// gradient, and rank r of t's record of run_parallel: output, input gradient, every
// parameter gradient.
template <typename Full>
void expect_parallel_equals_full(const judge::Record& got, int64_t r, int64_t t, const char* what) {
  torch::manual_seed(3);
  Full full(tp_test::tiny_config());
  const auto [x0, G] = input_and_upstream();
  auto xf = x0.clone().requires_grad_(true);
  auto want = full(xf);
  (want * G).sum().backward();
  EXPECT_TRUE(close(got.get<torch::Tensor>("y"), want)) << what << " output, rank " << r << " of " << t;
  EXPECT_TRUE(close(got.get<torch::Tensor>("x_grad"), xf.grad())) << what << " input gradient, rank " << r;
  tp_test::expect_grads_are_shares(got.get<tp_test::NamedTensors>("grads"), *full, r, t);
}

TEST(TPBlock, ShardQkvTakesEachRanksHeadsRowsOfQKAndV) {
  const int64_t C = 8;
  const auto weight = torch::arange(3 * C * 5, torch::kFloat32).view({3 * C, 5});
  const auto bias = torch::arange(3 * C, torch::kFloat32);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (int64_t t : {1, 2, 4})
      for (int64_t r = 0; r < t; ++r) {
        const std::string at = std::to_string(r) + "/" + std::to_string(t);
        out.put("weight " + at, tp::shard_qkv(weight, r, t));
        out.put("bias " + at, tp::shard_qkv(bias, r, t));
      }
  });
  JUDGE {
    for (int64_t t : {1, 2, 4})
      for (int64_t r = 0; r < t; ++r) {
        const std::string at = std::to_string(r) + "/" + std::to_string(t);
        EXPECT_TRUE(close(got.get<torch::Tensor>("weight " + at), tp_test::qkv_rows(weight, r, t), 0, 0))
            << "c_attn weight, rank " << r << " of " << t << ": q's rows of its heads, then k's, then v's";
        EXPECT_TRUE(close(got.get<torch::Tensor>("bias " + at), tp_test::qkv_rows(bias, r, t), 0, 0))
            << "c_attn bias, rank " << r << " of " << t;
      }
  }
}

// The full layer first, then the parallel one, from seed 3 (the judge builds the full one alone
// from the same seed: the parallel layer's own initialisation comes after it).
TP_SUBJECT(parallel_attention) {
  torch::manual_seed(3);
  kit::CausalSelfAttention full(tp_test::tiny_config());
  run_parallel(full, tp::ParallelAttention(tp_test::tiny_config(), group), out);
}

TP_SUBJECT(parallel_mlp) {
  torch::manual_seed(3);
  kit::MLP full(tp_test::tiny_config());
  run_parallel(full, tp::ParallelMLP(tp_test::tiny_config(), group), out);
}

// The block, then Megatron's count: g after attention and after the MLP forward, f before
// each backward (the counters after the forward and after the backward).
void parallel_block(const kit::dist::Group& group, judge::Record& out, bool count) {
  torch::manual_seed(3);
  const auto cfg = tp_test::tiny_config();
  kit::Block full(cfg);
  tp::ParallelBlock par(cfg, group);
  run_parallel(full, par, out);
  if (!count) return;
  par->zero_grad();
  torch::manual_seed(8);
  auto x = torch::randn({kB, kT, cfg.n_embd}, torch::requires_grad());
  group.reset_counters();
  auto y = par(x);
  const auto fwd = group.counters();
  y.backward(torch::randn_like(y));
  const auto all = group.counters();
  out.put("forward_all_reduce_calls", fwd.all_reduce_calls);
  out.put("all_reduce_calls", all.all_reduce_calls);
  out.put("all_reduce_bytes", all.all_reduce_bytes);
  out.put("all_gather_calls", all.all_gather_calls);
}

TP_SUBJECT(parallel_block) { parallel_block(group, out, /*count=*/true); }

// Tensor groups smaller than the world (as in the 3D grid): world 4, groups {0, 2} and {1, 3}.
TP_SUBJECT(parallel_block_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  tp_test::record_group(mine, out);
  parallel_block(mine, out, /*count=*/false);
}

// Dropout on (p = 0.5): in eval mode the parallel layer still equals the full one (a dropout
// that ignores the mode fails); in training, attention's dropout acts on the probabilities
// (the output changes) and the output dropout after the all-reduce, one mask for every rank
// (a dropout before the sum zeroes only where every rank dropped). Every mask is drawn from a
// known generator state, so the judge draws them too and compares both training outputs
// exactly: attention's probabilities with each rank's own mask (attention_with_rank_dropout),
// the output with the shared generator's (expect_output_dropout).
double zero_fraction(const torch::Tensor& y) { return (y == 0).to(torch::kFloat64).mean().item<double>(); }

kit::GPT2Config dropout_config() {
  auto cfg = tp_test::tiny_config();
  cfg.dropout = 0.5;
  return cfg;
}

// The eval-mode input (seed 7) and the training input (seed 8).
torch::Tensor eval_input() {
  torch::manual_seed(7);
  return torch::randn({kB, kT, tp_test::tiny_config().n_embd});
}
torch::Tensor training_input() {
  torch::manual_seed(8);
  return torch::randn({kB, kT, tp_test::tiny_config().n_embd});
}

// What ParallelAttention in training must give with attn_dropout at p = 0.5 (and no residual
// dropout) on t ranks, computed whole: the full layer's attention probabilities, rank q's heads
// (q*H/t .. (q+1)*H/t) dropped as rank q's RegionDropout drops them (dropout_per_rank from the
// generator state torch::manual_seed(kAttnDropoutSeed) leaves, as each rank's call starts from),
// then the values and the output projection.
constexpr uint64_t kAttnDropoutSeed = 19;
torch::Tensor attention_with_rank_dropout(kit::CausalSelfAttentionImpl& full, const torch::Tensor& x, int64_t t) {
  torch::NoGradGuard no_grad;
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = full.n_head(), hs = C / H;
  auto qkv = full.c_attn(x).split(C, 2);
  auto heads = [&](const torch::Tensor& u) { return u.view({B, T, H, hs}).transpose(1, 2); };
  auto att = torch::matmul(heads(qkv[0]), heads(qkv[1]).transpose(-2, -1)) / std::sqrt(static_cast<double>(hs));
  att = att.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -std::numeric_limits<float>::infinity());
  const torch::Tensor probs = torch::softmax(att, -1);
  std::vector<torch::Tensor> dropped;
  for (int64_t q = 0; q < t; ++q) {
    torch::manual_seed(kAttnDropoutSeed);
    dropped.push_back(tp::dropout_per_rank(probs.narrow(1, q * H / t, H / t).contiguous(), 0.5, true, q));
  }
  const auto y = torch::matmul(torch::cat(dropped, 1), heads(qkv[2])).transpose(1, 2).contiguous().view({B, T, C});
  return full.c_proj(y);
}

// Subject: builds the full layer and the parallel one with dropout 0.5 (seed 3), records the
// parallel one's output in eval mode (pre + "eval_y"), then puts it in training mode and runs
// training(par, x) without gradients, on the training input.
template <typename Full, typename Par, typename Training>
void in_training_with_dropout(const kit::dist::Group& group, judge::Record& out, const std::string& pre,
                              Training training) {
  torch::manual_seed(3);
  Full full(dropout_config());
  Par par(dropout_config(), group);
  par->load_full(*full);
  par->eval();
  const torch::Tensor x = eval_input();
  {
    torch::NoGradGuard no_grad;
    out.put(pre + "eval_y", par(x));
  }
  par->train();
  const torch::Tensor x_training = training_input();
  torch::NoGradGuard no_grad;
  training(par, x_training);
}

// Judge: the full layer (seed 3) in eval mode against the recorded eval output.
template <typename Full>
void expect_eval_equals_full(const judge::Record& got, int64_t r, int64_t t, const std::string& pre,
                             const char* what) {
  torch::manual_seed(3);
  Full full(dropout_config());
  full->eval();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "eval_y"), full(eval_input())))
      << what << " in eval mode with dropout 0.5 differs from the full layer, rank " << r << " of " << t
      << " (where the cases without dropout pass, a dropout acts in eval mode: it must act in training only)";
}

// The output dropout acts on the all-reduced output, which every rank holds whole, with the
// one mask the shared generator draws (torch::manual_seed(kOutputDropoutSeed) just before the
// call): every rank's output is the full layer's (seed 3, no dropout) through that mask.
constexpr uint64_t kOutputDropoutSeed = 23;
template <typename Full>
void expect_output_dropout(const judge::Record& got, const std::string& key, int64_t r, int64_t t, const char* what) {
  torch::manual_seed(3);
  Full full(dropout_config());
  full->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor plain = full(training_input());
  torch::manual_seed(kOutputDropoutSeed);
  const torch::Tensor want = torch::dropout(plain, 0.5, true);
  const torch::Tensor y = got.get<torch::Tensor>(key);
  if (!got.ok()) return;
  EXPECT_TRUE(close(y, want)) << what << " in training with its output dropout at p = 0.5, rank " << r << " of " << t
                              << ": not the full layer's output through the shared generator's mask (" << zero_fraction(y)
                              << " of it is exactly 0). The output dropout comes after the all-reduce, on the whole "
                              << "output every rank holds, with the same mask on every rank (a dropout before the "
                              << "all-reduce leaves a value 0 only where every rank dropped it; a mask per rank makes "
                              << "the ranks disagree on an activation they all hold)";
}

TP_SUBJECT(dropout_layers) {
  in_training_with_dropout<kit::CausalSelfAttention, tp::ParallelAttention>(
      group, out, "attention.", [&](tp::ParallelAttention& par, const torch::Tensor& x) {
        par->resid_dropout->options.p(0.0);  // attention's dropout alone
        const torch::Tensor eval_y = [&] { par->eval(); auto y = par(x); par->train(); return y; }();
        out.put("attention.training_eval_y", eval_y);
        torch::manual_seed(kAttnDropoutSeed);  // the state the judge's expected masks start from
        out.put("attention.attn_dropout_y", par(x));
        par->attn_dropout->options.p(0.0);  // the residual dropout alone
        par->resid_dropout->options.p(0.5);
        torch::manual_seed(kOutputDropoutSeed);
        out.put("attention.resid_dropout_y", par(x));
      });
  in_training_with_dropout<kit::MLP, tp::ParallelMLP>(group, out, "mlp.",
                                                      [&](tp::ParallelMLP& par, const torch::Tensor& x) {
                                                        torch::manual_seed(kOutputDropoutSeed);
                                                        out.put("mlp.dropout_y", par(x));
                                                      });
}

TEST(TPBlock, ParallelAttentionEqualsCausalSelfAttention) {
  tp_test::for_ranks({1, 2, 4}, "parallel_attention", "attention", [](const judge::Record& got, int r, int n) {
    expect_parallel_equals_full<kit::CausalSelfAttention>(got, r, n, "attention");
  });
}

TEST(TPBlock, ParallelMLPEqualsMLP) {
  tp_test::for_ranks({1, 2, 4}, "parallel_mlp", "MLP", [](const judge::Record& got, int r, int n) {
    expect_parallel_equals_full<kit::MLP>(got, r, n, "MLP");
  });
}

TEST(TPBlock, ParallelBlockEqualsBlockWithTwoAllReducesForwardAndTwoBackward) {
  tp_test::for_ranks({1, 2, 4}, "parallel_block", "block", [](const judge::Record& got, int r, int n) {
    expect_parallel_equals_full<kit::Block>(got, r, n, "block");
    const int64_t activation_bytes = kB * kT * tp_test::tiny_config().n_embd * 4;
    const auto fwd_calls = got.get<int64_t>("forward_all_reduce_calls");
    EXPECT_EQ(fwd_calls, 2) << "a block's forward all-reduces exactly twice (attention's and the MLP's g)";
    EXPECT_EQ(got.get<int64_t>("all_reduce_calls") - fwd_calls, 2)
        << "a block's backward all-reduces exactly twice (attention's and the MLP's f)";
    EXPECT_EQ(got.get<int64_t>("all_reduce_bytes"), 4 * activation_bytes)
        << "each all-reduce carries B*T*C float32 values";
    EXPECT_EQ(got.get<int64_t>("all_gather_calls"), 0) << "a block never gathers";
  });
}

TEST(TPBlock, DropoutActsInTrainingOnlyAndAfterTheAllReduce) {
  tp_test::for_ranks({1, 2, 4}, "dropout_layers", "attention and MLP with dropout",
                     [](const judge::Record& got, int r, int n) {
                       expect_eval_equals_full<kit::CausalSelfAttention>(got, r, n, "attention.", "attention");
                       EXPECT_FALSE(close(got.get<torch::Tensor>("attention.attn_dropout_y"),
                                          got.get<torch::Tensor>("attention.training_eval_y")))
                           << "attention in training with attn_dropout at p = 0.5 gave its eval output, "
                              "rank "
                           << r << ": the attention probabilities were not dropped";
                       torch::manual_seed(3);
                       kit::CausalSelfAttention full(dropout_config());
                       EXPECT_TRUE(close(got.get<torch::Tensor>("attention.attn_dropout_y"),
                                         attention_with_rank_dropout(*full, training_input(), n)))
                           << "attention in training with attn_dropout at p = 0.5, rank " << r << " of " << n
                           << ": not the full attention with each rank's heads dropped by its own RegionDropout. "
                              "attn_dropout acts on this rank's attention probabilities (after the softmax, "
                              "before the values), through the layer's RegionDropout (each rank its own mask; "
                              "torch::dropout would drop every rank's heads alike)";
                       expect_output_dropout<kit::CausalSelfAttention>(got, "attention.resid_dropout_y", r, n,
                                                                       "attention");
                       expect_eval_equals_full<kit::MLP>(got, r, n, "mlp.", "MLP");
                       expect_output_dropout<kit::MLP>(got, "mlp.dropout_y", r, n, "MLP");
                     });
}

// Given code (ungraded): attention's dropout inside the tensor-parallel region. Each rank
// records two masks of RegionDropout(0.5) on ones, a draw of the shared generator after them,
// the first mask again after torch::manual_seed, and its eval output.
TP_SUBJECT(region_dropout) {
  torch::manual_seed(11);
  tp::RegionDropout drop(0.5, group);
  drop->train();
  const torch::Tensor ones = torch::ones({4096});
  out.put("first", drop(ones));
  out.put("second", drop(ones));
  out.put("shared_after", torch::rand({8}));
  torch::manual_seed(11);
  out.put("again", drop(ones));
  drop->eval();
  out.put("eval", drop(ones));
}

TEST(TPRegionDropout, EachRankDrawsItsOwnMaskWhileTheSharedGeneratorStaysInStep) {
  for (const int n : {1, 2, 4}) {
    const kit_test::RankRun run = kit_test::subject_ranks(n, "region_dropout");
    if (!judge::judging()) continue;
    if (!kit_test::expect_ranks_ok(run, n, "RegionDropout on " + std::to_string(n) + " ranks")) return;
    const auto& rec = run.records;
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(n));
      const judge::Record& got = rec[static_cast<size_t>(r)];
      const torch::Tensor first = got.get<torch::Tensor>("first");
      const double dropped = (first == 0).to(torch::kFloat64).mean().item<double>();
      EXPECT_TRUE(dropped > 0.45 && dropped < 0.55) << dropped << " of the elements dropped at p = 0.5";
      EXPECT_TRUE(torch::equal(first.masked_select(first != 0), torch::full({(first != 0).sum().item<int64_t>()}, 2.0)))
          << "the kept elements are scaled by 1 / (1 - p)";
      EXPECT_TRUE(torch::equal(got.get<torch::Tensor>("again"), first))
          << "torch::manual_seed with the same seed must give the same mask again";
      EXPECT_FALSE(torch::equal(got.get<torch::Tensor>("second"), first)) << "two calls drew the same mask";
      EXPECT_TRUE(torch::equal(got.get<torch::Tensor>("eval"), torch::ones({4096}))) << "eval mode drops nothing";
      EXPECT_TRUE(torch::equal(got.get<torch::Tensor>("shared_after"), rec[0].get<torch::Tensor>("shared_after")))
          << "the generator every rank shares drew differently here than on rank 0: a dropout outside the "
             "region would then drop other elements of activations every rank holds";
      for (int q = 0; q < r; ++q)
        EXPECT_FALSE(torch::equal(first, rec[static_cast<size_t>(q)].get<torch::Tensor>("first")))
            << "rank " << q << " drew the same mask: the ranks' heads would drop alike";
    }
  }
}

TEST(TPBlock, ParallelBlockOnTensorGroupsSmallerThanTheWorld) {
  tp_test::for_ranks({4}, "parallel_block_subgroups", "block on tensor groups {0, 2} and {1, 3}",
                     [](const judge::Record& got, int w, int) {
                       if (!tp_test::expect_strided_pair_group(got, w)) return;
                       expect_parallel_equals_full<kit::Block>(got, w / 2, 2, "block on a tensor group");
                     });
}

}  // namespace
