#include "data_parallel/grad_buckets.h"

#include <torch/torch.h>

#include <chrono>
#include <string>

#include "kit/errors.h"
#include "train/loss.h"

namespace kit {

GradBuckets::GradBuckets(torch::nn::Module& model, int64_t bucket_bytes) {
  if (bucket_bytes <= 0)
    throw Error("GradBuckets: the bucket size must be positive (got " + std::to_string(bucket_bytes) + " bytes)");
  const auto params = model.parameters();  // the tied wte/lm_head weight appears once
  // Gradients appear roughly in reverse registration order (last layer first), so the
  // buckets are filled in that order and the first bucket completes first.
  int64_t bytes_in_bucket = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const torch::Tensor& p = *it;
    if (!p.requires_grad()) continue;
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    if (buckets_.empty() || (bytes_in_bucket > 0 && bytes_in_bucket + bytes > bucket_bytes)) {
      buckets_.emplace_back();
      bytes_in_bucket = 0;
    }
    Bucket& b = buckets_.back();
    Slot s;
    s.param = p;
    s.bucket = static_cast<int64_t>(buckets_.size()) - 1;
    s.offset = b.slots.empty() ? 0 : slots_[b.slots.back()].offset + slots_[b.slots.back()].param.numel();
    b.slots.push_back(static_cast<int64_t>(slots_.size()));
    slots_.push_back(s);
    bytes_in_bucket += bytes;
  }
  for (auto& b : buckets_) {
    const Slot& last = slots_[b.slots.back()];
    b.flat = torch::zeros({last.offset + last.param.numel()}, last.param.options().requires_grad(false));
    b.waiting = static_cast<int64_t>(b.slots.size());
  }
  // The hook sees the gradient the parameter is about to receive. For a leaf used twice
  // (the tied weight) autograd sums both uses first, so the hook runs once per backward.
  for (size_t i = 0; i < slots_.size(); ++i)
    slots_[i].hook = slots_[i].param.register_hook(
        [this, i](const torch::Tensor& grad) { on_gradient(static_cast<int64_t>(i), grad); });
}

GradBuckets::~GradBuckets() {
  for (auto& s : slots_) {
    try {
      s.param.remove_hook(s.hook);
    } catch (const std::exception&) {
      // The parameter's autograd state is already gone: nothing to remove.
    }
  }
  // An all-reduce still running writes into our buffers: let it finish first.
  for (auto& b : buckets_) {
    if (!b.work.started()) continue;
    try {
      b.work.wait();
    } catch (const std::exception&) {
    }
  }
}

void GradBuckets::on_gradient(int64_t slot, const torch::Tensor& grad) {
  Slot& s = slots_[slot];
  if (s.arrived)
    throw Error("GradBuckets: the gradient of a parameter arrived twice in one step; call finish() after "
                "every backward() (gradient accumulation over several backward passes is not supported)");
  s.arrived = true;
  Bucket& b = buckets_[s.bucket];
  {
    torch::NoGradGuard no_grad;
    b.flat.narrow(0, s.offset, s.param.numel()).copy_(grad.reshape({-1}));
  }
  if (--b.waiting == 0) start_ready_buckets();
}

// Collectives are matched by the order in which the ranks issue them, and the order in
// which autograd finishes gradients is not guaranteed to be the same on every rank (nor
// the buckets' order). So buckets start strictly in bucket order: a complete bucket waits
// until every bucket before it has started.
void GradBuckets::start_ready_buckets() {
  while (next_ < buckets_.size() && buckets_[next_].waiting == 0) {
    buckets_[next_].work = dist::all_reduce_async(buckets_[next_].flat);
    ++next_;
  }
}

void GradBuckets::finish() {
  // A parameter that took no part in this step's loss sends zeros, so that every rank
  // still makes the same all-reduce calls.
  for (auto& b : buckets_) {
    if (b.waiting == 0) continue;
    for (int64_t i : b.slots)
      if (!slots_[i].arrived) b.flat.narrow(0, slots_[i].offset, slots_[i].param.numel()).zero_();
    b.waiting = 0;
  }
  start_ready_buckets();
  const double world = static_cast<double>(dist::get_world_size());
  torch::NoGradGuard no_grad;
  last_wait_s_ = 0;
  for (auto& b : buckets_) {
    const auto t0 = std::chrono::steady_clock::now();
    if (b.work.started()) b.work.wait();
    last_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    b.flat.div_(world);
    for (int64_t i : b.slots) {
      Slot& s = slots_[i];
      auto avg = b.flat.narrow(0, s.offset, s.param.numel()).view_as(s.param);
      if (s.param.grad().defined())
        s.param.mutable_grad().copy_(avg);
      else
        s.param.mutable_grad() = avg.clone();
      s.arrived = false;
    }
    b.waiting = static_cast<int64_t>(b.slots.size());
  }
  next_ = 0;
}

double bucketed_train_step(const ForwardFn& forward, torch::optim::Optimizer& optimizer, GradBuckets& buckets,
                           const Batch& batch) {
  optimizer.zero_grad();
  auto loss = masked_cross_entropy(forward(batch.input), batch.labels, batch.mask);
  loss.backward();
  buckets.finish();
  optimizer.step();
  return loss.item<double>();
}

}  // namespace kit
