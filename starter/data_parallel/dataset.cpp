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
  // TODO(Problem 1.1 Partition): your code here.
  throw kit::NotImplemented("Problem 1.1 Partition");
}

int64_t Partition::size() const {
  // TODO(Problem 1.1 Partition::size): your code here.
  throw kit::NotImplemented("Problem 1.1 Partition::size");
}

// Item i of the partition is item index_[i] of the underlying data.
const Example& Partition::get(int64_t i) const {
  // TODO(Problem 1.1 Partition::get): your code here.
  throw kit::NotImplemented("Problem 1.1 Partition::get");
}

// Hints:
//  1. Check the sizes first: none negative, sum at most 1 (throw kit::Error otherwise).
//  2. The positions 0, 1, ..., n-1 (std::iota), shuffled by a generator seeded with `seed`:
//     SplitMix64 rng(seed); shuffle_in_place(positions, rng);   (data/splitmix64.h)
//     Every rank runs this same code with the same seed, so every rank gets the same order.
//  3. Cut consecutive slices of floor(size * n) positions into partitions_.
DataPartitioner::DataPartitioner(std::shared_ptr<const ExampleSource> data, std::vector<double> sizes,
                                 uint64_t seed) {
  // TODO(Problem 1.1 DataPartitioner): your code here.
  throw kit::NotImplemented("Problem 1.1 DataPartitioner");
}

Partition DataPartitioner::use(int64_t k) const {
  // TODO(Problem 1.1 DataPartitioner::use): your code here.
  throw kit::NotImplemented("Problem 1.1 DataPartitioner::use");
}

// Hints:
//  1. The per-rank batch: batch_size / world_size (reject a batch_size that does not divide).
//  2. A DataPartitioner with world_size equal sizes; this rank uses partition `rank`.
//  3. A DataLoader over that partition (it needs a std::shared_ptr) with collate_fn.
DataLoader partition_dataset(int rank, int world_size, std::shared_ptr<const ExampleSource> dataset,
                             int64_t batch_size, Collate collate_fn) {
  // TODO(Problem 1.1 partition_dataset): your code here.
  throw kit::NotImplemented("Problem 1.1 partition_dataset");
}

}  // namespace kit
