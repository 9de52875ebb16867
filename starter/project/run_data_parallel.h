// Problem 1.2: process-group setup, worker launch, gradient averaging.
#pragma once
#include <torch/nn/module.h>

namespace kit {

// All-reduce every parameter's gradient across the ranks and divide by the world size,
// so that every rank holds the average. Call it between backward() and optimizer.step().
void average_gradients(torch::nn::Module& model);

}  // namespace kit
