// Problem 4.1: f and g as LibTorch autograd functions (see mappings.h for the picture).
//
// A torch::autograd::Function has a static forward(ctx, inputs...) and a static
// backward(ctx, grad_outputs) that returns one gradient per forward input (an undefined
// tensor for an input that is not a tensor, such as the group). Keep the group for
// backward with save_group(ctx, group) and read it back with saved_group(ctx).
#include <torch/torch.h>

#include "kit/errors.h"
#include "tensor_parallel/mappings.h"

namespace kit::tp {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// f: identity forward, all-reduce backward.
struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const dist::Group& group) {
    // BEGIN SOLUTION 4.1 copy_to_tensor_parallel_forward
    save_group(ctx, group);
    return x.view_as(x);  // the same values; autograd gives the output its own node
    // END SOLUTION
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // BEGIN SOLUTION 4.1 copy_to_tensor_parallel_backward
    // Each rank holds only its own columns' contribution to dL/dx: the sum is the gradient.
    torch::Tensor g = grads[0].contiguous().clone();
    dist::all_reduce(g, dist::ReduceOp::SUM, saved_group(ctx));
    return {g, torch::Tensor()};
    // END SOLUTION
  }
};

// g: all-reduce forward, identity backward.
struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const dist::Group& group) {
    // BEGIN SOLUTION 4.1 reduce_from_tensor_parallel_forward
    torch::Tensor sum = x.contiguous().clone();  // never reduce the caller's tensor in place
    dist::all_reduce(sum, dist::ReduceOp::SUM, group);
    return sum;
    // END SOLUTION
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // BEGIN SOLUTION 4.1 reduce_from_tensor_parallel_backward
    // The summed output went on identically on every rank: its gradient is already whole.
    return {grads[0], torch::Tensor()};
    // END SOLUTION
  }
};

torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, const dist::Group& group) {
  return CopyToTensorParallel::apply(x, group);
}

torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, const dist::Group& group) {
  return ReduceFromTensorParallel::apply(x, group);
}

}  // namespace kit::tp
