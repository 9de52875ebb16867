// Problem 6.3: activation recomputation (see recompute.h): a custom autograd function that
// keeps only a block's input and runs the block again in the backward.
#include <torch/torch.h>

#include <ATen/Context.h>

#include <mutex>
#include <utility>

#include "kit/errors.h"
#include "pipeline_training/recompute.h"

namespace kit::pp {
namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward needs besides the input, kept in the context's saved_data as an IValue
// capsule (c10::IValue::make_capsule; back with .toCapsule() and
// c10::static_intrusive_pointer_cast<Saved>): the block, and the generators' states.
struct Saved : torch::CustomClassHolder {
  BlockFn block;
  GeneratorStates rng;  // save_generators(x.device()) in the forward
};

struct RecomputeFunction : torch::autograd::Function<RecomputeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const BlockFn& block, const torch::Tensor& x) {
    // TODO(Problem 6.3 RecomputeFunction::forward): your code here.
    throw kit::NotImplemented("Problem 6.3 RecomputeFunction::forward");
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // TODO(Problem 6.3 RecomputeFunction::backward): your code here.
    throw kit::NotImplemented("Problem 6.3 RecomputeFunction::backward");
  }
};

}  // namespace

torch::Tensor recompute(const BlockFn& block, const torch::Tensor& x) {
  // TODO(Problem 6.3 recompute): your code here.
  throw kit::NotImplemented("Problem 6.3 recompute");
}

}  // namespace kit::pp
