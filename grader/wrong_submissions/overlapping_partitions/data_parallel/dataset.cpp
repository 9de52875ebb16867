// Problem 1.1: Partition, DataPartitioner, partition_dataset (see data_parallel/dataset.h).
#include "data_parallel/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "data/splitmix64.h"
#include "kit/errors.h"

namespace kit {

// Keep the data and the list of positions; nothing is copied.
Partition::Partition(std::shared_ptr<const ExampleSource> data, std::vector<int64_t> index) {
  // BEGIN SOLUTION 1.1 Partition
  if (!data) throw Error("Partition: no data (null pointer)");
  data_ = std::move(data);
  index_ = std::move(index);
  // END SOLUTION
}

int64_t Partition::size() const {
  // BEGIN SOLUTION 1.1 Partition::size
  return static_cast<int64_t>(index_.size());
  // END SOLUTION
}

// Item i of the partition is item index_[i] of the underlying data.
const Example& Partition::get(int64_t i) const {
  // BEGIN SOLUTION 1.1 Partition::get
  if (i < 0 || i >= size())
    throw Error("Partition: item " + std::to_string(i) + " out of range [0, " + std::to_string(size()) + ")");
  return data_->get(index_[static_cast<size_t>(i)]);
  // END SOLUTION
}

// Hints:
//  1. Check the sizes first: none negative, sum at most 1 (throw kit::Error otherwise).
//  2. The positions 0, 1, ..., n-1 (std::iota), shuffled by a generator seeded with `seed`:
//     SplitMix64 rng(seed); shuffle_in_place(positions, rng);   (data/splitmix64.h)
//     Every rank runs this same code with the same seed, so every rank gets the same order.
//  3. Cut consecutive slices of floor(size * n) positions into partitions_.
DataPartitioner::DataPartitioner(std::shared_ptr<const ExampleSource> data, std::vector<double> sizes,
                                 uint64_t seed) {
  // BEGIN SOLUTION 1.1 DataPartitioner
  if (!data) throw Error("DataPartitioner: no data (null pointer)");
  double total = 0;
  for (double s : sizes) {
    if (!(s >= 0)) throw Error("DataPartitioner: partition size " + std::to_string(s) + " is negative");
    total += s;
  }
  if (total > 1 + 1e-9)
    throw Error("DataPartitioner: the partition sizes add up to " + std::to_string(total) +
                " > 1; they are fractions of the dataset, e.g. {0.5, 0.5}");
  data_ = std::move(data);
  const int64_t n = data_->size();
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), int64_t{0});
  SplitMix64 rng(seed);
  shuffle_in_place(positions, rng);
  size_t begin = 0;
  for (double s : sizes) {
    // The 1e-9 makes e.g. 0.29 * 100 (= 28.999...) count as 29.
    const auto len = std::min(static_cast<size_t>(std::floor(s * static_cast<double>(n) + 1e-9)),
                              positions.size() - begin);
    const size_t from = begin >= len / 2 ? begin - len / 2 : 0;  // wrong: overlaps the previous slice
    partitions_.emplace_back(positions.begin() + from, positions.begin() + from + len);
    begin += len;
  }
  // END SOLUTION
}

Partition DataPartitioner::use(int64_t k) const {
  // BEGIN SOLUTION 1.1 DataPartitioner::use
  if (k < 0 || k >= num_partitions())
    throw Error("DataPartitioner: no partition " + std::to_string(k) + " (there are " +
                std::to_string(num_partitions()) + ")");
  return Partition(data_, partitions_[static_cast<size_t>(k)]);
  // END SOLUTION
}

// Hints:
//  1. The per-rank batch: batch_size / world_size (reject a batch_size that does not divide).
//  2. A DataPartitioner with world_size equal sizes; this rank uses partition `rank`.
//  3. A DataLoader over that partition (it needs a std::shared_ptr) with collate_fn.
DataLoader partition_dataset(int rank, int world_size, std::shared_ptr<const ExampleSource> dataset,
                             int64_t batch_size, Collate collate_fn) {
  // BEGIN SOLUTION 1.1 partition_dataset
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw Error("partition_dataset: rank " + std::to_string(rank) + " is not in 0.." + std::to_string(world_size - 1));
  if (batch_size <= 0 || batch_size % world_size != 0)
    throw Error("--batch-size " + std::to_string(batch_size) + " is not a positive multiple of the world size " +
                std::to_string(world_size) + ": every rank must get an equal share of the global batch");
  const int64_t per_rank_batch = batch_size / world_size;
  DataPartitioner partitioner(std::move(dataset), std::vector<double>(world_size, 1.0 / world_size));
  auto part = std::make_shared<Partition>(partitioner.use(rank));
  return DataLoader(part, per_rank_batch, std::move(collate_fn));
  // END SOLUTION
}

}  // namespace kit
