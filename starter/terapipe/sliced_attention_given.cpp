// Problem 7.1 (given code around the student's sliced_attention): see terapipe/sliced_attention.h.
#include <torch/torch.h>

#include "kit/errors.h"
#include "terapipe/sliced_attention.h"
#include "terapipe/slicing.h"

namespace kit::terapipe {

torch::Tensor sliced_block(BlockImpl& block, const torch::Tensor& x, KVCache& cache) {
  torch::Tensor y = x + sliced_attention(*block.attn, block.ln_1(x), cache);
  return y + block.mlp(block.ln_2(y));
}

torch::Tensor sliced_forward(GPT2Impl& model, const torch::Tensor& idx, const std::vector<int64_t>& lengths) {
  const int64_t L = idx.dim() == 2 ? idx.size(1) : 0;
  int64_t total = 0;
  for (const int64_t l : lengths) {
    if (l < 1) throw Error("the slicing " + to_string(lengths) + " has an empty slice: every slice needs a token");
    total += l;
  }
  if (total != L)
    throw Error("the slicing " + to_string(lengths) + " covers " + std::to_string(total) + " tokens, but the sequence has " +
                std::to_string(L) + ": the slices must add up to its length");
  // Embedding is per token (wte plus wpe at the token's own position): all at once is the
  // same as slice by slice.
  const torch::Tensor x = model.embed(idx);
  std::vector<KVCache> caches(model.h->size());
  std::vector<torch::Tensor> outputs;
  int64_t c = 0;
  for (const int64_t l : lengths) {
    torch::Tensor s = x.narrow(1, c, l);
    for (size_t b = 0; b < model.h->size(); ++b) s = sliced_block(*model.h[b]->as<BlockImpl>(), s, caches[b]);
    outputs.push_back(s);
    c += l;
  }
  return model.head(torch::cat(outputs, 1));
}

}  // namespace kit::terapipe
