// Problem 4.2: Megatron-LM's two parallel linear layers, y = x A^T + b with A (out, in) as
// torch::nn::Linear stores it, split across the t ranks of a tensor-parallel group.
//
//   ColumnParallelLinear: A split by output features (rows of A): rank r holds
//     A[r*out/t : (r+1)*out/t, :] and the same slice of b, and computes its slice of y from
//     the whole x. Its input goes through f (copy_to_tensor_parallel), whose backward sums
//     the ranks' shares of dL/dx. With gather_output the slices are all-gathered into the
//     whole y; without (the usual case), the next layer consumes the slice.
//   RowParallelLinear: A split by input features (columns of A): rank r holds
//     A[:, r*in/t : (r+1)*in/t] and takes the matching slice of x (a column-parallel
//     layer's output), so each rank has a partial sum of x A^T. g
//     (reduce_from_tensor_parallel) adds them; then b, which every rank holds whole, is
//     added once (adding it before the all-reduce would add it t times).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dist/dist.h"

namespace kit::tp {

// A size that the tensor-parallel size must divide: kit::Error naming `what` otherwise.
int64_t shard_size(int64_t size, int64_t t, const std::string& what);

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, dist::Group group, bool bias = true,
                           bool gather_output = false);
  // x (..., in) whole on every rank -> (..., out/t), or (..., out) with gather_output.
  torch::Tensor forward(const torch::Tensor& x);
  // Copies this rank's rows of a whole layer's weight (out, in) and bias (out).
  void load_full(const torch::Tensor& weight, const torch::Tensor& bias);

  torch::Tensor weight, bias;  // (out/t, in), (out/t) or undefined
  int64_t in_features, out_features;
  bool gather_output;
  dist::Group group;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, dist::Group group, bool bias = true);
  // x (..., in/t): this rank's slice of the input -> (..., out), whole on every rank.
  torch::Tensor forward(const torch::Tensor& x);
  // Copies this rank's columns of a whole layer's weight (out, in), and the whole bias.
  void load_full(const torch::Tensor& weight, const torch::Tensor& bias);

  torch::Tensor weight, bias;  // (out, in/t), (out) or undefined
  int64_t in_features, out_features;
  dist::Group group;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace kit::tp
