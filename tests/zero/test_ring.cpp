// Problem 5.1: ring reduce-scatter, all-gather and all-reduce against the dist layer's own
// all-reduce, on n = 2, 3, 4, 5 Gloo processes, float32 and float64, tensors of 1, 7 and 10^6
// elements (n = 3 and 4 divide neither 7 nor 10^6: chunks of unequal sizes, some empty), and
// the bytes each rank sends, counted by the dist layer; groups of one rank inside a world of two
// and a non-contiguous tensor. Tolerance: the ring adds in another
// order than Gloo, so 1e-5 + 1e-5 |want| (float32) and 1e-12 + 1e-12 |want| (float64).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "collectives/ring.h"
#include "dist/dist.h"
#include "rank_roles.h"

namespace {
namespace ring = kit::ring;
namespace dist = kit::dist;
using rank_test::expect_all_ranks_pass;
using rank_test::expect_ranks_pass_for;
using rank_test::run_ranks;

const std::vector<int64_t> kSizes = {1, 7, 1000000};
const std::vector<torch::ScalarType> kTypes = {torch::kFloat32, torch::kFloat64};

// This rank's input: different on every rank, reproducible.
torch::Tensor input_of(int rank, int64_t numel, torch::ScalarType type) {
  torch::manual_seed(100 + static_cast<uint64_t>(rank));
  return torch::randn({numel}, torch::TensorOptions().dtype(type));
}

double tol(torch::ScalarType type) { return type == torch::kFloat64 ? 1e-12 : 1e-5; }

// The sum over the group's ranks, by the dist layer's built-in all-reduce.
torch::Tensor reference_sum(const torch::Tensor& mine, const dist::Group& group) {
  torch::Tensor sum = mine.clone();
  dist::all_reduce(sum, dist::ReduceOp::SUM, group);
  return sum;
}

// This rank's input, the group's sum of everyone's by the built-in all-reduce, and a copy of
// the input after the ring operation `op` (the group's counters reset just before it).
struct RingRun {
  torch::Tensor mine, want, got;
};
RingRun run_on_input(void (*op)(const torch::Tensor&, const dist::Group&), int64_t numel, torch::ScalarType type,
                     const dist::Group& group) {
  RingRun run;
  run.mine = input_of(group.rank(), numel, type);
  run.want = reference_sum(run.mine, group);
  run.got = run.mine.clone();
  group.reset_counters();
  op(run.got, group);
  return run;
}

::testing::AssertionResult close(const torch::Tensor& got, const torch::Tensor& want, torch::ScalarType type) {
  return rank_test::close(got, want, tol(type), tol(type));
}

std::string what(int64_t numel, torch::ScalarType type, const dist::Group& g) {
  return std::to_string(numel) + " elements of " + std::string(c10::toString(type)) + ", rank " +
         std::to_string(g.rank()) + " of " + std::to_string(g.size());
}

RANK_ROLE(ring_reduce_scatter) {
  const int n = group.size(), r = group.rank();
  for (const auto type : kTypes)
    for (const int64_t numel : kSizes) {
      const auto [mine, want, t] = run_on_input(ring::ring_reduce_scatter, numel, type, group);
      const ring::Range c = ring::chunk_range(numel, n, r);
      EXPECT_TRUE(close(t.narrow(0, c.begin, c.size()), want.narrow(0, c.begin, c.size()), type))
          << "chunk " << r << " (elements " << c.begin << " to " << c.end << ") after ring_reduce_scatter, "
          << what(numel, type, group) << ": it must hold the sum over all ranks";
      // n-1 steps, each sending one chunk: every chunk but this rank's own.
      EXPECT_EQ(group.counters().send_bytes, (numel - c.size()) * mine.element_size())
          << "bytes sent by ring_reduce_scatter, " << what(numel, type, group);
    }
}

RANK_ROLE(ring_all_gather) {
  const int n = group.size(), r = group.rank();
  for (const auto type : kTypes)
    for (const int64_t numel : kSizes) {
      // Everyone's chunk q comes from rank q's input; the rest of this rank's tensor is junk
      // (NaN) that the all-gather must overwrite.
      torch::Tensor want = torch::empty({numel}, torch::TensorOptions().dtype(type));
      for (int q = 0; q < n; ++q) {
        const ring::Range c = ring::chunk_range(numel, n, q);
        want.narrow(0, c.begin, c.size()).copy_(input_of(q, numel, type).narrow(0, c.begin, c.size()));
      }
      torch::Tensor t = torch::full({numel}, std::nan(""), torch::TensorOptions().dtype(type));
      const ring::Range mine = ring::chunk_range(numel, n, r);
      t.narrow(0, mine.begin, mine.size()).copy_(want.narrow(0, mine.begin, mine.size()));
      group.reset_counters();
      ring::ring_all_gather(t, group);
      EXPECT_TRUE(torch::equal(t, want)) << "after ring_all_gather, " << what(numel, type, group)
                                         << ": every chunk q must be rank q's, copied exactly";
      // n-1 steps, each sending one chunk: every chunk but the next rank's (which it owns).
      EXPECT_EQ(group.counters().send_bytes, (numel - ring::chunk_range(numel, n, (r + 1) % n).size()) *
                                                 want.element_size())
          << "bytes sent by ring_all_gather, " << what(numel, type, group);
    }
}

// All-reduce: the built-in's result on every rank, and per rank exactly what a ring sends:
// every chunk but its own (reduce-scatter) and every chunk but the next rank's (all-gather),
// 2(n-1)/n of the tensor when n divides it.
RANK_ROLE(ring_all_reduce) {
  const int n = group.size(), r = group.rank();
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(n * 1000);  // n divides it: exactly 2(n-1)/n of the tensor
  for (const auto type : kTypes)
    for (const int64_t numel : sizes) {
      const auto [mine, want, t] = run_on_input(ring::ring_all_reduce, numel, type, group);
      const dist::Counters c = group.counters();
      EXPECT_TRUE(close(t, want, type)) << "after ring_all_reduce, " << what(numel, type, group);
      const int64_t elem = mine.element_size();
      const int64_t sent = (numel - ring::chunk_range(numel, n, r).size()) +
                           (numel - ring::chunk_range(numel, n, (r + 1) % n).size());
      EXPECT_EQ(c.send_bytes, sent * elem) << "bytes sent by ring_all_reduce, " << what(numel, type, group);
      // ...and receives what its left neighbour r-1 sends.
      const int64_t received = (numel - ring::chunk_range(numel, n, (r - 1 + n) % n).size()) +
                               (numel - ring::chunk_range(numel, n, r).size());
      EXPECT_EQ(c.recv_bytes, received * elem) << "bytes received by ring_all_reduce, " << what(numel, type, group);
      if (numel % n == 0)
        EXPECT_EQ(c.send_bytes, 2 * (n - 1) * (numel / n) * elem)
            << "2(n-1)/n of the tensor, " << what(numel, type, group);
      EXPECT_EQ(c.all_reduce_calls, 0) << "built from send/recv only, not the built-in all-reduce";
    }
}

// On a subgroup: ranks {1, 2, 3} of 4 run the ring among themselves; rank 0 is not in it.
RANK_ROLE(ring_all_reduce_subgroup) {
  const dist::Group sub = dist::new_group({1, 2, 3}, "ring_sub");
  if (!sub.is_member()) return;
  for (const int64_t numel : kSizes) {
    const torch::Tensor mine = input_of(sub.rank(), numel, torch::kFloat32);
    const torch::Tensor want = reference_sum(mine, sub);
    torch::Tensor t = mine.clone();
    ring::ring_all_reduce(t, sub);
    EXPECT_TRUE(close(t, want, torch::kFloat32)) << "ring_all_reduce on group {1, 2, 3}, " << what(numel, torch::kFloat32, sub);
  }
  // A 2-d tensor is reduced as its flat elements.
  const torch::Tensor mine = input_of(sub.rank(), 6, torch::kFloat64).view({2, 3});
  const torch::Tensor want = reference_sum(mine, sub);
  torch::Tensor t = mine.clone();
  ring::ring_all_reduce(t, sub);
  EXPECT_TRUE(close(t, want, torch::kFloat64)) << "a 2 x 3 tensor";
}

// n = 1 on groups smaller than the world: ranks 0 and 1 each run the ring on a group of their
// own. There is nothing to exchange, so the tensor stays as it is and nothing is sent (code that
// talks to the world instead of the group it is given sums the two ranks here).
RANK_ROLE(ring_one_rank_groups) {
  const dist::Group solo0 = dist::new_group({0}, "ring_solo0");
  const dist::Group solo1 = dist::new_group({1}, "ring_solo1");
  const dist::Group& solo = group.rank() == 0 ? solo0 : solo1;
  for (const int64_t numel : kSizes) {
    const torch::Tensor mine = input_of(group.rank(), numel, torch::kFloat32);
    torch::Tensor t = mine.clone();
    dist::reset_counters();
    ring::ring_reduce_scatter(t, solo);
    ring::ring_all_gather(t, solo);
    ring::ring_all_reduce(t, solo);
    EXPECT_TRUE(torch::equal(t, mine)) << "the three collectives on a group of one rank (rank " << group.rank()
                                       << " alone), " << numel << " elements: the tensor must stay as it is";
    EXPECT_EQ(dist::counters().send_bytes, 0) << "bytes sent on a group of one rank, " << numel << " elements";
  }
}

// A tensor that is not contiguous (a transposed view): a clear error that names contiguity, or
// the right sums in place. Not a silent copy (reshape) that leaves the caller's tensor unchanged.
RANK_ROLE(ring_not_contiguous) {
  const torch::Tensor base = input_of(group.rank(), 12, torch::kFloat64).view({3, 4});
  torch::Tensor t = base.clone().t();
  ASSERT_FALSE(t.is_contiguous());
  const torch::Tensor want = reference_sum(t.contiguous(), group);
  try {
    ring::ring_all_reduce(t, group);
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("contiguous"), std::string::npos)
        << "ring_all_reduce on a transposed 4 x 3 view threw, but its message does not say the tensor must be "
           "contiguous: "
        << e.what();
    return;
  }
  EXPECT_TRUE(close(t, want, torch::kFloat64))
      << "ring_all_reduce on a transposed 4 x 3 view returned without an error but the view does not hold the "
         "sums: work in place on the caller's tensor, or reject it (reshape copies a non-contiguous tensor)";
}

}  // namespace

// The halves on 3 and 4 ranks (chunks of unequal sizes for 7 and 10^6 elements); the
// all-reduce, which is both, on every world size from 2 to 5.
TEST(Ring, ReduceScatterLeavesEachRankItsChunkSummed) {
  expect_ranks_pass_for({3, 4}, "ring_reduce_scatter", "ring_reduce_scatter", 90);
}

TEST(Ring, AllGatherGivesEveryRankEveryChunk) {
  expect_ranks_pass_for({3, 4}, "ring_all_gather", "ring_all_gather", 90);
}

TEST(Ring, AllReduceEqualsTheBuiltInAndSendsTwoNMinusOneOverNOfTheTensor) {
  expect_ranks_pass_for({2, 3, 4, 5}, "ring_all_reduce", "ring_all_reduce", 90);
}

TEST(Ring, AllReduceWorksOnASubgroup) {
  const auto run = run_ranks(4, "ring_all_reduce_subgroup", 60);
  expect_all_ranks_pass(run, 4, "ring_all_reduce on a subgroup");
}

TEST(Ring, OneRankGroupsLeaveTheTensorAndSendNothing) {
  const auto run = run_ranks(2, "ring_one_rank_groups", 60);
  expect_all_ranks_pass(run, 2, "the ring on groups of one rank");
}

TEST(Ring, NonContiguousTensorIsRejectedOrReducedInPlace) {
  const auto run = run_ranks(2, "ring_not_contiguous", 60);
  expect_all_ranks_pass(run, 2, "ring_all_reduce on a non-contiguous tensor");
}

TEST(Ring, ChunkRangeCoversEveryElementOnce) {
  // Given code, but everything above rests on it.
  for (const int64_t numel : {0, 1, 7, 10, 1000000})
    for (const int64_t n : {1, 2, 3, 4, 5, 8}) {
      int64_t at = 0;
      for (int64_t i = 0; i < n; ++i) {
        const ring::Range c = ring::chunk_range(numel, n, i);
        EXPECT_EQ(c.begin, at) << numel << " elements, chunk " << i << " of " << n;
        EXPECT_GE(c.size(), 0);
        at = c.end;
      }
      EXPECT_EQ(at, numel) << numel << " elements in " << n << " chunks";
    }
}
