// Problem 5.1: collectives built from point-to-point messages around a ring.
//
// n ranks stand in a ring (rank r sends to r+1 and receives from r-1, mod n) and a tensor
// of N elements is cut into n chunks (chunk_range). Each step every rank sends one chunk to
// its right neighbour while it receives one from its left:
//
//   reduce-scatter  n-1 steps; in step s rank r sends chunk (r-s-1) mod n and adds the chunk
//                   (r-s-2) mod n it receives into its own copy. After the last step chunk r
//                   holds the sum over all ranks on rank r (the other chunks: partial sums).
//   all-gather      n-1 steps; rank r starts with chunk r correct; in step s it sends chunk
//                   (r-s) mod n and stores the chunk (r-s-1) mod n it receives.
//   all-reduce      reduce-scatter, then all-gather.
//
// Every rank sends n-1 chunks in each half, so an all-reduce sends 2(n-1)/n of the tensor
// per rank whatever n is: the reason NCCL and Gloo use rings for large tensors. (Exactly:
// reduce-scatter sends every chunk but chunk r, all-gather every chunk but chunk r+1.)
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "dist/dist.h"

namespace kit::ring {

// Chunk i of N elements cut into n chunks: c = ceil(N/n) elements each, the last ones
// shorter (or empty when N < n): [min(i*c, N), min((i+1)*c, N)).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range chunk_range(int64_t numel, int64_t n, int64_t i);

// Given: one step of a ring. Sends `out` to the group's rank (r+1) mod n while receiving
// `in` from rank (r-1) mod n (both started at once, so neither waits for the other; an
// empty tensor is neither sent nor received: both neighbours know the chunk sizes).
void exchange_with_neighbours(const torch::Tensor& out, const torch::Tensor& in, const dist::Group& group);

// The three collectives on a contiguous tensor of any shape (flattened), in place, over
// `group`. SUM for the reductions. For n = 1 they do nothing.
void ring_reduce_scatter(const torch::Tensor& tensor, const dist::Group& group);
void ring_all_gather(const torch::Tensor& tensor, const dist::Group& group);
void ring_all_reduce(const torch::Tensor& tensor, const dist::Group& group);

}  // namespace kit::ring
