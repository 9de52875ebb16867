// Problem 8 (given): the model as the planner sees it: a list of layers, each with what it
// costs (AMP, NeurIPS 2022). A GPT-2 preset becomes embedding, n_layer blocks and the head;
// a JSON file may list any layers (AMP's heterogeneous-model case: layers of unequal cost).
//
//   {"name": "uneven", "heads": 8,
//    "layers": [{"name": "embed", "flops_per_token": 0, "param_bytes": 2.1e8,
//                "activation_bytes_per_token": 4096, "output_bytes_per_token": 4096,
//                "tp_all_reduces": 1}, ...]}
//
// Per layer, for ONE token of one sequence (all bytes fp32):
//   flops_per_token             forward FLOPs; backward costs twice that (two GEMMs per GEMM)
//   param_bytes                 its parameters (the whole layer, before tensor parallelism)
//   activation_bytes_per_token  what autograd keeps for the backward, per token
//   output_bytes_per_token      what it hands the next layer: a pipeline stage sends that
//                               (and receives its gradient), a tensor-parallel all-reduce sums it
//                               (GPT-2's head: the h-wide gradient of its input)
//   tp_all_reduces              all-reduces of its output per micro-batch, forward and backward
//                               together, under tensor parallelism (a Megatron block: 4)
//   kind                        optional: which measured layer of a device's profile it is
//                               (planner/profile.h; GPT-2's: embedding, block, head). Absent:
//                               its name
// "heads": tensor parallelism splits heads, so t must divide it (0 or absent: any t).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kit/config.h"

namespace kit::planner {

struct Layer {
  std::string name;
  double flops_per_token = 0;
  double param_bytes = 0;
  double activation_bytes_per_token = 0;
  double output_bytes_per_token = 0;
  int64_t tp_all_reduces = 0;
  std::string kind;  // its profile's entry (planner/profile.h)
};

struct ModelSpec {
  std::string name;
  std::vector<Layer> layers;
  int64_t heads = 0;  // t must divide it (0: no constraint)
  // GPT-2: layer 0 is the embedding and the last layer the head. The kit's pipelines put them
  // on the first and the last stage and split the blocks evenly (even_partition).
  bool embedding_and_head = false;

  double param_bytes(int64_t first, int64_t last) const;  // layers [first, last)
};

// The training job the strategies are planned for: every strategy trains on the same
// global batch of sequences of seq_len tokens.
struct Workload {
  int64_t global_batch = 16;
  int64_t seq_len = 128;
};

// GPT-2 as embedding + blocks + head for sequences of seq_len tokens (attention's cost grows
// with it). The head keeps its own copy of the tied embedding, as the pipeline's last stage does.
ModelSpec gpt2_model(const GPT2Config& cfg, int64_t seq_len);
// A preset name (kit/config.h) or a JSON file of layers (the format above). For a preset,
// shape's non-zero fields replace the preset's (e.g. n_layer 32, n_embd 2560, n_head 32: a
// 2.7B-parameter GPT); vocab_size 0 means the kit's tokenizer default.
struct Shape {
  int64_t n_layer = 0, n_embd = 0, n_head = 0, vocab_size = 0;
};
ModelSpec read_model(const std::string& preset_or_path, int64_t seq_len, const Shape& shape = {});
ModelSpec model_from_json(const nlohmann::json& j, const std::string& where = "model");
nlohmann::json to_json(const ModelSpec& m);

}  // namespace kit::planner
