// Problem 1.1: splitting the training set between the ranks of a data-parallel run.
//
// Every rank builds the same DataPartitioner from the same seed, so every rank computes
// the same shuffled order and the slices it cuts are disjoint without any communication.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"

namespace kit {

// A view of `data` through a list of positions: item i is data[index[i]].
// (The examples themselves are not copied.) kit::Error when data is null.
class Partition : public ExampleSource {
 public:
  Partition(std::shared_ptr<const ExampleSource> data, std::vector<int64_t> index);
  int64_t size() const override;
  const Example& get(int64_t i) const override;  // kit::Error when i is out of range

  const std::vector<int64_t>& index() const { return index_; }

 private:
  std::shared_ptr<const ExampleSource> data_;
  std::vector<int64_t> index_;
};

// Shuffles the positions 0..n-1 of `data` with a generator seeded by `seed` and cuts them
// into consecutive slices of floor(sizes[k] * n) positions, k = 0, 1, ...; the positions
// left over are not used. kit::Error when a size is negative or the sizes add up to more
// than 1.
class DataPartitioner {
 public:
  explicit DataPartitioner(std::shared_ptr<const ExampleSource> data, std::vector<double> sizes = {0.7, 0.2, 0.1},
                           uint64_t seed = 1234);
  // Partition k. kit::Error when there is no partition k.
  Partition use(int64_t k) const;

  int64_t num_partitions() const { return static_cast<int64_t>(partitions_.size()); }
  const std::vector<std::vector<int64_t>>& partitions() const { return partitions_; }

 private:
  std::shared_ptr<const ExampleSource> data_;
  std::vector<std::vector<int64_t>> partitions_;
};

// This rank's share of `dataset`: partition `rank` of a DataPartitioner with world_size
// equal sizes 1/world_size (default seed), served in batches of batch_size / world_size
// (batch_size is the global batch). Equal sizes give every rank the same number of
// batches, so no rank waits forever for a gradient another rank never sends.
// kit::Error when world_size is less than 1, batch_size is not a positive multiple of
// world_size, or rank is not in 0..world_size-1.
DataLoader partition_dataset(int rank, int world_size, std::shared_ptr<const ExampleSource> dataset,
                             int64_t batch_size, Collate collate_fn = collate);

}  // namespace kit
