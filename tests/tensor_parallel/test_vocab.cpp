// Problem 4.4: the vocab-parallel embedding and cross-entropy on t = 1, 2, 4 ranks against
// torch::nn::Embedding and kit::masked_cross_entropy on the whole vocabulary. The tokens and
// labels fall in every rank's range; the loss is also checked with every other token's logits
// around 1e4, where exp overflows float32 unless each token's global max is subtracted first,
// and with a label 200 below its token's logits. Each rank records what its shard gave; the
// judge computes the whole-vocabulary reference and compares.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "tensor_parallel/vocab.h"
#include "tp_test_util.h"
#include "train/loss.h"

namespace {
namespace tp = kit::tp;
namespace judge = kit::judge;
using tp_test::close;

constexpr int64_t kFullVocab = 64, kDim = 16;  // the whole vocabulary, split among the ranks

// The full embedding of a vocabulary of V tokens (seed 4), its input and upstream gradient.
struct EmbeddingInputs {
  torch::nn::Embedding full{nullptr};
  torch::Tensor ids, G;
};
EmbeddingInputs embedding_inputs(int64_t V) {
  const int64_t rows = V % 4 == 0 ? 4 : 1;
  torch::manual_seed(4);
  EmbeddingInputs in;
  in.full = torch::nn::Embedding(V, kDim);
  // Every token once (so every rank's range), then some repeated ones.
  in.ids = torch::cat({torch::randperm(V).view({rows, V / rows}), torch::randint(V, {rows, 8})}, 1);
  in.G = torch::randn({rows, V / rows + 8, kDim});
  return in;
}

// Subject: this rank's embedding shard (V / t rows per rank) loaded from the full one; its
// vocabulary start, output and weight gradient, recorded under pre.
void embedding(const kit::dist::Group& group, int64_t V, judge::Record& out, const std::string& pre) {
  const EmbeddingInputs in = embedding_inputs(V);
  tp::VocabParallelEmbedding par(V, kDim, group);
  par->load_full(in.full->weight.detach());
  out.put(pre + "vocab_start", par->vocab_start);
  auto got = par(in.ids);
  out.put(pre + "y", got);
  (got * in.G).sum().backward();
  out.put(pre + "weight_grad", par->weight.grad());
}

// Judge: rank r of t's record of embedding, against the full embedding.
void check_embedding(const judge::Record& got, int64_t r, int64_t t, int64_t V, const std::string& pre) {
  const int64_t part = V / t;
  EmbeddingInputs in = embedding_inputs(V);
  auto want = in.full(in.ids);
  (want * in.G).sum().backward();
  ASSERT_EQ(got.get<int64_t>(pre + "vocab_start"), r * part);
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "y"), want))
      << "embeddings of tokens from every rank's range, rank " << r << " of " << t << ", " << part
      << " rows per rank (tokens outside a rank's range must count as zeros there)";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "weight_grad"), in.full->weight.grad().narrow(0, r * part, part)))
      << "this rank's rows of the embedding gradient";
}

TP_SUBJECT(vocab_parallel_embedding) { embedding(group, kFullVocab, out, "embedding."); }
// One row per rank (V = t): the smallest shard, where an index other than 0 is out of range.
TP_SUBJECT(vocab_parallel_embedding_one_row) { embedding(group, group.size(), out, "embedding."); }

// Logits (B, T, V) = scale * N(0, 1), plus offset on every other token (a max taken over the
// whole slice instead of per token leaves the others' exp at 0); labels in every rank's range,
// one of them 200 below its token's logits (where exp(logit) / sum is 0 in float32: the loss
// must come from the log-sum-exp); a mask with a row that counts nothing and a row that
// counts part of its tokens.
// With boundary_labels, the counted labels are the first and last ids of every rank's range
// for t = 2 and 4 (0, 15, 16, 31, 32, 47, 48, 63), where an off-by-one in the range test puts
// a label on two ranks or on none.
struct CrossEntropyInputs {
  torch::Tensor logits, labels, mask;
};
CrossEntropyInputs cross_entropy_inputs(double offset, double scale, bool boundary_labels) {
  const int64_t B = 3, T = 5;
  torch::manual_seed(6);
  CrossEntropyInputs in;
  const torch::Tensor every_other = (torch::arange(B * T) % 2).to(torch::kFloat32).view({B, T, 1});
  in.logits = offset * every_other + scale * torch::randn({B, T, kFullVocab});
  in.labels = torch::randint(kFullVocab, {B, T}, torch::kInt64);
  in.labels[0] = torch::tensor({0, 17, 34, 51, 63}, torch::kInt64);  // one in each quarter of the vocabulary
  if (boundary_labels) {
    in.labels[0] = torch::tensor({15, 16, 31, 32, 47}, torch::kInt64);
    in.labels[2] = torch::tensor({5, 9, 48, 63, 0}, torch::kInt64);  // its first two are masked out below
  }
  const int64_t far = in.labels[0][2].item<int64_t>();  // a counted token: a confidently wrong prediction
  in.logits[0][2][far] -= 200;
  in.mask = torch::ones({B, T});
  in.mask[1].zero_();
  in.mask[2].narrow(0, 0, 2).zero_();
  return in;
}

// Subject: the loss of this rank's slice of the logits and that slice's gradient, under pre.
// The backward starts from kUpstream * loss, as inside a larger graph (a backward that ignores
// its incoming gradient is right only for 1).
constexpr double kUpstream = 3;
void cross_entropy(const kit::dist::Group& group, double offset, double scale, bool boundary_labels,
                   judge::Record& out, const std::string& pre) {
  const int64_t r = group.rank(), part = kFullVocab / group.size();
  const CrossEntropyInputs in = cross_entropy_inputs(offset, scale, boundary_labels);
  auto local = in.logits.narrow(-1, r * part, part).clone().requires_grad_(true);
  auto got = tp::vocab_parallel_cross_entropy(local, in.labels, in.mask, r * part, group);
  out.put(pre + "loss", got);
  if (got.dim() != 0) return;  // no scalar to differentiate (the judge says so)
  (kUpstream * got).backward();
  out.put(pre + "logits_grad", local.grad());
}

// Judge: rank r of t's record of cross_entropy, against kit::masked_cross_entropy.
void check_cross_entropy(const judge::Record& got, int64_t r, int64_t t, double offset, double scale,
                         bool boundary_labels, const std::string& pre) {
  const int64_t part = kFullVocab / t;
  const CrossEntropyInputs in = cross_entropy_inputs(offset, scale, boundary_labels);
  auto full = in.logits.clone().requires_grad_(true);
  auto want = kit::masked_cross_entropy(full, in.labels, in.mask);
  (kUpstream * want).backward();
  ASSERT_TRUE(std::isfinite(want.item<double>())) << "the reference loss itself is not finite";
  const torch::Tensor loss = got.get<torch::Tensor>(pre + "loss");
  ASSERT_TRUE(loss.defined()) << "the loss is undefined";
  ASSERT_EQ(loss.dim(), 0) << "the loss is a scalar";
  EXPECT_TRUE(close(loss, want)) << "loss " << loss.item<double>() << ", expected " << want.item<double>()
                                 << " (logits around " << offset << "), rank " << r << " of " << t;
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "logits_grad"), full.grad().narrow(-1, r * part, part)))
      << "gradient of this rank's logits slice (logits around " << offset << ")";
}

TP_SUBJECT(vocab_parallel_cross_entropy) { cross_entropy(group, 0, 3, false, out, "ce."); }
TP_SUBJECT(vocab_parallel_cross_entropy_large_logits) { cross_entropy(group, 1e4, 2, false, out, "ce."); }
TP_SUBJECT(vocab_parallel_cross_entropy_boundaries) { cross_entropy(group, 0, 3, true, out, "ce."); }

// Embedding and cross-entropy on tensor groups smaller than the world: world 4, groups {0, 2}
// and {1, 3} (a rank's vocabulary range comes from its rank in the group, not in the world).
// Last, each group's logits lie far from the other's (around 0 on {0, 2}, 1e4 on {1, 3}): a max
// taken over the world instead of the group shifts {0, 2}'s logits by -1e4, where exp is 0.
double apart_offset(int world_rank) { return world_rank % 2 == 0 ? 0 : 1e4; }
TP_SUBJECT(vocab_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  tp_test::record_group(mine, out);
  embedding(mine, kFullVocab, out, "embedding.");
  cross_entropy(mine, 0, 3, false, out, "ce.");
  cross_entropy(mine, 0, 3, true, out, "ce_boundaries.");
  cross_entropy(mine, apart_offset(group.rank()), 2, false, out, "ce_apart.");
}

TEST(TPVocab, EmbeddingEqualsFullEmbeddingForTokensOfEveryRank) {
  tp_test::for_ranks({1, 2, 4}, "vocab_parallel_embedding", "embedding", [](const judge::Record& got, int r, int n) {
    check_embedding(got, r, n, kFullVocab, "embedding.");
  });
}

TEST(TPVocab, EmbeddingWithOneTokenPerRank) {
  tp_test::for_ranks({2, 4}, "vocab_parallel_embedding_one_row", "embedding of a vocabulary of t tokens",
                     [](const judge::Record& got, int r, int n) { check_embedding(got, r, n, n, "embedding."); });
}

TEST(TPVocab, CrossEntropyEqualsMaskedCrossEntropy) {
  tp_test::for_ranks({1, 2, 4}, "vocab_parallel_cross_entropy", "cross-entropy",
                     [](const judge::Record& got, int r, int n) { check_cross_entropy(got, r, n, 0, 3, false, "ce."); });
}

TEST(TPVocab, CrossEntropyOfLabelsOnTheShardBoundaries) {
  tp_test::for_ranks({2, 4}, "vocab_parallel_cross_entropy_boundaries", "cross-entropy, labels on the shard boundaries",
                     [](const judge::Record& got, int r, int n) { check_cross_entropy(got, r, n, 0, 3, true, "ce."); });
}

TEST(TPVocab, EmbeddingAndCrossEntropyOnTensorGroupsSmallerThanTheWorld) {
  tp_test::for_ranks({4}, "vocab_subgroups", "embedding and cross-entropy on groups {0, 2} and {1, 3}",
                     [](const judge::Record& got, int w, int) {
                       if (!tp_test::expect_strided_pair_group(got, w)) return;
                       check_embedding(got, w / 2, 2, kFullVocab, "embedding.");
                       check_cross_entropy(got, w / 2, 2, 0, 3, false, "ce.");
                       check_cross_entropy(got, w / 2, 2, 0, 3, true, "ce_boundaries.");
                       check_cross_entropy(got, w / 2, 2, apart_offset(w), 2, false, "ce_apart.");
                     });
}

TEST(TPVocab, CrossEntropyOfLogitsAround1e4IsFiniteAndEqual) {
  tp_test::for_ranks({1, 2, 4}, "vocab_parallel_cross_entropy_large_logits", "cross-entropy, logits around 1e4",
                     [](const judge::Record& got, int r, int n) { check_cross_entropy(got, r, n, 1e4, 2, false, "ce."); });
}

}  // namespace
