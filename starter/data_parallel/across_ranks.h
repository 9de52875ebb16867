// What run_data_parallel's ranks agree on and report together: a check that every rank takes
// the same number of steps, the validation loss over all ranks, the record of --save-grads
// (the tests' view of K steps), and the launcher's summary of the ranks' metrics files.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "project/loop.h"

namespace kit {

// Every rank must run the same number of steps, or one of them waits forever in an
// all-reduce the others never join. kit::Error (naming `what`) when the ranks' values differ.
void check_same_on_all_ranks(int64_t value, const std::string& what);

// Mean validation loss over all ranks' validation partitions (NaN when they are all empty).
double global_validation_loss(const ForwardFn& forward, torch::nn::Module& model, const DataLoader& valid);

// `steps` steps of `step` over `loader`'s first batches, recorded as the tests compare them:
// "grad/<name>" = the gradient after the first step, "param/<name>" = the parameters after the
// last, "indices" = (K, per-rank batch) example indices, "partition" = every example index of
// this rank's partition, "allreduce_bytes_step0" and "allreduce_calls_step0" = what the first
// step all-reduced, "rank", "world_size". kit::Error unless 1 <= steps <= the batches.
c10::Dict<std::string, torch::Tensor> record_steps(int64_t steps, int rank, int world_size, torch::nn::Module& model,
                                                   const DataLoader& loader, const StepFn& step);

// After a successful run, the Problem 1.3 numbers from the ranks' metrics files (rank r's at
// [r]): the first epoch dropped when there are more (warm-up), training time averaged over
// ranks, tokens/s summed over ranks. Prints nothing when a file is missing.
void print_world_summary(const std::vector<std::string>& rank_files);

}  // namespace kit
