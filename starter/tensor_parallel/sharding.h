// How each GPT-2 parameter is split across a tensor-parallel group of t ranks, and the two
// conversions between one full checkpoint and t shards. Names are the full model's (Kit
// layout, model/checkpoint.h); a shard holds the same names with its share of each tensor:
//
//   wte.weight                       rows (vocabulary)           (V/t, C)
//   h.N.attn.c_attn.weight / .bias   q|k|v rows of its heads     (3C/t, C) / (3C/t)
//   h.N.attn.c_proj.weight           columns (input features)    (C, C/t); bias whole
//   h.N.mlp.c_fc.weight / .bias      rows (output features)      (4C/t, C) / (4C/t)
//   h.N.mlp.c_proj.weight            columns (input features)    (C, 4C/t); bias whole
//   everything else (wpe, layer norms)  whole on every rank
#pragma once
#include <string>
#include <vector>

#include "kit/config.h"
#include "model/checkpoint_layout.h"  // TensorDict

namespace kit::tp {

enum class Split { Whole, Rows, Columns, QKV };
Split split_of(const std::string& name);

// The sizes t must divide (n_head, n_embd, vocab_size): kit::Error naming the first that
// it does not, and the values of t that would work.
void check_divisible(const GPT2Config& cfg, int64_t t);

// Rank r's shard of a full Kit-layout dict (lm_head.weight, the tied wte, is left out).
TensorDict shard_state_dict(const TensorDict& full, int64_t rank, int64_t t);

// The full dict from the t shards in rank order: what shard_state_dict split, put back.
// kit::Error when the shards disagree on names, or on a tensor every rank holds whole
// (ranks that drifted apart).
TensorDict merge_state_dicts(const std::vector<TensorDict>& shards);

}  // namespace kit::tp
