// Graded variants of tests/data_parallel/test_partition.cpp: the same properties
// (disjoint, equal shares of floor(n / world_size), the same permutation on every rank,
// batch size = global batch / world_size, an order that depends on the seed) for world
// sizes 3, 4 and 5, a seed other than the default, and dataset sizes that the world size
// does not divide (the public tests use powers of two that divide them).
// Partitions are compared by the examples' own index field, as in the public test. Each
// case's subject part records what the student's code served; the checks are the judge's.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/splitmix64.h"
#include "data_parallel/dataset.h"
#include "data_parallel/partition_test_util.h"
#include "judge/judge.h"

namespace partition_test {  // its helpers (partition_test_util.h) without a using list
namespace {

constexpr int64_t kIndexBase = 5000;  // example i carries index 5000 + i, so values differ from positions

namespace judge = kit::judge;

std::shared_ptr<const kit::ExampleSource> fake(int64_t n) {
  return std::make_shared<partition_test::FakeSource>(n, kIndexBase, 5);
}

// DataPartitioner with `world` equal sizes and `seed`, built once per rank as separate
// processes would build it: disjoint equal shares, views of the data, and every rank's
// partitioner cutting the same permutation. The subject part records what the student's
// partitioners served; the checks are the judge's.
void expect_equal_shares(int64_t n, int world, uint64_t seed) {
  auto data = fake(n);
  const std::vector<double> sizes(static_cast<size_t>(world), 1.0 / world);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::vector<int64_t> counts;
    std::vector<PartView> parts;
    for (int r = 0; r < world; ++r) {
      kit::DataPartitioner partitioner(data, sizes, seed);
      counts.push_back(partitioner.num_partitions());
      if (partitioner.num_partitions() != world) break;
      parts.push_back(view_of(partitioner.use(r)));
    }
    out.put("num_partitions", counts);
    out.put("parts", parts);
    if (static_cast<int>(parts.size()) != world) return;
    // Another rank's partitioner, built from another copy of the data.
    kit::DataPartitioner other(fake(n), sizes, seed);
    std::vector<std::vector<int64_t>> others;
    for (int r = 0; r < world; ++r) others.push_back(values_of(other.use(r)));
    out.put("other", others);
  });
  if (!judge::judging()) return;
  std::vector<std::vector<int64_t>> per_rank;
  expect_rank_views(got, world, n, kIndexBase, &per_rank);
  if (::testing::Test::HasFatalFailure()) return;

  // Another rank's partitioner, built from another copy of the data: the same cut.
  const auto other = got.get<std::vector<std::vector<int64_t>>>("other");
  ASSERT_EQ(other.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(other[static_cast<size_t>(r)], per_rank[static_cast<size_t>(r)])
        << "two partitioners with the same data and seed " << seed << " disagree on partition " << r
        << ": seed the shuffle with `seed` only";
}

TEST(HiddenDataPartitioner, WorldSize3Of100Seed99) { expect_equal_shares(100, 3, 99); }
TEST(HiddenDataPartitioner, WorldSize4Of103Seed99) { expect_equal_shares(103, 4, 99); }
TEST(HiddenDataPartitioner, WorldSize5Of57Seed2024) { expect_equal_shares(57, 5, 2024); }

// Nine and eleven equal shares of 1/9 and 1/11 add up to 1.0000000000000002 in doubles:
// still a valid split of the whole dataset, not "sizes above 1".
TEST(HiddenDataPartitioner, WorldSize9Of100Seed5) { expect_equal_shares(100, 9, 5); }
TEST(HiddenDataPartitioner, WorldSize11Of60Seed5) { expect_equal_shares(60, 11, 5); }

// The order the handout names: the positions 0..n-1 shuffled by shuffle_in_place with
// SplitMix64(seed) (data/splitmix64.h), the same on every machine and standard library
// (std::shuffle's is implementation-defined), cut in consecutive floor(size * n) slices.
TEST(HiddenDataPartitioner, TheOrderIsSplitMix64sShuffleOfThePositions) {
  const int64_t n = 50;
  const std::vector<double> sizes{0.5, 0.3, 0.2};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit::DataPartitioner seeded(fake(n), sizes, 77);
    kit::DataPartitioner by_default(fake(n), sizes);
    std::vector<std::vector<int64_t>> a, b;
    for (int64_t k = 0; k < std::min<int64_t>(3, seeded.num_partitions()); ++k) a.push_back(values_of(seeded.use(k)));
    for (int64_t k = 0; k < std::min<int64_t>(3, by_default.num_partitions()); ++k)
      b.push_back(values_of(by_default.use(k)));
    out.put("seed 77", a);
    out.put("default seed (1234)", b);
  });
  if (!judge::judging()) return;
  for (const auto& [key, seed] : std::vector<std::pair<std::string, uint64_t>>{{"seed 77", 77}, {"default seed (1234)", 1234}}) {
    std::vector<int64_t> positions(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), int64_t{0});
    kit::SplitMix64 rng(seed);
    kit::shuffle_in_place(positions, rng);
    const auto parts = got.get<std::vector<std::vector<int64_t>>>(key);
    ASSERT_EQ(parts.size(), 3u) << key;
    size_t begin = 0;
    for (size_t k = 0; k < 3; ++k) {
      const size_t len = std::vector<size_t>{25, 15, 10}[k];
      std::vector<int64_t> want;
      for (size_t i = begin; i < begin + len; ++i) want.push_back(kIndexBase + positions[i]);
      begin += len;
      EXPECT_EQ(parts[k], want) << key << ", partition " << k << " of {0.5, 0.3, 0.2} of " << n
                                << ": shuffle the positions with SplitMix64 rng(seed); shuffle_in_place(positions, "
                                   "rng); (not std::shuffle) and cut consecutive slices";
    }
  }
}

TEST(HiddenDataPartitioner, OrderDependsOnTheSeed) {
  const int64_t n = 61;
  const judge::Record got = judge::subject(
      [&](judge::Record& out) { record_seeded_orders(out, fake(n), std::vector<double>(3, 1.0 / 3), 7, 2024); });
  if (!judge::judging()) return;
  std::vector<int64_t> unshuffled;
  for (int64_t i = 0; i < 3 * (n / 3); ++i) unshuffled.push_back(kIndexBase + i);
  expect_seeded_orders(got, 7, 2024, unshuffled);
}

TEST(HiddenDataPartitioner, UnequalSizesCutFloorOfEachShare) {
  // {0.5, 0.3, 0.2} of 37: floor(18.5) = 18, floor(11.1) = 11, floor(7.4) = 7; one unused.
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit::DataPartitioner p(fake(37), {0.5, 0.3, 0.2}, 99);
    record_partitions(out, p, 3);
  });
  if (!judge::judging()) return;
  expect_cut(got, {18, 11, 7});
}

// partition_dataset for every rank of `world`: batches of global_batch / world, the same
// number of batches on every rank, partition `rank` of the default-seeded partitioner.
void expect_rank_loaders(int64_t n, int world, int64_t global_batch) {
  auto data = fake(n);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::vector<int64_t> batch_sizes, batch_counts;
    std::vector<std::vector<int64_t>> seen, reference;
    for (int r = 0; r < world; ++r) {
      kit::DataLoader loader = kit::partition_dataset(r, world, data, global_batch, kit::collate);
      batch_sizes.push_back(loader.batch_size());
      batch_counts.push_back(loader.num_batches());
      std::vector<int64_t> served;
      for (int64_t k = 0; k < loader.num_batches(); ++k) {
        const kit::Batch b = loader.batch(k);
        served.insert(served.end(), b.indices.begin(), b.indices.end());
      }
      seen.push_back(served);
      kit::DataPartitioner partitioner(data, std::vector<double>(static_cast<size_t>(world), 1.0 / world));
      reference.push_back(values_of(partitioner.use(r)));
    }
    out.put("batch_size", batch_sizes);
    out.put("num_batches", batch_counts);
    out.put("seen", seen);
    out.put("partitioner", reference);
  });
  if (!judge::judging()) return;
  const auto batch_sizes = got.get<std::vector<int64_t>>("batch_size");
  const auto batch_counts = got.get<std::vector<int64_t>>("num_batches");
  const auto seen = got.get<std::vector<std::vector<int64_t>>>("seen");
  const auto reference = got.get<std::vector<std::vector<int64_t>>>("partitioner");
  ASSERT_TRUE(got.ok());
  const size_t W = static_cast<size_t>(world);
  ASSERT_TRUE(batch_sizes.size() == W && batch_counts.size() == W && seen.size() == W && reference.size() == W);
  for (size_t r = 0; r < W; ++r) {
    EXPECT_EQ(batch_sizes[r], global_batch / world) << "the per-rank batch is batch_size / world_size";
    EXPECT_EQ(batch_counts[r], batch_counts[0])
        << "rank " << r << " has a different number of batches: its all-reduce would wait forever";
    EXPECT_EQ(seen[r], reference[r]) << "rank " << r << " does not serve DataPartitioner(...).use(rank)";
  }
  EXPECT_EQ(partition_test::check_disjoint(seen, n, n / world, kIndexBase), "");
}

TEST(HiddenPartitionDataset, WorldSize3Of100Batch6) { expect_rank_loaders(100, 3, 6); }
TEST(HiddenPartitionDataset, WorldSize4Of103Batch12) { expect_rank_loaders(103, 4, 12); }
TEST(HiddenPartitionDataset, WorldSize5Of57Batch10) { expect_rank_loaders(57, 5, 10); }
// The smallest global batch: one example per rank (a positive multiple of the world size).
TEST(HiddenPartitionDataset, WorldSize9Of100Batch18) { expect_rank_loaders(100, 9, 18); }
TEST(HiddenPartitionDataset, OneProcessWithABatchOfOne) { expect_rank_loaders(10, 1, 1); }
TEST(HiddenPartitionDataset, OneExamplePerRankOnThreeRanks) { expect_rank_loaders(31, 3, 3); }

}  // namespace
}  // namespace partition_test
