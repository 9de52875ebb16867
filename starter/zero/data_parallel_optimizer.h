// The data-parallel optimizers behind one interface: what a training loop calls once per step,
// whichever way the ranks of a data group keep the model's state.
//
//   adamw   every rank holds everything: the gradients all-reduced (averaged) in one flat
//           message, then kit::AdamW (train/adamw.h) on the whole model;
//   zero1   ZeroAdamW stage 1 (zero.h): the optimizer state sharded over the group;
//   zero2   stage 2: the gradients kept between steps sharded too;
//   zero3   Fsdp (fsdp.h): the parameters sharded as well, gathered unit by unit by its
//           forward (so the loop runs the forward through forward()).
// A loop holds one of these and never asks which: zero_grad, forward, backward on its share
// of the batch, step; the byte counts are measured from the tensors each one keeps.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "kit/precision.h"
#include "model/gpt2.h"
#include "zero/zero.h"

namespace kit::zero {

class DataParallelOptimizer {
 public:
  virtual ~DataParallelOptimizer() = default;
  virtual void zero_grad() = 0;
  // After backward on this rank's share of the batch (gradients not yet averaged): average
  // them over the group and update this rank's parameters (or its shard of them).
  virtual void step() = 0;
  // The model's forward (zero3: through the gathering units); a loop over stages of its own
  // (the 3D grid's pipeline) runs its stages instead and never calls it.
  virtual torch::Tensor forward(const torch::Tensor& idx);

  // Bytes this rank keeps between steps, measured from its tensors.
  virtual int64_t parameter_bytes() const;
  virtual int64_t gradient_bytes() const = 0;
  virtual int64_t state_bytes() const = 0;
  // Bytes of the gradients this rank holds right now (after a backward: all of its share's,
  // before step() reduces them).
  int64_t gradient_bytes_held() const;

 protected:
  // params: the model's parameters in the order every rank sees them; model: for forward().
  DataParallelOptimizer(std::vector<torch::Tensor> params, GPT2 model);
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> gradient_holders_;  // the tensors whose .grad() hold gradients
  GPT2 model_{nullptr};
};

// "adamw", "zero1", "zero2" over `params`, or "zero3" over `model` (its parameters become the
// units' business: Fsdp shards them). kit::Error for any other name, naming the four.
// `model` may be null for the first three (forward() then says so).
std::unique_ptr<DataParallelOptimizer> make_data_parallel_optimizer(const std::string& name,
                                                                    std::vector<torch::Tensor> params, GPT2 model,
                                                                    const dist::Group& group, ZeroOptions options);
// The ZeRO stage of a name: 0 (adamw), 1, 2, 3; -1 for a name that is none of them.
int zero_stage_of(const std::string& name);

// Whether a run at `precision` with optimizer `name` trains in the ZeRO paper's mixed precision:
// bf16 with a ZeRO stage, whose model's parameters (so its gradients) are then bf16 and whose
// optimizer keeps the fp32 master (zero.h). Plain AdamW in bf16 keeps fp32 weights, the forward
// under autocast (kit/precision.h).
bool master_weights(Precision precision, const std::string& name);

}  // namespace kit::zero
