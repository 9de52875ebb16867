// Helpers for the tensor-parallel tests: t ranks as processes running registered roles
// (tests/rank_roles.h). A rank runs the student's parallel layers, so it is a subject
// (tests/judge/judge.h): a TP_SUBJECT role builds its inputs, runs the parallel layer and
// records its outputs and gradients, and decides nothing. The case runs the ranks inside its
// subject part (for_ranks) and, in its judge part, builds the single-device layer from the
// same seed and compares every rank's record with that rank's share of it (expected_share,
// qkv_rows: judge-side helpers). TP_ROLE (a rank that checks itself) is left for given code.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dist/dist.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "kit/config.h"
#include "kit/errors.h"
#include "rank_roles.h"

#define TP_ROLE(name) RANK_ROLE(name)
#define TP_SUBJECT(name) RANK_SUBJECT(name)

namespace tp_test {
namespace dist = kit::dist;
namespace judge = kit::judge;
using kit_test::close;
using kit_test::excess;
using kit_test::expect_all_ranks_pass;
using kit_test::expect_error_naming;
using kit_test::RankRun;
using kit_test::run_ranks;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

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
// groups' identical shares there, and fails. The rank records which group it was in
// (record_group), the judge checks it (expect_strided_pair_group).
inline dist::Group strided_pair_group() {
  const dist::Group even = dist::new_group({0, 2}, "tp_even");
  const dist::Group odd = dist::new_group({1, 3}, "tp_odd");
  return even.is_member() ? even : odd;
}
inline void record_group(const dist::Group& group, judge::Record& out) {
  out.put("group_ranks", group.ranks());
  out.put("group_rank", group.rank());
}
// Judge: world rank w was in {w % 2, w % 2 + 2} as its group rank w / 2 (of 2).
inline bool expect_strided_pair_group(const judge::Record& rec, int w) {
  const std::vector<int> want = {w % 2, w % 2 + 2};
  const auto ranks = rec.get<std::vector<int>>("group_ranks");
  const int rank = rec.get<int>("group_rank");
  EXPECT_EQ(ranks, want) << "world rank " << w << "'s tensor group";
  EXPECT_EQ(rank, w / 2) << "world rank " << w << "'s rank in its tensor group";
  return ranks == want && rank == w / 2;
}

// Whether every rank ran its role to the end and exited 0 (the subject stops at a size whose
// ranks did not: the judge then stops there too, see for_ranks).
inline bool all_ran(const RankRun& run, int n) {
  if (run.records.size() != static_cast<size_t>(n) || run.exitcodes.size() != static_cast<size_t>(n)) return false;
  for (int r = 0; r < n; ++r)
    if (!run.records[static_cast<size_t>(r)].ok() || run.exitcodes[static_cast<size_t>(r)] != 0) return false;
  return true;
}

// Judge: checks rank r's record of a run on n ranks.
using RankCheck = std::function<void(const judge::Record& rec, int r, int n)>;

// The role (a TP_SUBJECT) on n = each of `sizes` processes in turn, inside the case's subject
// parts; the judge checks each rank's record with check(record, r, n), stopping at the first
// size that fails: its message is the one to read (an unimplemented function fails every size
// alike, and each size costs its processes' start-up).
inline void for_ranks(const std::vector<int>& sizes, const std::string& role, const std::string& what,
                      const RankCheck& check, double timeout_s = 60) {
  for (const int n : sizes) {
    const RankRun run = kit_test::subject_ranks(n, role, timeout_s);
    if (!judge::judging()) {
      if (!all_ran(run, n)) return;
      continue;
    }
    if (!kit_test::expect_ranks_ok(run, n, what)) return;
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(what + ", rank " + std::to_string(r) + " of " + std::to_string(n));
      check(run.records[static_cast<size_t>(r)], r, n);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// Judge: the outcome is a kit::Error whose message contains every one of `parts`.
inline void expect_error_outcome(const judge::Outcome& o, const std::vector<std::string>& parts,
                                 const std::string& what) {
  if (o.kind != "kit::Error") {
    ADD_FAILURE() << what << ": no kit::Error" << (o.threw() ? " (" + o.describe() + ")" : std::string());
    return;
  }
  for (const auto& p : parts)
    EXPECT_NE(o.message.find(p), std::string::npos) << what << ": \"" << p << "\" not in: " << o.message;
}

// Rank r's rows of a fused q|k|v tensor (3C rows), written out independently of shard_qkv:
// the rows of q, k and v that rank r's heads own. (Judge side.)
inline torch::Tensor qkv_rows(const torch::Tensor& full, int64_t r, int64_t t) {
  const int64_t C = full.size(0) / 3, part = C / t;
  return torch::cat({full.narrow(0, r * part, part), full.narrow(0, C + r * part, part),
                     full.narrow(0, 2 * C + r * part, part)});
}

// Rank r's share of a full layer's tensor `name` (a parameter or its gradient), by the
// Megatron split: c_attn q|k|v rows, c_fc rows, c_proj weight columns, the rest whole.
// (Judge side.)
inline torch::Tensor expected_share(const std::string& name, const torch::Tensor& full, int64_t r, int64_t t) {
  const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("c_attn.")) return qkv_rows(full, r, t);
  if (has("c_fc.")) return full.narrow(0, r * full.size(0) / t, full.size(0) / t);
  if (has("c_proj.weight")) return full.narrow(1, r * full.size(1) / t, full.size(1) / t);
  return full;
}

// Subject: every parameter's gradient of a module, by name (undefined where none arrived).
inline NamedTensors named_grads(const torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value().grad());
  return out;
}

// Judge: every parameter of the parallel module (its recorded gradients, named_grads) has the
// gradient of the full module's parameter of the same name, rank r's share of it.
inline void expect_grads_are_shares(const NamedTensors& par, const torch::nn::Module& full, int64_t r, int64_t t) {
  const auto want = full.named_parameters();
  for (const auto& [name, grad] : par) {
    ASSERT_TRUE(want.contains(name)) << name << " is not a parameter of the full layer";
    const auto& w = want[name];
    ASSERT_TRUE(w.grad().defined()) << name;
    EXPECT_TRUE(close(grad, expected_share(name, w.grad(), r, t)))
        << name << "'s gradient, rank " << r << " of " << t;
  }
}

}  // namespace tp_test
