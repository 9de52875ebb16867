// Problem 4.2: the column- and row-parallel linear layers (see layers.h). The
// constructors and load_full are given; the forwards are yours.
#include <torch/torch.h>

#include "kit/errors.h"
#include "tensor_parallel/layers.h"
#include "tensor_parallel/mappings.h"

namespace kit::tp {
namespace F = torch::nn::functional;

int64_t shard_size(int64_t size, int64_t t, const std::string& what) {
  if (t < 1) throw Error("tensor-parallel size must be at least 1 (got " + std::to_string(t) + ")");
  if (size % t != 0)
    throw Error(what + " (" + std::to_string(size) + ") is not divisible by the tensor-parallel size t = " +
                std::to_string(t) + ": every rank must hold an equal share. Choose t among the divisors of " +
                std::to_string(size) + ", or change " + what);
  return size / t;
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, dist::Group g, bool with_bias,
                                                   bool gather)
    : in_features(in), out_features(out), gather_output(gather), group(std::move(g)) {
  const int64_t part = shard_size(out, group.size(), "the output features of a column-parallel layer");
  // Filled by load_full (or the model's initialisation); zeros until then.
  weight = register_parameter("weight", torch::zeros({part, in}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({part}));
}

void ColumnParallelLinearImpl::load_full(const torch::Tensor& w, const torch::Tensor& b) {
  torch::NoGradGuard no_grad;
  const int64_t part = weight.size(0), r = group.rank();
  weight.copy_(w.narrow(0, r * part, part));
  if (bias.defined()) bias.copy_(b.narrow(0, r * part, part));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  // BEGIN SOLUTION 4.2 ColumnParallelLinear::forward
  // f: x is whole here, but only this rank's columns see it: backward sums dL/dx over ranks.
  torch::Tensor y = F::linear(copy_to_tensor_parallel(x, group), weight, bias);
  return gather_output ? gather_from_tensor_parallel(y, group) : y;
  // END SOLUTION
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, dist::Group g, bool with_bias)
    : in_features(in), out_features(out), group(std::move(g)) {
  const int64_t part = shard_size(in, group.size(), "the input features of a row-parallel layer");
  weight = register_parameter("weight", torch::zeros({out, part}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

void RowParallelLinearImpl::load_full(const torch::Tensor& w, const torch::Tensor& b) {
  torch::NoGradGuard no_grad;
  const int64_t part = weight.size(1), r = group.rank();
  weight.copy_(w.narrow(1, r * part, part));
  if (bias.defined()) bias.copy_(b);
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  // BEGIN SOLUTION 4.2 RowParallelLinear::forward
  // Each rank's product is a partial sum over its slice of the input features: g adds them,
  // then the bias goes on once.
  torch::Tensor y = reduce_from_tensor_parallel(F::linear(x, weight), group);
  return bias.defined() ? y + bias : y;
  // END SOLUTION
}

}  // namespace kit::tp
