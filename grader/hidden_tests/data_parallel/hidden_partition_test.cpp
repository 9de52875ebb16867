// Graded variants of tests/data_parallel/test_partition.cpp: the same properties
// (disjoint, equal shares of floor(n / world_size), the same permutation on every rank,
// batch size = global batch / world_size, an order that depends on the seed) for world
// sizes 3, 4 and 5, a seed other than the default, and dataset sizes that the world size
// does not divide (the public tests use powers of two that divide them).
// Partitions are compared by the examples' own index field, as in the public test.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data_parallel/dataset.h"
#include "data_parallel/partition_test_util.h"

namespace {

constexpr int64_t kIndexBase = 5000;  // example i carries index 5000 + i, so values differ from positions

using partition_test::values_of;

std::shared_ptr<const kit::ExampleSource> fake(int64_t n) {
  return std::make_shared<partition_test::FakeSource>(n, kIndexBase, 5);
}

// "" when the ranks' example sets are disjoint, each `each` examples of the data; else the
// first problem.
std::string check_disjoint(const std::vector<std::vector<int64_t>>& per_rank, int64_t n, int64_t each) {
  std::map<int64_t, size_t> owner;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (static_cast<int64_t>(per_rank[r].size()) != each)
      return "rank " + std::to_string(r) + " got " + std::to_string(per_rank[r].size()) + " examples, expected " +
             std::to_string(each) + " (floor(n / world_size))";
    for (int64_t v : per_rank[r]) {
      if (v < kIndexBase || v >= kIndexBase + n)
        return "rank " + std::to_string(r) + " serves example index " + std::to_string(v) + ", which is not in the data";
      auto [it, fresh] = owner.emplace(v, r);
      if (!fresh)
        return "example " + std::to_string(v - kIndexBase) + " is in the partitions of rank " +
               std::to_string(it->second) + " and rank " + std::to_string(r) + ": partitions must not overlap";
    }
  }
  return "";
}

// DataPartitioner with `world` equal sizes and `seed`, built once per rank as separate
// processes would build it: disjoint equal shares, views of the data, and every rank's
// partitioner cutting the same permutation.
void expect_equal_shares(int64_t n, int world, uint64_t seed) {
  auto data = fake(n);
  const std::vector<double> sizes(static_cast<size_t>(world), 1.0 / world);
  std::vector<std::vector<int64_t>> per_rank;
  for (int r = 0; r < world; ++r) {
    kit::DataPartitioner partitioner(data, sizes, seed);
    ASSERT_EQ(partitioner.num_partitions(), world);
    const kit::Partition part = partitioner.use(r);
    ASSERT_EQ(part.size(), static_cast<int64_t>(part.index().size()));
    for (int64_t i = 0; i < part.size(); ++i)
      ASSERT_EQ(part.get(i).index, kIndexBase + part.index()[static_cast<size_t>(i)])
          << "Partition::get(" << i << ") must return data[index[" << i << "]]";
    per_rank.push_back(values_of(part));
  }
  EXPECT_EQ(check_disjoint(per_rank, n, n / world), "");
  std::set<int64_t> all;
  for (const auto& v : per_rank) all.insert(v.begin(), v.end());
  EXPECT_EQ(static_cast<int64_t>(all.size()), world * (n / world)) << "the union of the partitions";

  // Another rank's partitioner, built from another copy of the data: the same cut.
  kit::DataPartitioner other(fake(n), sizes, seed);
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(values_of(other.use(r)), per_rank[static_cast<size_t>(r)])
        << "two partitioners with the same data and seed " << seed << " disagree on partition " << r
        << ": seed the shuffle with `seed` only";
}

TEST(HiddenDataPartitioner, WorldSize3Of100Seed99) { expect_equal_shares(100, 3, 99); }
TEST(HiddenDataPartitioner, WorldSize4Of103Seed99) { expect_equal_shares(103, 4, 99); }
TEST(HiddenDataPartitioner, WorldSize5Of57Seed2024) { expect_equal_shares(57, 5, 2024); }

TEST(HiddenDataPartitioner, OrderDependsOnTheSeed) {
  const int64_t n = 61;
  const std::vector<double> sizes(3, 1.0 / 3);
  auto order = [&](uint64_t seed) {
    kit::DataPartitioner p(fake(n), sizes, seed);
    std::vector<int64_t> all;
    for (int64_t k = 0; k < p.num_partitions(); ++k) {
      const auto v = values_of(p.use(k));
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto a = order(7), b = order(2024);
  EXPECT_NE(a, b) << "seeds 7 and 2024 gave the same order: the seed must drive the shuffle";
  EXPECT_EQ(order(7), a) << "the same seed must give the same order";
  std::vector<int64_t> unshuffled;
  for (int64_t i = 0; i < 3 * (n / 3); ++i) unshuffled.push_back(kIndexBase + i);
  EXPECT_NE(a, unshuffled) << "the positions are not shuffled";
}

TEST(HiddenDataPartitioner, UnequalSizesCutFloorOfEachShare) {
  // {0.5, 0.3, 0.2} of 37: floor(18.5) = 18, floor(11.1) = 11, floor(7.4) = 7; one unused.
  kit::DataPartitioner p(fake(37), {0.5, 0.3, 0.2}, 99);
  ASSERT_EQ(p.num_partitions(), 3);
  EXPECT_EQ(p.use(0).size(), 18);
  EXPECT_EQ(p.use(1).size(), 11);
  EXPECT_EQ(p.use(2).size(), 7);
  std::set<int64_t> all;
  for (int64_t k = 0; k < 3; ++k) {
    const auto v = values_of(p.use(k));
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), 36u) << "partitions overlap";
}

// partition_dataset for every rank of `world`: batches of global_batch / world, the same
// number of batches on every rank, partition `rank` of the default-seeded partitioner.
void expect_rank_loaders(int64_t n, int world, int64_t global_batch) {
  auto data = fake(n);
  std::vector<std::vector<int64_t>> per_rank;
  int64_t batches = -1;
  for (int r = 0; r < world; ++r) {
    kit::DataLoader loader = kit::partition_dataset(r, world, data, global_batch, kit::collate);
    EXPECT_EQ(loader.batch_size(), global_batch / world) << "the per-rank batch is batch_size / world_size";
    if (batches < 0) batches = loader.num_batches();
    EXPECT_EQ(loader.num_batches(), batches)
        << "rank " << r << " has a different number of batches: its all-reduce would wait forever";
    std::vector<int64_t> seen;
    for (int64_t k = 0; k < loader.num_batches(); ++k) {
      const kit::Batch b = loader.batch(k);
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    }
    kit::DataPartitioner reference(data, std::vector<double>(static_cast<size_t>(world), 1.0 / world));
    EXPECT_EQ(seen, values_of(reference.use(r))) << "rank " << r << " does not serve DataPartitioner(...).use(rank)";
    per_rank.push_back(seen);
  }
  EXPECT_EQ(check_disjoint(per_rank, n, n / world), "");
}

TEST(HiddenPartitionDataset, WorldSize3Of100Batch6) { expect_rank_loaders(100, 3, 6); }
TEST(HiddenPartitionDataset, WorldSize4Of103Batch12) { expect_rank_loaders(103, 4, 12); }
TEST(HiddenPartitionDataset, WorldSize5Of57Batch10) { expect_rank_loaders(57, 5, 10); }

}  // namespace
