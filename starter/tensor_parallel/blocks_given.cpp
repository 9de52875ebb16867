// Given code for Problem 4.3: the block around the parallel attention and MLP.
#include <torch/torch.h>

#include <limits>
#include <mutex>

#include "tensor_parallel/blocks.h"

namespace kit::tp {

torch::Tensor dropout_per_rank(const torch::Tensor& x, double p, bool training, int64_t rank) {
  if (!training || p == 0) return torch::dropout(x, p, training);
  // The shared draw: the same value on every rank of the group.
  const int64_t base = torch::randint(std::numeric_limits<int64_t>::max() / 2, {1}, torch::kInt64).item<int64_t>();
  at::Generator gen = at::globalContext().defaultGenerator(x.device());
  torch::Tensor saved;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    saved = gen.get_state();
    gen.set_current_seed(static_cast<uint64_t>(base) + 2718 + static_cast<uint64_t>(rank));  // Megatron's offset
  }
  auto put_back = [&] {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(saved);
  };
  torch::Tensor y;
  try {
    y = torch::dropout(x, p, true);
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
  return y;
}

RegionDropoutImpl::RegionDropoutImpl(double p, dist::Group g) : options(p), group(std::move(g)) {}

torch::Tensor RegionDropoutImpl::forward(const torch::Tensor& x) {
  return dropout_per_rank(x, options.p(), is_training(), group.rank());
}

ParallelBlockImpl::ParallelBlockImpl(const GPT2Config& cfg, dist::Group group) {
  auto ln = torch::nn::LayerNormOptions({cfg.n_embd}).eps(cfg.layer_norm_eps);
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(ln));
  attn = register_module("attn", ParallelAttention(cfg, group));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(ln));
  mlp = register_module("mlp", ParallelMLP(cfg, group));
}

torch::Tensor ParallelBlockImpl::forward(torch::Tensor x) {
  x = x + attn(ln_1(x));
  return x + mlp(ln_2(x));
}

void ParallelBlockImpl::load_full(const BlockImpl& full) {
  torch::NoGradGuard no_grad;
  ln_1->weight.copy_(full.ln_1->weight);
  ln_1->bias.copy_(full.ln_1->bias);
  ln_2->weight.copy_(full.ln_2->weight);
  ln_2->bias.copy_(full.ln_2->bias);
  attn->load_full(*full.attn);
  mlp->load_full(*full.mlp);
}

}  // namespace kit::tp
