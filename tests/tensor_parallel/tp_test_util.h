// Helpers for the tensor-parallel tests: t ranks as processes running registered roles
// (tests/rank_roles.h: TP_ROLE is RANK_ROLE), each comparing its rank's results with the
// single-device layer it builds itself (every rank can afford the whole tiny layer).
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "dist/dist.h"
#include "kit/config.h"
#include "kit/errors.h"
#include "rank_roles.h"

#define TP_ROLE(name) RANK_ROLE(name)

namespace tp_test {
namespace dist = kit::dist;
using rank_test::close;
using rank_test::excess;
using rank_test::expect_all_ranks_pass;
using rank_test::expect_error_naming;
using rank_test::expect_ranks_pass_for;
using rank_test::RankRun;
using rank_test::run_ranks;

// The tiny GPT-2 configuration of these tests: 4 heads (the preset's 2 cannot be split 4 ways),
// n_embd 32, no dropout (every rank and the single-device layer must compute the same thing).
inline kit::GPT2Config tiny_config(int64_t vocab = 64) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = 0;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.vocab_size = vocab;
  return cfg;
}

// This rank's tensor group when a world of 4 is split into {0, 2} and {1, 3}, t = 2 each (as
// the 3D grid's tensor groups are when d = 2). Every rank of the world calls it, in the same
// order. Code that communicates on the world instead of the group it is given sums the two
// groups' identical shares there, and fails.
inline dist::Group strided_pair_group() {
  const dist::Group even = dist::new_group({0, 2}, "tp_even");
  const dist::Group odd = dist::new_group({1, 3}, "tp_odd");
  return even.is_member() ? even : odd;
}

// Rank r's rows of a fused q|k|v tensor (3C rows), written out independently of shard_qkv:
// the rows of q, k and v that rank r's heads own.
inline torch::Tensor qkv_rows(const torch::Tensor& full, int64_t r, int64_t t) {
  const int64_t C = full.size(0) / 3, part = C / t;
  return torch::cat({full.narrow(0, r * part, part), full.narrow(0, C + r * part, part),
                     full.narrow(0, 2 * C + r * part, part)});
}

// Rank r's share of a full layer's tensor `name` (a parameter or its gradient), by the
// Megatron split: c_attn q|k|v rows, c_fc rows, c_proj weight columns, the rest whole.
inline torch::Tensor expected_share(const std::string& name, const torch::Tensor& full, int64_t r, int64_t t) {
  const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("c_attn.")) return qkv_rows(full, r, t);
  if (has("c_fc.")) return full.narrow(0, r * full.size(0) / t, full.size(0) / t);
  if (has("c_proj.weight")) return full.narrow(1, r * full.size(1) / t, full.size(1) / t);
  return full;
}

// Every parameter of the parallel module has the gradient of the full module's parameter of
// the same name, this rank's share of it.
inline void expect_grads_are_shares(const torch::nn::Module& par, const torch::nn::Module& full,
                                    const dist::Group& group) {
  const auto want = full.named_parameters();
  for (const auto& p : par.named_parameters()) {
    ASSERT_TRUE(want.contains(p.key())) << p.key() << " is not a parameter of the full layer";
    const auto& w = want[p.key()];
    ASSERT_TRUE(w.grad().defined()) << p.key();
    EXPECT_TRUE(close(p.value().grad(), expected_share(p.key(), w.grad(), group.rank(), group.size())))
        << p.key() << "'s gradient, rank " << group.rank() << " of " << group.size();
  }
}

}  // namespace tp_test
