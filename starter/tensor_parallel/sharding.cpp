// Given code for Problem 4: the split of each parameter, and shards <-> full checkpoint.
#include "tensor_parallel/sharding.h"

#include <torch/torch.h>

#include "kit/errors.h"
#include "tensor_parallel/blocks.h"  // shard_qkv (Problem 4.3)

namespace kit::tp {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

Split split_of(const std::string& name) {
  if (name == "wte.weight") return Split::Rows;
  if (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_attn.bias")) return Split::QKV;
  if (ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_fc.bias")) return Split::Rows;
  if (ends_with(name, ".c_proj.weight")) return Split::Columns;
  return Split::Whole;
}

void check_divisible(const GPT2Config& cfg, int64_t t) {
  if (t < 1) throw Error("the tensor-parallel size must be at least 1 (got " + std::to_string(t) + ")");
  const std::pair<const char*, int64_t> sizes[] = {
      {"the number of attention heads n_head", cfg.n_head},
      {"the hidden size n_embd", cfg.n_embd},
      {"the vocabulary size vocab_size", cfg.vocab_size}};
  for (const auto& [what, size] : sizes) {
    if (size % t == 0) continue;
    std::string ok;
    for (int64_t d = 1; d <= 16 && d <= size; ++d)
      if (cfg.n_head % d == 0 && cfg.n_embd % d == 0 && cfg.vocab_size % d == 0)
        ok += (ok.empty() ? "" : ", ") + std::to_string(d);
    throw Error(std::string(what) + " (" + std::to_string(size) + ") is not divisible by the tensor-parallel size t = " +
                std::to_string(t) + ": every rank must hold an equal share. t that divide all three: " + ok +
                (std::string(what).find("vocab") != std::string::npos
                     ? " (or pick a --vocab-size that t divides, as Megatron pads its vocabulary)"
                     : ""));
  }
}

TensorDict shard_state_dict(const TensorDict& full, int64_t rank, int64_t t) {
  if (t < 1 || rank < 0 || rank >= t)
    throw Error("shard_state_dict: rank " + std::to_string(rank) + " is not in 0.." + std::to_string(t - 1));
  TensorDict out;
  for (const auto& kv : full) {
    const std::string& name = kv.key();
    if (name == "lm_head.weight") continue;  // wte.weight again
    const torch::Tensor& w = kv.value();
    switch (split_of(name)) {
      case Split::Whole: out.insert(name, w.clone()); break;
      case Split::Rows: {
        const int64_t part = w.size(0) / t;
        out.insert(name, w.narrow(0, rank * part, part).clone());
        break;
      }
      case Split::Columns: {
        const int64_t part = w.size(1) / t;
        out.insert(name, w.narrow(1, rank * part, part).clone());
        break;
      }
      case Split::QKV: out.insert(name, shard_qkv(w, rank, t).clone()); break;
    }
  }
  return out;
}

TensorDict merge_state_dicts(const std::vector<TensorDict>& shards) {
  if (shards.empty()) throw Error("merge_state_dicts: no shards");
  const int64_t t = static_cast<int64_t>(shards.size());
  TensorDict out;
  for (const auto& kv : shards[0]) {
    const std::string& name = kv.key();
    std::vector<torch::Tensor> parts;
    for (int64_t r = 0; r < t; ++r) {
      if (!shards[static_cast<size_t>(r)].contains(name))
        throw Error("merge_state_dicts: shard " + std::to_string(r) + " has no " + name);
      parts.push_back(shards[static_cast<size_t>(r)].at(name));
    }
    switch (split_of(name)) {
      case Split::Whole:
        for (int64_t r = 1; r < t; ++r)
          if (!torch::allclose(parts[static_cast<size_t>(r)], parts[0], /*rtol=*/1e-6, /*atol=*/1e-7))
            throw Error("merge_state_dicts: " + name + " should be the same on every rank but rank " +
                        std::to_string(r) + "'s differs from rank 0's by up to " +
                        std::to_string((parts[static_cast<size_t>(r)] - parts[0]).abs().max().item<double>()) +
                        ": the ranks drifted apart (a replicated gradient that was not the same everywhere)");
        out.insert(name, parts[0].clone());
        break;
      case Split::Rows: out.insert(name, torch::cat(parts, 0)); break;
      case Split::Columns: out.insert(name, torch::cat(parts, 1)); break;
      case Split::QKV: {
        // Each shard is q_r | k_r | v_r: regroup into all q's, all k's, all v's.
        std::vector<torch::Tensor> q, k, v;
        for (const auto& p : parts) {
          auto c = p.chunk(3, 0);
          q.push_back(c[0]);
          k.push_back(c[1]);
          v.push_back(c[2]);
        }
        out.insert(name, torch::cat({torch::cat(q, 0), torch::cat(k, 0), torch::cat(v, 0)}, 0));
        break;
      }
    }
  }
  return out;
}

}  // namespace kit::tp
