// The data-parallel optimizers behind one interface (see data_parallel_optimizer.h).
#include "zero/data_parallel_optimizer.h"

#include <torch/torch.h>

#include "data_parallel/flat_average.h"
#include "kit/errors.h"
#include "kit/memory.h"
#include "train/adamw.h"
#include "zero/fsdp.h"

namespace kit::zero {

namespace {

// Every rank holds everything: one flat all-reduce of the gradients, then AdamW.
class ReplicatedAdamW : public DataParallelOptimizer {
 public:
  ReplicatedAdamW(std::vector<torch::Tensor> params, GPT2 model, dist::Group group, const ZeroOptions& o)
      : DataParallelOptimizer(std::move(params), std::move(model)),
        group_(std::move(group)),
        adamw_(params_, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
                            o.weight_decay)) {}
  void zero_grad() override { adamw_.zero_grad(); }
  void step() override {
    average_gradients_flat(params_, group_);
    adamw_.step();
  }
  int64_t gradient_bytes() const override { return gradient_bytes_held(); }
  int64_t state_bytes() const override { return adamw_state_bytes(adamw_); }

 private:
  dist::Group group_;
  mutable AdamW adamw_;  // adamw_state_bytes reads its state through a non-const accessor
};

// ZeRO stages 1 and 2: ZeroAdamW averages over the group itself (reduce-scatter, all-gather).
class ShardedAdamW : public DataParallelOptimizer {
 public:
  ShardedAdamW(std::vector<torch::Tensor> params, GPT2 model, const dist::Group& group, const ZeroOptions& o)
      : DataParallelOptimizer(std::move(params), std::move(model)), zero_(params_, group, o) {}
  void zero_grad() override { zero_.zero_grad(); }
  void step() override { zero_.step(); }
  int64_t gradient_bytes() const override { return zero_.gradient_bytes(); }
  int64_t state_bytes() const override { return zero_.state_bytes(); }

 private:
  ZeroAdamW zero_;
};

// ZeRO stage 3: Fsdp keeps the shards; its forward gathers and frees the units.
class FsdpOptimizer : public DataParallelOptimizer {
 public:
  FsdpOptimizer(GPT2 model, const dist::Group& group, const ZeroOptions& o)
      : DataParallelOptimizer(model->parameters(), model), fsdp_(model, group, o) {
    for (const auto& u : fsdp_.units()) gradient_holders_.push_back(u.shard);
  }
  void zero_grad() override { fsdp_.zero_grad(); }
  void step() override { fsdp_.step(); }
  torch::Tensor forward(const torch::Tensor& idx) override { return fsdp_.forward(idx); }
  int64_t parameter_bytes() const override { return fsdp_.shard_bytes(); }
  // The shards' gradients, kept until the next zero_grad.
  int64_t gradient_bytes() const override { return gradient_bytes_held(); }
  int64_t state_bytes() const override { return fsdp_.state_bytes(); }

 private:
  Fsdp fsdp_;
};

}  // namespace

DataParallelOptimizer::DataParallelOptimizer(std::vector<torch::Tensor> params, GPT2 model)
    : params_(std::move(params)), gradient_holders_(params_), model_(std::move(model)) {}

torch::Tensor DataParallelOptimizer::forward(const torch::Tensor& idx) {
  if (!model_)
    throw Error("this data-parallel optimizer was made without a model: give make_data_parallel_optimizer the GPT2 "
                "whose forward to run");
  return model_->forward(idx);
}

int64_t DataParallelOptimizer::parameter_bytes() const {
  int64_t n = 0;
  for (const auto& p : params_) n += memory::bytes_of(p);
  return n;
}

int64_t DataParallelOptimizer::gradient_bytes_held() const {
  int64_t n = 0;
  for (const auto& t : gradient_holders_) n += memory::bytes_of(t.grad());
  return n;
}

int zero_stage_of(const std::string& name) {
  if (name == "adamw") return 0;
  if (name == "zero1") return 1;
  if (name == "zero2") return 2;
  if (name == "zero3") return 3;
  return -1;
}

bool master_weights(Precision precision, const std::string& name) {
  return precision == Precision::BF16 && zero_stage_of(name) > 0;
}

std::unique_ptr<DataParallelOptimizer> make_data_parallel_optimizer(const std::string& name,
                                                                    std::vector<torch::Tensor> params, GPT2 model,
                                                                    const dist::Group& group, ZeroOptions options) {
  const int stage = zero_stage_of(name);
  if (stage < 0) throw Error("optimizer " + name + " is not one of adamw, zero1, zero2, zero3");
  options.stage = stage;
  if (stage == 0) return std::make_unique<ReplicatedAdamW>(std::move(params), std::move(model), group, options);
  if (stage < 3) return std::make_unique<ShardedAdamW>(std::move(params), std::move(model), group, options);
  if (!model) throw Error("zero3 (FSDP) shards a GPT2 unit by unit: give make_data_parallel_optimizer the model");
  return std::make_unique<FsdpOptimizer>(std::move(model), group, options);
}

}  // namespace kit::zero
