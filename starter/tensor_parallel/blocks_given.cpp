// Given code for Problem 4.3: the block around the parallel attention and MLP.
#include <torch/torch.h>

#include "tensor_parallel/blocks.h"

namespace kit::tp {

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
