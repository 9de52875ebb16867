// Problem 8 (given): what each kind of layer takes on a device, measured there, as AMP
// profiles its layers (AMP, NeurIPS 2022: known_cost/*.npy, one time per layer and tensor-
// parallel degree) instead of counting FLOPs. FLOPs / a GEMM rate leaves out what is not a
// GEMM (attention's softmax, layer norms, GELU, the loss), per-call overheads and how much
// slower a small micro-batch or a thin tensor-parallel shard runs; a measurement has them all.
//
// profile_layers (starter/bin/profile_layers.cpp) measures a GPT-2 shape's three kinds of
// layer ("embedding", "block", "head" with its loss) for each tensor-parallel degree t (the
// compute of one rank's shard: communication is the link's, cost.h) and micro-batch size,
// and AdamW's step over each kind's shard; a cluster's device type names the file:
//
//   "device_types": {"cpu": {"flops": 1.5e11, "memory_bytes": 6e9, "profile": "profile.json"}}
//
// (a path relative to the cluster file). The file:
//
//   {"format": "kit layer profile", "device": "...", "seq_len": 128, "threads": 1,
//    "layers": {"block": {"flops_per_token": ..., "param_bytes": ...}, ...},
//    "times": [{"kind": "block", "tp": 2, "micro_batch": 4, "tokens": 512,
//               "forward_s": ..., "backward_s": ..., "spread": ...}, ...],
//    "optimizer": [{"kind": "block", "tp": 2, "seconds": ...}, ...]}
//
// "layers" says what was measured (the layer as planner/model_spec.h describes it at t = 1):
// a model layer uses the profile of its kind only when its flops_per_token and param_bytes are
// the same (the same width, heads, vocabulary and sequence length), else kit::Error naming the
// profile and the fix. "spread": (slowest - fastest) / median of the repeats, forward and
// backward together (the measurement's noise).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/cluster.h"
#include "planner/model_spec.h"

namespace kit::planner {

struct LayerSeconds {
  double forward = 0, backward = 0;
};

struct LayerProfile {
  std::string file;  // where it was read from (errors name it)
  std::string device;
  int64_t seq_len = 0;
  std::map<std::string, Layer> layers;  // kind -> the layer measured
  struct Point {
    double tokens = 0;
    LayerSeconds seconds;
  };
  std::map<std::pair<std::string, int64_t>, std::vector<Point>> times;  // (kind, t) -> by tokens, rising
  std::map<std::pair<std::string, int64_t>, double> optimizer;          // (kind, t) -> AdamW step seconds
  // true: each degree t was measured by t processes running the tensor-parallel layers, so a
  // layer's time holds its all-reduces (the planner then adds no tensor-parallel term).
  bool tensor_parallel_included = false;
};

// A layer's forward and backward for one micro-batch of `tokens` tokens, its work split t ways,
// on `device`. With a profile: the measured times of the layer's kind at t, linear in tokens
// between the profiled micro-batch sizes; outside them, the nearest size's time per token.
// kit::Error when the profile
// has no such kind or t, or measured another shape. Without: FLOPs, forward
// flops_per_token x tokens / t / device.flops and backward twice that.
LayerSeconds layer_seconds(const Layer& layer, double tokens, int64_t tp, const DeviceType& device);

// AdamW's step over a layer's parameters / t on `device`: the profile's (kit::Error as above);
// 0 without a profile (FLOP-counted clusters leave the optimizer out).
double optimizer_seconds(const Layer& layer, int64_t tp, const DeviceType& device);

LayerProfile profile_from_json(const nlohmann::json& j, const std::string& where);
LayerProfile read_profile(const std::string& path);

}  // namespace kit::planner
