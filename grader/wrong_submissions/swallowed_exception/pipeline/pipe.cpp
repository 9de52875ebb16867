// Problem 2.1 clock_cycles and Problem 2.2 Pipe::forward, Pipe::compute
// (the original's pipeline/pipe.py).
#include "pipeline/pipe.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>

#include "kit/errors.h"

namespace kit {

// Problem 2.1. Micro-batch i reaches partition j at clock i + j, so clock k holds every
// (i, j) with i + j == k, 0 <= i < m and 0 <= j < n. List them by increasing j:
//   j from max(0, k - m + 1) to min(k, n - 1) (both ends included), i = k - j.
// The last micro-batch leaves the last partition at clock (m - 1) + (n - 1), so there are
// m + n - 1 clocks. Example m = 4, n = 3:
//   (0,0) | (1,0) (0,1) | (2,0) (1,1) (0,2) | (3,0) (2,1) (1,2) | (3,1) (2,2) | (3,2)
// Run ./build/schedule -m 4 -n 3 to print yours.
Schedule clock_cycles(int64_t num_microbatches, int64_t num_partitions) {
  if (num_microbatches < 1 || num_partitions < 1)
    throw Error("clock_cycles needs at least 1 micro-batch and 1 partition (got m = " +
                std::to_string(num_microbatches) + ", n = " + std::to_string(num_partitions) + ")");
  Schedule schedule;
  // BEGIN SOLUTION 2.1 clock_cycles
  const int64_t m = num_microbatches, n = num_partitions;
  for (int64_t k = 0; k < m + n - 1; ++k) {
    Clock clock;
    for (int64_t j = std::max<int64_t>(0, k - m + 1); j <= std::min<int64_t>(k, n - 1); ++j)
      clock.push_back({k - j, j});
    schedule.push_back(clock);
  }
  // END SOLUTION
  return schedule;
}

PipeImpl::PipeImpl(const torch::nn::Sequential& module, int64_t split_size, int64_t threads_per_stage)
    : split_size_(split_size) {
  if (split_size < 1)
    throw Error("Pipe split_size must be at least 1 row per micro-batch (got " + std::to_string(split_size) + ")");
  if (threads_per_stage < 0)
    throw Error("Pipe threads_per_stage must be >= 0 (0: as many as this thread uses), got " +
                std::to_string(threads_per_stage));
  Partitions split = split_module(module);
  if (split.partitions.empty() || split.partitions.size() != split.stages.size())
    throw Error("split_module returned " + std::to_string(split.partitions.size()) + " partitions and " +
                std::to_string(split.stages.size()) + " stages: it must return one stage per partition, at least one");
  partitions_ = split.partitions;
  devices_ = split.stages;
  for (size_t j = 0; j < partitions_.size(); ++j) register_module("partition_" + std::to_string(j), partitions_[j]);
  const int threads = threads_per_stage > 0 ? static_cast<int>(threads_per_stage) : at::get_num_threads();
  workers_ = std::make_shared<Workers>(devices_, threads);
}

// Problem 2.2.
//   1. Cut x into micro-batches of split_size_ rows along dim 0. Use x.split(split_size_, 0):
//      10 rows in 4s are 4, 4, 2. (x.chunk(k) is not the same: it makes k pieces of
//      ceil(B / k) rows and may make fewer pieces than you asked for.)
//   2. Make the schedule with clock_cycles(number of micro-batches, number of partitions).
//   3. Run it clock by clock with compute(); after the last clock batches[i] holds
//      micro-batch i's output of the last partition.
//   4. Concatenate the outputs in micro-batch order (torch::cat along dim 0).
torch::Tensor PipeImpl::forward(const torch::Tensor& x) {
  if (!x.defined() || x.dim() < 1 || x.size(0) < 1)
    throw Error("Pipe::forward needs a tensor with at least one row along dim 0 (the batch dimension)");
  // BEGIN SOLUTION 2.2 forward
  std::vector<torch::Tensor> batches = x.split(split_size_, /*dim=*/0);
  const Schedule schedule =
      clock_cycles(static_cast<int64_t>(batches.size()), static_cast<int64_t>(partitions_.size()));
  for (const Clock& clock : schedule) compute(batches, clock);
  return torch::cat(batches, /*dim=*/0);
  // END SOLUTION
}

// Problem 2.2. For every step (i, j) of the clock:
//   - make a Task(step, function) whose function runs partitions_[j] on batches[i] moved
//     to devices_[j].device (capture the partition and the input by value: the function
//     runs later, on another thread; the lambda must be `mutable` to call forward), and
//   - put it on workers_->in_queue(j).
// Only then collect one Result per step from workers_->out_queue(j) (all the steps of a
// clock must be in flight together, or nothing runs in parallel). A Result says which
// step it belongs to (result.step): store its output in batches[result.step.microbatch].
// If a Result carries an error (!result.ok()), keep collecting the other results, then
// re-throw the first error (std::rethrow_exception(result.error), or result.get()):
// leaving results in the queues would hand them to the next call.
void PipeImpl::compute(std::vector<torch::Tensor>& batches, const Clock& clock) {
  // BEGIN SOLUTION 2.2 compute
  for (const Step& step : clock) {
    torch::nn::Sequential partition = partitions_[static_cast<size_t>(step.partition)];
    const torch::Device device = devices_[static_cast<size_t>(step.partition)].device;
    torch::Tensor input = batches[static_cast<size_t>(step.microbatch)];
    workers_->in_queue(static_cast<size_t>(step.partition))
        .put(Task(step, [partition, device, input]() mutable { return partition->forward(input.to(device)); }));
  }
  std::exception_ptr first_error;
  for (const Step& step : clock) {
    Result result = workers_->out_queue(static_cast<size_t>(step.partition)).get();
    if (!result.ok()) {
      if (!first_error) first_error = result.error;
      continue;
    }
    batches[static_cast<size_t>(result.step.microbatch)] = result.output;
  }
  (void)first_error;  // wrong: the error never reaches the caller
  // END SOLUTION
}

}  // namespace kit
