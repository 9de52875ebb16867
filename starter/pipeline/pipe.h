// Problem 2.1 (clock_cycles) and 2.2 (Pipe): GPipe-style pipeline parallelism.
//
// Pipe wraps a torch::nn::Sequential whose layers are placed on stages (WithDevice).
// forward(x) cuts x along dim 0 into micro-batches of split_size rows, then runs the
// clock-cycle schedule: at clock k, micro-batch i runs on partition j for every (i,j)
// of clock k, all of them at the same time, each on its stage's worker thread. The
// micro-batches' outputs are concatenated back on the last stage.
//
// Backward needs nothing special: the workers record the autograd graph (grad mode is
// applied per task, see worker.h), and loss.backward() on the caller follows it back
// through every stage. Only the forward pass is pipelined (as in the original).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <vector>

#include "pipeline/partition.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"
#include "pipeline/worker.h"

namespace kit {

// Problem 2.1. The schedule for m micro-batches on n partitions: m + n - 1 clocks;
// clock k holds (k - j, j) for j from max(0, k - m + 1) to min(k, n - 1), in that order.
// Throws kit::Error unless m >= 1 and n >= 1.
Schedule clock_cycles(int64_t num_microbatches, int64_t num_partitions);

class PipeImpl : public torch::nn::Module {
 public:
  // Splits `module` into partitions (split_module) and starts one worker per stage.
  // split_size: rows per micro-batch (>= 1). threads_per_stage: each worker's intra-op
  // threads; 0 takes the constructing thread's at::get_num_threads().
  explicit PipeImpl(const torch::nn::Sequential& module, int64_t split_size = 1, int64_t threads_per_stage = 0);

  // Problem 2.2. x: (B, ...) with B >= 1. Returns the module's output for x, on the last stage.
  torch::Tensor forward(const torch::Tensor& x);

  // Problem 2.2. Runs one clock: every step (i,j) of `clock` at once, each on partition j's
  // worker, with input batches[i]; then stores each output back in batches[i].
  // Re-throws (on this thread) the first error a step raised, after all steps have finished.
  void compute(std::vector<torch::Tensor>& batches, const Clock& clock);

  int64_t split_size() const { return split_size_; }
  const std::vector<torch::nn::Sequential>& partitions() const { return partitions_; }
  const std::vector<StageDevice>& devices() const { return devices_; }  // partition j's stage
  const Workers& workers() const { return *workers_; }

 private:
  int64_t split_size_;
  std::vector<torch::nn::Sequential> partitions_;
  std::vector<StageDevice> devices_;
  std::shared_ptr<Workers> workers_;
};
TORCH_MODULE(Pipe);

}  // namespace kit
