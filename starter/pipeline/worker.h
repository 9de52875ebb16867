// Worker threads for the pipeline (the original's pipeline/worker.py, after torchgpipe).
//
// One worker thread per stage. The caller (Pipe::compute) puts a Task on a worker's
// in-queue; the worker runs it and puts a Result on its out-queue. A Result carries
// either the output tensor or the exception the task threw, so an error inside a
// stage travels back to the caller and is re-raised there: never swallowed, never a hang.
//
// Two settings that PyTorch users think of as global are per thread in LibTorch, and a
// fresh std::thread starts with the defaults, not with the caller's values:
//   - grad mode (torch::NoGradGuard): a Task records the caller's grad mode when it is
//     created and the worker applies it while running the task, so evaluation under
//     NoGradGuard builds no graph and training builds one that backward() can follow
//     back across the threads;
//   - the current device (for CUDA stages): each worker makes its stage's device current.
// And one more that matters on a CPU: OpenMP keeps the intra-op thread count per thread,
// so a new thread does not get the count the caller configured. Each worker sets the
// count it is given (threads_per_worker) itself.
#pragma once
#include <torch/types.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/schedule.h"
#include "pipeline/stage.h"

namespace kit {

// A blocking first-in first-out queue between threads.
template <typename T>
class Queue {
 public:
  void put(T item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(item));
    }
    ready_.notify_one();
  }
  T get() {  // waits until an item is there
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !items_.empty(); });
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> items_;
};

// How to compute one step (micro-batch i on partition j). Made on the caller's thread,
// run on a worker's thread.
class Task {
 public:
  Task(Step step, std::function<torch::Tensor()> compute);
  const Step& step() const { return step_; }
  bool grad_enabled() const { return grad_enabled_; }
  torch::Tensor compute() const;  // runs the function under the caller's grad mode

 private:
  Step step_;
  std::function<torch::Tensor()> compute_;
  bool grad_enabled_;  // the caller's grad mode when the task was made
};

// What a worker sends back for one Task.
struct Result {
  Step step;
  torch::Tensor output;      // the task's output, when it succeeded
  std::exception_ptr error;  // what the task threw, when it failed
  bool ok() const { return !error; }
  // The output, or the task's exception re-thrown here (on the caller's thread).
  torch::Tensor get() const;
};

using InQueue = Queue<std::optional<Task>>;  // std::nullopt tells the worker to stop
using OutQueue = Queue<Result>;

// The worker threads for a list of partitions: one thread per distinct stage index, so
// partitions that share a stage (A, B, A) share its worker, as they would share a GPU.
class Workers {
 public:
  // stages[j] is partition j's stage. threads_per_worker >= 1 is each worker's intra-op
  // thread count. Throws kit::Error when one stage index comes with two different devices.
  Workers(const std::vector<StageDevice>& stages, int threads_per_worker);
  ~Workers();  // stops every worker (after the tasks already queued) and joins it
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  InQueue& in_queue(size_t partition);    // where partition j's tasks go
  OutQueue& out_queue(size_t partition);  // where partition j's results come from
  size_t num_partitions() const { return worker_of_.size(); }
  size_t num_workers() const { return threads_.size(); }
  int threads_per_worker() const { return threads_per_worker_; }

 private:
  struct Channel {
    InQueue in;
    OutQueue out;
  };
  void stop_and_join() noexcept;

  std::vector<std::unique_ptr<Channel>> channels_;  // one per worker
  std::vector<std::thread> threads_;
  std::vector<size_t> worker_of_;  // partition -> worker
  int threads_per_worker_;
};

}  // namespace kit
