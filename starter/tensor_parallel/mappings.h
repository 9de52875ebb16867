// Problem 4.1: the two conjugate operators of Megatron-LM's tensor parallelism.
//
// A tensor-parallel layer pair (column-parallel, then row-parallel) sits between f and g:
//
//        X ──f──> [ X·A_r  (column r of A, on rank r) ] ──> [ Y_r·B_r  (rows r of B) ] ──g──> Z
//
//   f  forward: identity       (every rank already holds the whole X)
//      backward: all-reduce    (each rank has only its columns' share of dL/dX: sum them)
//   g  forward: all-reduce     (each rank has a partial sum of Z: add them)
//      backward: identity      (dL/dZ is the same on every rank)
//
// So a transformer block needs two all-reduces forward (g after attention, g after the
// MLP) and two backward (f before each). `group` is the tensor-parallel group (dist.h).
#pragma once
#include <torch/types.h>

#include "dist/dist.h"

namespace torch::autograd {
struct AutogradContext;
}

namespace kit::tp {

// f: identity forward, all-reduce (SUM over `group`) of the gradient backward.
torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, const dist::Group& group);

// g: all-reduce (SUM over `group`) forward, identity backward.
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, const dist::Group& group);

// Given: the all-gather a column-parallel layer uses when its full output is wanted.
// forward: every rank's x concatenated along the last dimension, in group-rank order;
// backward: this rank's slice of the gradient.
torch::Tensor gather_from_tensor_parallel(const torch::Tensor& x, const dist::Group& group);

// Given: an autograd context holds IValues only, so the group a backward needs is kept
// through these (a Function's forward saves it, its backward reads it back).
void save_group(torch::autograd::AutogradContext* ctx, const dist::Group& group);
dist::Group saved_group(torch::autograd::AutogradContext* ctx);

}  // namespace kit::tp
