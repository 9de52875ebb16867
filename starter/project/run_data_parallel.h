// Problem 1.2: process-group setup, worker launch, gradient averaging.
//
// Use only the kit's dist layer (dist/dist.h, the C++ torch.distributed) and its process
// launcher (dist/launch.h, the C++ multiprocessing.Process), as the original allows only
// torch.distributed and torch.multiprocessing.Process.
#pragma once
#include <torch/nn/module.h>

#include <string>

#include "dist/launch.h"

namespace kit {

// Joins this process to the process group as `rank` of `world_size` with `backend`
// ("gloo" or "nccl"). The launcher has put the rendezvous address and port into
// MASTER_ADDR and MASTER_PORT.
void setup(int rank, int world_size, const std::string& backend);

// Starts world_size workers (this program again, one Process per rank, meeting at
// `rdzv`), waits for all of them, and throws kit::Error naming the rank when one fails.
void launch_workers(int world_size, const Rendezvous& rdzv);

// All-reduce every parameter's gradient across the ranks and divide by the world size,
// so that every rank holds the average. Call it between backward() and optimizer.step().
void average_gradients(torch::nn::Module& model);

}  // namespace kit
