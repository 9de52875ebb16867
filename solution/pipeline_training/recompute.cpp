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
    // BEGIN SOLUTION 6.3 RecomputeFunction::forward
    auto saved = c10::make_intrusive<Saved>();
    saved->block = block;
    saved->rng = save_generators(x.device());  // the states the block's dropout starts from
    ctx->saved_data["saved"] = c10::IValue::make_capsule(saved);
    ctx->saved_data["x"] = x.detach();  // the same storage: nothing new is kept
    torch::NoGradGuard no_grad;         // no graph: the block's activations die here
    return block(x);
    // END SOLUTION
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // BEGIN SOLUTION 6.3 RecomputeFunction::backward
    auto saved = c10::static_intrusive_pointer_cast<Saved>(ctx->saved_data["saved"].toCapsule());
    const torch::Tensor input = ctx->saved_data["x"].toTensor().detach().requires_grad_(true);
    // Swap the forward's generator states in, and the current ones back afterwards.
    const GeneratorStates now = save_generators(saved->rng.device);
    restore_generators(saved->rng);
    torch::Tensor output;
    {
      torch::AutoGradMode enable_grad(true);  // the engine runs backward with gradients off
      output = saved->block(input);
    }
    restore_generators(now);
    torch::autograd::backward({output}, {grads[0]});  // the parameters' gradients accumulate
    return {torch::Tensor(), input.grad()};           // none for the block, x's for x
    // END SOLUTION
  }
};

}  // namespace

torch::Tensor recompute(const BlockFn& block, const torch::Tensor& x) {
  // BEGIN SOLUTION 6.3 recompute
  return RecomputeFunction::apply(block, x);
  // END SOLUTION
}

}  // namespace kit::pp
