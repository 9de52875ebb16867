// Graded variants of tests/data_parallel/test_partition.cpp: the same properties
// (disjoint, equal shares of floor(n / world_size), the same permutation on every rank,
// batch size = global batch / world_size, an order that depends on the seed) for world
// sizes 3, 4 and 5, a seed other than the default, and dataset sizes that the world size
// does not divide (the public tests use powers of two that divide them).
// Partitions are compared by the examples' own index field, as in the public test. Each
// case's subject part records what the student's code served; the checks are the judge's.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data_parallel/dataset.h"
#include "data_parallel/partition_test_util.h"
#include "judge/judge.h"

namespace {

constexpr int64_t kIndexBase = 5000;  // example i carries index 5000 + i, so values differ from positions

namespace judge = kit::judge;
using partition_test::PartView;
using partition_test::record_partitions;
using partition_test::expect_cut;
using partition_test::values_of;
using partition_test::view_of;

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
  const auto counts = got.get<std::vector<int64_t>>("num_partitions");
  const auto parts = got.get<std::vector<PartView>>("parts");
  ASSERT_TRUE(got.ok());
  std::vector<std::vector<int64_t>> per_rank;
  for (size_t r = 0; r < counts.size(); ++r) {
    ASSERT_EQ(counts[r], world);
    ASSERT_LT(r, parts.size());
    const PartView& part = parts[r];
    ASSERT_EQ(part.size, static_cast<int64_t>(part.index.size()));
    ASSERT_EQ(part.values.size(), part.index.size());
    for (int64_t i = 0; i < part.size; ++i)
      ASSERT_EQ(part.values[static_cast<size_t>(i)], kIndexBase + part.index[static_cast<size_t>(i)])
          << "Partition::get(" << i << ") must return data[index[" << i << "]]";
    per_rank.push_back(part.values);
  }
  ASSERT_EQ(per_rank.size(), static_cast<size_t>(world));
  EXPECT_EQ(partition_test::check_disjoint(per_rank, n, n / world, kIndexBase), "");
  std::set<int64_t> all;
  for (const auto& v : per_rank) all.insert(v.begin(), v.end());
  EXPECT_EQ(static_cast<int64_t>(all.size()), world * (n / world)) << "the union of the partitions";

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

TEST(HiddenDataPartitioner, OrderDependsOnTheSeed) {
  const int64_t n = 61;
  const std::vector<double> sizes(3, 1.0 / 3);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    auto order = [&](uint64_t seed) {
      kit::DataPartitioner p(fake(n), sizes, seed);
      std::vector<int64_t> all;
      for (int64_t k = 0; k < p.num_partitions(); ++k) {
        const auto v = values_of(p.use(k));
        all.insert(all.end(), v.begin(), v.end());
      }
      return all;
    };
    out.put("7", order(7));
    out.put("2024", order(2024));
    out.put("7 again", order(7));
  });
  if (!judge::judging()) return;
  const auto a = got.get<std::vector<int64_t>>("7"), b = got.get<std::vector<int64_t>>("2024");
  ASSERT_TRUE(got.ok());
  EXPECT_NE(a, b) << "seeds 7 and 2024 gave the same order: the seed must drive the shuffle";
  EXPECT_EQ(got.get<std::vector<int64_t>>("7 again"), a) << "the same seed must give the same order";
  std::vector<int64_t> unshuffled;
  for (int64_t i = 0; i < 3 * (n / 3); ++i) unshuffled.push_back(kIndexBase + i);
  EXPECT_NE(a, unshuffled) << "the positions are not shuffled";
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

}  // namespace
