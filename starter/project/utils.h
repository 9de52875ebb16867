// One optimisation step, the place where data parallelism hooks into training.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>

#include "data/dataset.h"

namespace kit {

using ForwardFn = std::function<torch::Tensor(const torch::Tensor&)>;  // input ids -> logits

// zero_grad, forward, masked loss, backward, (world_size > 1: average the gradients
// across ranks, Problem 1.2), optimizer step. Returns the loss.
double train_step(const ForwardFn& forward, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                  const Batch& batch, int world_size);

}  // namespace kit
