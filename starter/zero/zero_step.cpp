// Problem 5.2: ZeRO's step (see zero.h): the shard boundaries, the sharded AdamW update,
// and the reduce-scatter / update / all-gather around it.
#include <torch/torch.h>

#include <cmath>

#include "kit/errors.h"
#include "zero/zero.h"

namespace kit::zero {

ring::Range shard_of(int64_t numel, int64_t rank, int64_t n) {
  // TODO(Problem 5.2 shard_of): your code here.
  throw kit::NotImplemented("Problem 5.2 shard_of");
}

void ZeroAdamW::update_shard(const torch::Tensor& grad) {
  // TODO(Problem 5.2 ZeroAdamW::update_shard): your code here.
  throw kit::NotImplemented("Problem 5.2 ZeroAdamW::update_shard");
}

void ZeroAdamW::step() {
  // TODO(Problem 5.2 ZeroAdamW::step): your code here.
  throw kit::NotImplemented("Problem 5.2 ZeroAdamW::step");
}

}  // namespace kit::zero
