// Problem 5.2: ZeRO's step (see zero.h): the shard boundaries, the sharded AdamW update,
// and the reduce-scatter / update / all-gather around it.
#include <torch/torch.h>

#include <cmath>

#include "kit/errors.h"
#include "zero/zero.h"

namespace kit::zero {

ring::Range shard_of(int64_t numel, int64_t rank, int64_t n) {
  // BEGIN SOLUTION 5.2 shard_of
  const int64_t S = (numel + n - 1) / n;  // ceil: n shards of S cover every element
  return {rank * S, (rank + 1) * S};
  // END SOLUTION
}

void ZeroAdamW::update_shard(const torch::Tensor& grad) {
  // BEGIN SOLUTION 5.2 ZeroAdamW::update_shard
  // torch::optim::AdamW's update, on this rank's shard of the parameters and moments only.
  torch::NoGradGuard no_grad;
  step_ += 1;
  const torch::Tensor shard = param_flat_.narrow(0, shard_.begin, shard_.size());
  // Mixed precision: AdamW updates the fp32 master, in fp32; otherwise the parameters themselves.
  torch::Tensor p = mixed_precision() ? master_ : shard;
  const torch::Tensor g = grad.to(p.scalar_type());
  p.mul_(1 - opt_.lr * opt_.weight_decay);  // decoupled weight decay
  exp_avg_.mul_(opt_.beta1).add_(g, 1 - opt_.beta1);
  exp_avg_sq_.mul_(opt_.beta2).addcmul_(g, g, 1 - opt_.beta2);
  const double bias1 = 1 - std::pow(opt_.beta1, static_cast<double>(step_));
  const double bias2 = 1 - std::pow(opt_.beta2, static_cast<double>(step_));
  const torch::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bias2)).add_(opt_.eps);
  p.addcdiv_(exp_avg_, denom, -opt_.lr / bias1);
  if (mixed_precision()) shard.copy_(master_);  // the model computes in the master's rounded copy
  // END SOLUTION
}

void ZeroAdamW::step() {
  // BEGIN SOLUTION 5.2 ZeroAdamW::step
  torch::NoGradGuard no_grad;
  pack_gradients();
  ring::ring_reduce_scatter(grad_flat_, group_);  // this rank's shard: the sum over ranks
  torch::Tensor grad = grad_flat_.narrow(0, shard_.begin, shard_.size()).div_(group_.size());
  update_shard(grad);
  ring::ring_all_gather(param_flat_, group_);  // everyone's new shard, into the model
  if (opt_.stage >= 2) grad_shard_ = grad.clone();  // stage 2 keeps this shard's gradients only
  grad_flat_ = torch::Tensor();                     // the packed buffer was only for the step
  // END SOLUTION
}

}  // namespace kit::zero
