// Problem 5.1: ring reduce-scatter, all-gather and all-reduce against the sums of every rank's
// input, on n = 2, 3, 4, 5 Gloo processes, float32 and float64, tensors of 1, 7 and 10^6
// elements (n = 3 and 4 divide neither 7 nor 10^6: chunks of unequal sizes, some empty), and
// the bytes each rank sends, counted by the dist layer; groups of one rank inside a world of two
// and a non-contiguous tensor. Tolerance: the ring adds in another
// order than the reference, so 1e-5 + 1e-5 |want| (float32) and 1e-12 + 1e-12 |want| (float64).
// Each rank is a subject (tests/rank_roles.h): it runs the student's ring on its own input and
// records what its tensor holds afterwards and what the dist layer counted; the sums, the byte
// counts expected of rank r of n, and every check are the judge's, from the same seeded inputs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "collectives/ring.h"
#include "dist/dist.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "rank_roles.h"
#include "zero_test_util.h"

namespace {
namespace ring = kit::ring;
namespace dist = kit::dist;
namespace judge = kit::judge;
using kit_test::RankRun;

const std::vector<int64_t> kSizes = {1, 7, 1000000};
const std::vector<torch::ScalarType> kTypes = {torch::kFloat32, torch::kFloat64};

// Rank `rank`'s input: different on every rank, reproducible (the judge builds every rank's).
torch::Tensor input_of(int rank, int64_t numel, torch::ScalarType type) {
  torch::manual_seed(100 + static_cast<uint64_t>(rank));
  return torch::randn({numel}, torch::TensorOptions().dtype(type));
}

// The sum of the inputs of ranks 0 .. n-1 (the judge's expected value).
torch::Tensor sum_of_inputs(int n, int64_t numel, torch::ScalarType type) {
  torch::Tensor sum = input_of(0, numel, type);
  for (int q = 1; q < n; ++q) sum = sum + input_of(q, numel, type);
  return sum;
}

double tol(torch::ScalarType type) { return type == torch::kFloat64 ? 1e-12 : 1e-5; }

::testing::AssertionResult ring_close(const torch::Tensor& got, const torch::Tensor& want, torch::ScalarType type) {
  return kit_test::close(got, want, tol(type), tol(type));
}

std::string ring_what(int64_t numel, torch::ScalarType type, int r, int n) {
  return std::to_string(numel) + " elements of " + std::string(c10::toString(type)) + ", rank " + std::to_string(r) +
         " of " + std::to_string(n);
}

// The name under which a rank records one input's results.
std::string key(int64_t numel, torch::ScalarType type) {
  return std::to_string(numel) + "/" + std::string(c10::toString(type)) + "/";
}

RANK_SUBJECT(ring_reduce_scatter) {
  const int n = group.size(), r = group.rank();
  for (const auto type : kTypes)
    for (const int64_t numel : kSizes) {
      torch::Tensor t = input_of(r, numel, type);
      group.reset_counters();
      ring::ring_reduce_scatter(t, group);
      const ring::Range c = ring::chunk_range(numel, n, r);
      out.put(key(numel, type) + "chunk", t.narrow(0, c.begin, c.size()));
      out.put(key(numel, type) + "send_bytes", group.counters().send_bytes);
    }
}

void judge_reduce_scatter(const RankRun& run, int n) {
  for (const auto type : kTypes)
    for (const int64_t numel : kSizes) {
      const torch::Tensor want = sum_of_inputs(n, numel, type);
      for (int r = 0; r < n; ++r) {
        const judge::Record& got = run.records[static_cast<size_t>(r)];
        const ring::Range c = ring::chunk_range(numel, n, r);
        EXPECT_TRUE(ring_close(got.get<torch::Tensor>(key(numel, type) + "chunk"), want.narrow(0, c.begin, c.size()),
                               type))
            << "chunk " << r << " (elements " << c.begin << " to " << c.end << ") after ring_reduce_scatter, "
            << ring_what(numel, type, r, n) << ": it must hold the sum over all ranks";
        // n-1 steps, each sending one chunk: every chunk but this rank's own.
        EXPECT_EQ(got.get<int64_t>(key(numel, type) + "send_bytes"), (numel - c.size()) * want.element_size())
            << "bytes sent by ring_reduce_scatter, " << ring_what(numel, type, r, n);
      }
    }
}

RANK_SUBJECT(ring_all_gather) {
  const int n = group.size(), r = group.rank();
  for (const auto type : kTypes)
    for (const int64_t numel : kSizes) {
      // This rank's chunk from its own input; the rest of its tensor is junk (NaN) that the
      // all-gather must overwrite.
      torch::Tensor t = torch::full({numel}, std::nan(""), torch::TensorOptions().dtype(type));
      const ring::Range mine = ring::chunk_range(numel, n, r);
      t.narrow(0, mine.begin, mine.size()).copy_(input_of(r, numel, type).narrow(0, mine.begin, mine.size()));
      group.reset_counters();
      ring::ring_all_gather(t, group);
      out.put(key(numel, type) + "tensor", t);
      out.put(key(numel, type) + "send_bytes", group.counters().send_bytes);
    }
}

void judge_all_gather(const RankRun& run, int n) {
  for (const auto type : kTypes)
    for (const int64_t numel : kSizes) {
      // Everyone's chunk q comes from rank q's input.
      torch::Tensor want = torch::empty({numel}, torch::TensorOptions().dtype(type));
      for (int q = 0; q < n; ++q) {
        const ring::Range c = ring::chunk_range(numel, n, q);
        want.narrow(0, c.begin, c.size()).copy_(input_of(q, numel, type).narrow(0, c.begin, c.size()));
      }
      for (int r = 0; r < n; ++r) {
        const judge::Record& got = run.records[static_cast<size_t>(r)];
        const torch::Tensor t = got.get<torch::Tensor>(key(numel, type) + "tensor");
        EXPECT_TRUE(t.defined() && t.sizes() == want.sizes() && t.scalar_type() == type && torch::equal(t, want))
            << "after ring_all_gather, " << ring_what(numel, type, r, n)
            << ": every chunk q must be rank q's, copied exactly";
        // n-1 steps, each sending one chunk: every chunk but the next rank's (which it owns).
        EXPECT_EQ(got.get<int64_t>(key(numel, type) + "send_bytes"),
                  (numel - ring::chunk_range(numel, n, (r + 1) % n).size()) * want.element_size())
            << "bytes sent by ring_all_gather, " << ring_what(numel, type, r, n);
      }
    }
}

// The subgroup's reduce-scatter and all-gather: 8 elements in chunks of 3, 3 and 2.
constexpr int64_t kSubgroupNumel = 8;

// The sizes the all-reduce runs on n ranks: n divides the last one.
std::vector<int64_t> all_reduce_sizes(int n) {
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(n * 1000);  // n divides it: exactly 2(n-1)/n of the tensor
  return sizes;
}

RANK_SUBJECT(ring_all_reduce) {
  const int n = group.size(), r = group.rank();
  for (const auto type : kTypes)
    for (const int64_t numel : all_reduce_sizes(n)) {
      torch::Tensor t = input_of(r, numel, type);
      group.reset_counters();
      ring::ring_all_reduce(t, group);
      const dist::Counters c = group.counters();
      out.put(key(numel, type) + "tensor", t);
      out.put(key(numel, type) + "send_bytes", c.send_bytes);
      out.put(key(numel, type) + "recv_bytes", c.recv_bytes);
      out.put(key(numel, type) + "all_reduce_calls", c.all_reduce_calls);
    }
}

// All-reduce: the sum on every rank, and per rank exactly what a ring sends: every chunk but
// its own (reduce-scatter) and every chunk but the next rank's (all-gather), 2(n-1)/n of the
// tensor when n divides it.
void judge_all_reduce(const RankRun& run, int n) {
  for (const auto type : kTypes)
    for (const int64_t numel : all_reduce_sizes(n)) {
      const torch::Tensor want = sum_of_inputs(n, numel, type);
      const int64_t elem = want.element_size();
      for (int r = 0; r < n; ++r) {
        const judge::Record& got = run.records[static_cast<size_t>(r)];
        const std::string k = key(numel, type);
        const int64_t send = got.get<int64_t>(k + "send_bytes"), recv = got.get<int64_t>(k + "recv_bytes");
        EXPECT_TRUE(ring_close(got.get<torch::Tensor>(k + "tensor"), want, type))
            << "after ring_all_reduce, " << ring_what(numel, type, r, n);
        const int64_t sent = (numel - ring::chunk_range(numel, n, r).size()) +
                             (numel - ring::chunk_range(numel, n, (r + 1) % n).size());
        EXPECT_EQ(send, sent * elem) << "bytes sent by ring_all_reduce, " << ring_what(numel, type, r, n);
        // ...and receives what its left neighbour r-1 sends.
        const int64_t received = (numel - ring::chunk_range(numel, n, (r - 1 + n) % n).size()) +
                                 (numel - ring::chunk_range(numel, n, r).size());
        EXPECT_EQ(recv, received * elem) << "bytes received by ring_all_reduce, " << ring_what(numel, type, r, n);
        if (numel % n == 0)
          EXPECT_EQ(send, 2 * (n - 1) * (numel / n) * elem) << "2(n-1)/n of the tensor, " << ring_what(numel, type, r, n);
        EXPECT_EQ(got.get<int64_t>(k + "all_reduce_calls"), 0) << "built from send/recv only, not the built-in all-reduce";
      }
    }
}

// On a subgroup: ranks {1, 2, 3} of 4 run the ring among themselves; rank 0 is not in it. Each
// member's input is that of its rank in the subgroup, and the chunk a member owns is the one of
// its rank in the subgroup (the reduce-scatter's and the all-gather's, recorded apart: with
// the world rank in both halves, the all-reduce's sum can still come out right).
RANK_SUBJECT(ring_all_reduce_subgroup) {
  const dist::Group sub = dist::new_group({1, 2, 3}, "ring_sub");
  out.put("member", sub.is_member());
  if (!sub.is_member()) return;
  for (const int64_t numel : kSizes) {
    torch::Tensor t = input_of(sub.rank(), numel, torch::kFloat32);
    ring::ring_all_reduce(t, sub);
    out.put(key(numel, torch::kFloat32) + "tensor", t);
  }
  // A 2-d tensor is reduced as its flat elements.
  torch::Tensor t = input_of(sub.rank(), 6, torch::kFloat64).view({2, 3});
  ring::ring_all_reduce(t, sub);
  out.put("2x3", t);
  const ring::Range mine = ring::chunk_range(kSubgroupNumel, 3, sub.rank());
  torch::Tensor scattered = input_of(sub.rank(), kSubgroupNumel, torch::kFloat64);
  ring::ring_reduce_scatter(scattered, sub);
  out.put("reduce_scatter chunk", scattered.narrow(0, mine.begin, mine.size()));
  torch::Tensor gathered = torch::full({kSubgroupNumel}, std::nan(""), torch::kFloat64);
  gathered.narrow(0, mine.begin, mine.size())
      .copy_(input_of(sub.rank(), kSubgroupNumel, torch::kFloat64).narrow(0, mine.begin, mine.size()));
  ring::ring_all_gather(gathered, sub);
  out.put("all_gather", gathered);
}

void judge_all_reduce_subgroup(const RankRun& run) {
  for (int r = 0; r < 4; ++r) {
    const judge::Record& got = run.records[static_cast<size_t>(r)];
    EXPECT_EQ(got.get<bool>("member"), r != 0) << "rank " << r << " in group {1, 2, 3}";
    if (r == 0) continue;
    const int sub_rank = r - 1;
    for (const int64_t numel : kSizes)
      EXPECT_TRUE(ring_close(got.get<torch::Tensor>(key(numel, torch::kFloat32) + "tensor"),
                             sum_of_inputs(3, numel, torch::kFloat32), torch::kFloat32))
          << "ring_all_reduce on group {1, 2, 3}, " << ring_what(numel, torch::kFloat32, sub_rank, 3);
    EXPECT_TRUE(ring_close(got.get<torch::Tensor>("2x3"), sum_of_inputs(3, 6, torch::kFloat64).view({2, 3}),
                           torch::kFloat64))
        << "a 2 x 3 tensor";
    const ring::Range mine = ring::chunk_range(kSubgroupNumel, 3, sub_rank);
    EXPECT_TRUE(ring_close(got.get<torch::Tensor>("reduce_scatter chunk"),
                           sum_of_inputs(3, kSubgroupNumel, torch::kFloat64).narrow(0, mine.begin, mine.size()),
                           torch::kFloat64))
        << "ring_reduce_scatter on group {1, 2, 3}: chunk " << sub_rank << " of rank " << r
        << " (its rank in the group, not in the world) must hold the sum";
    torch::Tensor want = torch::empty({kSubgroupNumel}, torch::kFloat64);
    for (int q = 0; q < 3; ++q) {
      const ring::Range c = ring::chunk_range(kSubgroupNumel, 3, q);
      want.narrow(0, c.begin, c.size()).copy_(input_of(q, kSubgroupNumel, torch::kFloat64).narrow(0, c.begin, c.size()));
    }
    const torch::Tensor gathered = got.get<torch::Tensor>("all_gather");
    EXPECT_TRUE(gathered.defined() && gathered.sizes() == want.sizes() && torch::equal(gathered, want))
        << "ring_all_gather on group {1, 2, 3}, world rank " << r << ": chunk q must be group rank q's";
  }
}

// n = 1 on groups smaller than the world: ranks 0 and 1 each run the ring on a group of their
// own. There is nothing to exchange, so the tensor stays as it is and nothing is sent (code that
// talks to the world instead of the group it is given sums the two ranks here).
RANK_SUBJECT(ring_one_rank_groups) {
  const dist::Group solo0 = dist::new_group({0}, "ring_solo0");
  const dist::Group solo1 = dist::new_group({1}, "ring_solo1");
  const dist::Group& solo = group.rank() == 0 ? solo0 : solo1;
  for (const int64_t numel : kSizes) {
    torch::Tensor t = input_of(group.rank(), numel, torch::kFloat32);
    dist::reset_counters();
    ring::ring_reduce_scatter(t, solo);
    ring::ring_all_gather(t, solo);
    ring::ring_all_reduce(t, solo);
    out.put(key(numel, torch::kFloat32) + "tensor", t);
    out.put(key(numel, torch::kFloat32) + "send_bytes", dist::counters().send_bytes);
  }
}

void judge_one_rank_groups(const RankRun& run) {
  for (int r = 0; r < 2; ++r) {
    const judge::Record& got = run.records[static_cast<size_t>(r)];
    for (const int64_t numel : kSizes) {
      const torch::Tensor mine = input_of(r, numel, torch::kFloat32);
      const torch::Tensor t = got.get<torch::Tensor>(key(numel, torch::kFloat32) + "tensor");
      EXPECT_TRUE(t.defined() && t.sizes() == mine.sizes() && t.scalar_type() == mine.scalar_type() &&
                  torch::equal(t, mine))
          << "the three collectives on a group of one rank (rank " << r << " alone), " << numel
          << " elements: the tensor must stay as it is";
      EXPECT_EQ(got.get<int64_t>(key(numel, torch::kFloat32) + "send_bytes"), 0)
          << "bytes sent on a group of one rank, " << numel << " elements";
    }
  }
}

// A tensor that is not contiguous (a transposed view): a clear error that names contiguity, or
// the right sums in place. Not a silent copy (reshape) that leaves the caller's tensor unchanged.
torch::Tensor transposed_input(int rank) { return input_of(rank, 12, torch::kFloat64).view({3, 4}).clone().t(); }

RANK_SUBJECT(ring_not_contiguous) {
  torch::Tensor t = transposed_input(group.rank());
  if (t.is_contiguous()) throw std::logic_error("the test's transposed view is contiguous");
  out.outcome("all_reduce", [&] { ring::ring_all_reduce(t, group); });
  out.put("tensor", t);  // its elements, in the view's order
}

void judge_not_contiguous(const RankRun& run, int n) {
  torch::Tensor want = transposed_input(0).contiguous();
  for (int q = 1; q < n; ++q) want = want + transposed_input(q).contiguous();
  for (int r = 0; r < n; ++r) {
    const judge::Record& got = run.records[static_cast<size_t>(r)];
    const judge::Outcome o = got.get<judge::Outcome>("all_reduce");
    if (o.kind == "unknown") {
      ADD_FAILURE() << "ring_all_reduce on a transposed 4 x 3 view threw something that is not a std::exception, rank "
                    << r;
    } else if (o.threw()) {
      EXPECT_NE(o.message.find("contiguous"), std::string::npos)
          << "ring_all_reduce on a transposed 4 x 3 view threw, but its message does not say the tensor must be "
             "contiguous: "
          << o.message;
    } else {
      EXPECT_TRUE(ring_close(got.get<torch::Tensor>("tensor"), want, torch::kFloat64))
          << "ring_all_reduce on a transposed 4 x 3 view returned without an error but the view does not hold the "
             "sums: work in place on the caller's tensor, or reject it (reshape copies a non-contiguous tensor)";
    }
  }
}

}  // namespace

// The halves on 3 and 4 ranks (chunks of unequal sizes for 7 and 10^6 elements); the
// all-reduce, which is both, on every world size from 2 to 5.
TEST(Ring, ReduceScatterLeavesEachRankItsChunkSummed) {
  zero_test::judge_ranks_for({3, 4}, "ring_reduce_scatter", "ring_reduce_scatter", 90, judge_reduce_scatter);
}

TEST(Ring, AllGatherGivesEveryRankEveryChunk) {
  zero_test::judge_ranks_for({3, 4}, "ring_all_gather", "ring_all_gather", 90, judge_all_gather);
}

TEST(Ring, AllReduceEqualsTheBuiltInAndSendsTwoNMinusOneOverNOfTheTensor) {
  zero_test::judge_ranks_for({2, 3, 4, 5}, "ring_all_reduce", "ring_all_reduce", 90, judge_all_reduce);
}

TEST(Ring, AllReduceWorksOnASubgroup) {
  zero_test::judge_ranks_for({4}, "ring_all_reduce_subgroup", "ring_all_reduce on a subgroup", 60,
                             [](const RankRun& run, int) { judge_all_reduce_subgroup(run); });
}

TEST(Ring, OneRankGroupsLeaveTheTensorAndSendNothing) {
  zero_test::judge_ranks_for({2}, "ring_one_rank_groups", "the ring on groups of one rank", 60,
                             [](const RankRun& run, int) { judge_one_rank_groups(run); });
}

TEST(Ring, NonContiguousTensorIsRejectedOrReducedInPlace) {
  zero_test::judge_ranks_for({2}, "ring_not_contiguous", "ring_all_reduce on a non-contiguous tensor", 60,
                             judge_not_contiguous);
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
