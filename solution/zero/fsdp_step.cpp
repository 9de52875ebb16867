// Problem 5.5: ZeRO stage 3 / FSDP (see fsdp.h): gathering a unit, reduce-scattering its
// gradients, where the forward gathers and frees, and the shard's AdamW step.
#include <torch/torch.h>

#include "kit/errors.h"
#include "zero/fsdp.h"

namespace kit::zero {

void Fsdp::gather(FsdpUnit& u) {
  // BEGIN SOLUTION 5.5 Fsdp::gather
  torch::NoGradGuard no_grad;
  u.allocate();
  u.full.narrow(0, u.range.begin, u.range.size()).copy_(u.shard.detach());  // chunk r is mine
  ring::ring_all_gather(u.full, group_);                                   // the others' chunks
  // END SOLUTION
}

torch::Tensor Fsdp::reduce_scatter(FsdpUnit& u, const torch::Tensor& grad) {
  // BEGIN SOLUTION 5.5 Fsdp::reduce_scatter
  torch::NoGradGuard no_grad;
  ring::ring_reduce_scatter(grad, group_);  // chunk r: the sum over the ranks
  torch::Tensor mine = grad.narrow(0, u.range.begin, u.range.size()) / group_.size();  // a new tensor
  u.free();  // the unit's backward is done: its full parameters are needed no more
  return mine;
  // END SOLUTION
}

torch::Tensor Fsdp::forward_units(const torch::Tensor& idx) {
  // BEGIN SOLUTION 5.5 Fsdp::forward_units
  // The tied table is read by the lookup and by the head: "outer" stays gathered in between.
  FsdpUnit& out = outer();
  use(out);
  torch::Tensor x = model_->embed(idx);
  for (size_t i = 0; i < model_->h->size(); ++i) {
    FsdpUnit& u = block_unit(i);
    use(u);
    x = model_->h[i]->as<Block>()->forward(x);
    u.free();                                  // freed after its forward,
    before_backward(x, u, Refill::kGather);    // gathered again before its backward
  }
  before_backward(x, out, Refill::kFree);      // x's gradient: the head's backward is done
  torch::Tensor logits = model_->head(x);
  out.free();
  before_backward(logits, out, Refill::kGather);
  return logits;
  // END SOLUTION
}

void Fsdp::step() {
  // BEGIN SOLUTION 5.5 Fsdp::step
  // The shards' averaged gradients, end to end as the optimizer lays the shards out; a unit
  // that took no part in this step (none in GPT-2) steps on zeros.
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& u : units_)
    grads.push_back(u.shard.grad().defined() ? u.shard.grad() : torch::zeros_like(u.shard));
  optimizer_->update_shard(torch::cat(grads));
  // END SOLUTION
}

}  // namespace kit::zero
