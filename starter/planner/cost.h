// Problem 8.1: the terms of a strategy's cost (AMP, NeurIPS 2022). The given search
// (planner/search.h) adds them up for every strategy; you write each term.
//
// One step of a strategy (dp x pp x tp ranks, m micro-batches per replica):
//   stage s's time per micro-batch   T_s = compute + tensor-parallel all-reduces + sends
//   pipeline                         (m - 1) * max_s T_s + sum_s T_s    (AMP's formula)
//   then the data-parallel all-reduce of each stage's gradients, the slowest group's.
// Every term is in seconds; every size in bytes (fp32). A ring over n ranks sends
// 2(n - 1)/n of the buffer per rank, in 2(n - 1) messages (../../shared/SPEC.md).
#pragma once
#include <cstdint>
#include <vector>

#include "planner/cluster.h"
#include "planner/model_spec.h"
#include "planner/profile.h"
#include "planner/strategy.h"

namespace kit::planner {

// A ring all-reduce of `bytes` over n ranks on `link`: 2(n - 1) messages of bytes / n each,
// so 2(n - 1) * latency + 2(n - 1)/n * bytes / bandwidth. n = 1: no communication, 0.
double ring_all_reduce_seconds(double bytes, int64_t n, const Link& link);

// One point-to-point send of `bytes` on `link`: latency + bytes / bandwidth.
double p2p_seconds(double bytes, const Link& link);

// Forward and backward of layers [first, last) for one micro-batch of `tokens` tokens, the
// work split t ways by tensor parallelism, on `device`: the sum over the layers of
// layer_seconds' forward + backward (planner/profile.h: the device's measured times when it
// has a profile, FLOPs / its FLOP/s when not, backward twice forward). With activation
// recomputation (Problem 6.3) the backward runs each layer's forward again first: one more
// forward per layer (a third more, counted in FLOPs).
double compute_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, int64_t tp,
                       const DeviceType& device, bool recompute = false);

// The tensor-parallel all-reduces of layers [first, last) for one micro-batch of `tokens`
// tokens: each layer's tp_all_reduces ring all-reduces of its output (output_bytes_per_token
// x tokens) over the tp ranks, on `link` (the link the tensor group spans).
double tensor_parallel_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, int64_t tp,
                               const Link& link);

// The share of the step that a stage spends idle, with p stages of equal time and m
// micro-batches: GPipe and 1F1B (p - 1)/(m + p - 1); interleaved with v chunks per rank
// (p - 1)/(v m + p - 1).
double bubble_fraction(int64_t p, int64_t m, Schedule schedule, int64_t v = 1);

// The pipeline's time for one step given each stage's time per micro-batch (forward and
// backward, communication included): (m - 1) * max + sum (AMP). Interleaved, with v chunks per
// rank, the fill and drain shrink v-fold: m * max + (sum - max) / v. The same for p = 1.
double pipeline_seconds(const std::vector<double>& stage_seconds, int64_t m, Schedule schedule, int64_t v = 1);

// The data-parallel all-reduce of `gradient_bytes` among `ranks` (one data group): a ring
// over the link that group spans (cluster.link_of). One rank: 0.
double data_parallel_seconds(double gradient_bytes, const std::vector<int64_t>& ranks, const Cluster& cluster);

// Micro-batches whose activations stage `stage` (0-based, of p) holds at its peak: GPipe keeps
// all m; 1F1B keeps min(p - stage, m); interleaved (v chunks, counted in whole micro-batches of
// this rank's layers): min(((p - stage - 1) * 2 + (v - 1) * p + 1) / v rounded up, m).
int64_t in_flight_micro_batches(int64_t stage, int64_t p, int64_t m, Schedule schedule, int64_t v = 1);

// What one rank of a stage holds (bytes). Parameters: the stage's layers / t. Gradients: as
// many (/ dp with ZeRO stage 2). AdamW's two moments: 2 x the parameters (/ dp with ZeRO 1 or
// 2). Activations (tokens: tokens_per_micro_batch; everything / t):
//   s.recompute off: the layers' activation_bytes_per_token x tokens, times the micro-batches
//                    in flight;
//   s.recompute on:  only each layer's input is kept: the output_bytes_per_token of the layer
//                    before it (layer 0's input, the token ids: 0) x tokens, summed over the
//                    stage's layers, times the micro-batches in flight; plus, once, the
//                    activation_bytes_per_token x tokens of the stage's largest layer (the one
//                    whose forward runs again in the backward holds all of its activations).
struct Memory {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return parameters + gradients + optimizer + activations; }
};
Memory memory_per_rank(const ModelSpec& model, int64_t first, int64_t last, double tokens_per_micro_batch,
                       const Strategy& s, int64_t stage, int64_t m);

}  // namespace kit::planner
