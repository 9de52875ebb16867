#include "pipeline/worker.h"

#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <map>

#include "kit/errors.h"

namespace kit {

Task::Task(Step step, std::function<torch::Tensor()> compute)
    : step_(step), compute_(std::move(compute)), grad_enabled_(torch::GradMode::is_enabled()) {}

torch::Tensor Task::compute() const {
  torch::AutoGradMode grad_mode(grad_enabled_);  // grad mode is per thread: apply the caller's
  return compute_();
}

torch::Tensor Result::get() const {
  if (error) std::rethrow_exception(error);
  return output;
}

namespace {

// The main loop of a worker thread: run tasks until told to stop. Every exception a task
// throws is caught and sent back, so the caller always gets exactly one Result per Task.
void worker_main(InQueue& in, OutQueue& out, StageDevice stage, int threads) {
  // With OpenMP (LibTorch's usual backend) the intra-op thread count is kept per thread,
  // and a new thread starts with OpenMP's default (every core) or with whatever count some
  // other thread set last, depending on the LibTorch version. Either way it is not the
  // count this stage was given: set it here. (n stages on all cores each would run
  // n * cores threads.) The native backend has one global count; an equal value is a no-op.
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
  // The current device is per thread too (it matters for CUDA stages only).
  c10::OptionalDeviceGuard device_guard;
  if (!stage.device.is_cpu()) device_guard.reset_device(stage.device);

  while (true) {
    std::optional<Task> task = in.get();
    if (!task) break;
    Result result;
    result.step = task->step();
    try {
      result.output = task->compute();
    } catch (...) {
      result.error = std::current_exception();
    }
    out.put(std::move(result));
  }
}

}  // namespace

Workers::Workers(const std::vector<StageDevice>& stages, int threads_per_worker)
    : threads_per_worker_(threads_per_worker) {
  if (threads_per_worker < 1)
    throw Error("each pipeline worker needs at least 1 intra-op thread (got " + std::to_string(threads_per_worker) +
                ")");
  std::map<int64_t, size_t> worker_of_index;
  std::vector<StageDevice> worker_stage;
  for (const auto& s : stages) {
    auto it = worker_of_index.find(s.index);
    if (it == worker_of_index.end()) {
      it = worker_of_index.emplace(s.index, worker_stage.size()).first;
      worker_stage.push_back(s);
    } else if (worker_stage[it->second].device != s.device) {
      throw Error("stage " + std::to_string(s.index) + " is placed on both " +
                  worker_stage[it->second].device.str() + " and " + s.device.str() +
                  ": give every stage index one device (or use different indices)");
    }
    worker_of_.push_back(it->second);
  }
  try {
    for (const auto& s : worker_stage) {
      channels_.push_back(std::make_unique<Channel>());
      Channel& ch = *channels_.back();
      threads_.emplace_back(worker_main, std::ref(ch.in), std::ref(ch.out), s, threads_per_worker);
    }
  } catch (...) {  // could not start a thread: stop the ones already running before giving up
    stop_and_join();
    throw;
  }
}

void Workers::stop_and_join() noexcept {
  for (size_t w = 0; w < threads_.size(); ++w) channels_[w]->in.put(std::nullopt);
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

Workers::~Workers() { stop_and_join(); }

InQueue& Workers::in_queue(size_t partition) { return channels_.at(worker_of_.at(partition))->in; }
OutQueue& Workers::out_queue(size_t partition) { return channels_.at(worker_of_.at(partition))->out; }

}  // namespace kit
