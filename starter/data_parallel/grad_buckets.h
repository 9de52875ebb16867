// Overlapping the gradient all-reduce with backward, as PyTorch's DistributedDataParallel
// does. Given code: not part of the assignment, a faster replacement for
// average_gradients (Problem 1.2) that the benchmarks compare with it.
//
// average_gradients waits until backward() has finished and then all-reduces one
// parameter after another, so the communication adds to the step time. But backward
// produces gradients from the last layer to the first: the last layers' gradients are
// final long before the first layers' exist. GradBuckets groups the parameters, in the
// order their gradients appear (reverse registration order), into buckets of about
// bucket_bytes. A hook on every parameter copies its gradient into its bucket's flat
// buffer; once a bucket is complete (and every bucket before it has started, so that all
// ranks issue the all-reduces in one order) its all-reduce starts, asynchronously, while
// backward goes on with earlier layers. finish() waits for what is still running and
// writes the averaged gradients into .grad.
//
//   kit::GradBuckets buckets(*model, 1 << 20);   // after the model is built, once
//   loss.backward();                              // hooks start bucket all-reduces
//   buckets.finish();                             // instead of average_gradients(*model)
//   optimizer.step();
//
// Every rank must build the same buckets (same model, same bucket_bytes). Large buckets
// mean few all-reduce calls but little overlap; tiny ones mean many small calls.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "dist/dist.h"
#include "project/utils.h"  // ForwardFn

namespace kit {

class GradBuckets {
 public:
  // Registers a gradient hook on every parameter of `model` (which must outlive this
  // object). bucket_bytes > 0; a parameter larger than it gets a bucket of its own.
  GradBuckets(torch::nn::Module& model, int64_t bucket_bytes);
  ~GradBuckets();  // removes the hooks
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Call after backward(), before optimizer.step(): starts the buckets whose gradients
  // did not all arrive (an unused parameter contributes zeros), waits for every bucket,
  // divides by the world size and writes each parameter's .grad.
  void finish();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Seconds the last finish() spent waiting for all-reduces: the communication that
  // backward did not hide.
  double last_wait_s() const { return last_wait_s_; }

 private:
  struct Slot {
    torch::Tensor param;
    int64_t bucket = 0;
    int64_t offset = 0;  // in elements, within the bucket's buffer
    bool arrived = false;
    unsigned hook = 0;
  };
  struct Bucket {
    torch::Tensor flat;  // the bucket's gradients, back to back
    std::vector<int64_t> slots;
    int64_t waiting = 0;  // gradients not yet arrived this step
    dist::Work work;
  };
  void on_gradient(int64_t slot, const torch::Tensor& grad);
  void start_ready_buckets();

  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // the first bucket not yet started
  double last_wait_s_ = 0;
};

// train_step's order with the buckets where average_gradients would be: zero_grad,
// forward, masked loss, backward, buckets.finish(), optimizer step. Returns the loss.
double bucketed_train_step(const ForwardFn& forward, torch::optim::Optimizer& optimizer, GradBuckets& buckets,
                           const Batch& batch);

}  // namespace kit
