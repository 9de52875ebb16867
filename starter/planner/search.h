// Problem 8 (given): a strategy's whole cost from the terms of Problem 8.1, and the search
// over every strategy of a cluster (AMP, NeurIPS 2022).
//
// strategy_cost: stage j's time per micro-batch T_j = compute (on the slowest device among the
// stage's ranks) + tensor-parallel all-reduces (on the link its tensor groups span, the worst
// replica's) + the sends to stage j + 1 (activation forward, gradient backward, on the link
// between the two stages). The step: pipeline_seconds(T, m) + the slowest stage's optimizer
// step (planner/profile.h: measured on a profiled device, 0 on one counted in FLOPs) + the
// slowest data group's all-reduce of its stage's gradients (a rank's share: the stage's
// parameters / t). Memory: the rank with the least room left; a strategy fits when every
// rank's memory_per_rank fits its device.
//
// On a node whose devices share processors (cluster.h, shared_flops: c = shared_flops / flops
// of them compute at full speed at once, n > c each at c / n of it), a stage computes slower
// while others compute too. A pipeline keeps its stages busy 1 - bubble_fraction of the step,
// so on average n = (1 - bubble) x the node's ranks compute at once, and every stage's compute
// is slowed by that n (data and tensor parallelism: every rank at once).
// A profile that holds the tensor-parallel all-reduces (planner/profile.h) replaces the tensor
// term; it was measured with its t ranks busy, so the slowdown counts from there. Of its time,
// the computing part (the layers' time at t = 1 / t: the profile then needs t = 1 too) is
// slowed as above; the rest, waiting in all-reduces, only when other stages compute meanwhile
// (p > 1 and m > 1: the stage's own ranks all wait at once and give their cores away).
//
// search: every dp x pp x tp = the cluster's devices (t dividing the model's heads, at most one
// stage per layer), every micro-batch size that divides the batch, every schedule and ZeRO
// stage asked for, each without and with activation recomputation (Strategy::recompute: compute
// and memory as cost.h says); layers split by partition_layers (Problem 8.2) on each stage's
// own costs, or evenly as the kit's pipelines split them. On a profiled device each
// micro-batch size is priced at its measured speed (a small one runs slower per token).
// Strategies that do not fit are left out (kept, marked, with keep_infeasible). Sorted by
// predicted step time.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost.h"
#include "planner/model_spec.h"
#include "planner/strategy.h"

namespace kit::planner {

struct Cost {
  Strategy strategy;
  int64_t micro_batches = 0;          // m per replica
  std::vector<double> stage_seconds;  // T_j, per micro-batch
  // The slowest stage's terms per micro-batch:
  double compute = 0, tensor = 0, p2p = 0;
  double pipeline = 0;    // the step's pipeline term
  double contention = 1;  // the slowest stage's compute slowdown with every rank busy (1: no node shares)
  double optimizer = 0;   // the slowest stage's optimizer step (0 unprofiled)
  double data = 0;      // the data-parallel all-reduce
  double bubble = 0;    // bubble_fraction of the schedule
  double total = 0;     // pipeline + optimizer + data: the predicted step time
  Memory memory;        // the rank closest to its device's limit
  double memory_limit = 0;
  bool fits = true;
};

// Layers per stage as the kit's pipelines split them (GPT-2: embedding with the first blocks,
// head with the last, blocks as even as possible; other models: layers as even as possible).
std::vector<int64_t> even_partition(const ModelSpec& model, int64_t pp);

// The cost of one strategy (its layers_per_stage filled in). kit::Error when it does not use
// every device of the cluster, m does not divide, or the partition does not cover the layers.
Cost strategy_cost(const Cluster& cluster, const ModelSpec& model, const Workload& work, const Strategy& s);

struct SearchOptions {
  std::vector<Schedule> schedules{Schedule::one_f_one_b};
  std::vector<int64_t> micro_batch_sizes;  // empty: every divisor of the batch per replica
  int64_t micro_batches = 0;               // > 0: only the micro-batch size that gives m this
  std::vector<int> zero_stages{0};
  std::vector<bool> recompute{false, true};  // activation recomputation off, on, or both
  int64_t interleaved_chunks = 2;          // v for the interleaved schedule
  bool even = false;                       // even_partition instead of partition_layers
  bool keep_infeasible = false;
};

// Layers per stage from partition_layers on each stage's per-layer cost (compute on its
// slowest device plus its tensor-parallel all-reduces).
std::vector<int64_t> balanced_partition(const Cluster& cluster, const ModelSpec& model, const Workload& work,
                                        const Strategy& s);

std::vector<Cost> search(const Cluster& cluster, const ModelSpec& model, const Workload& work,
                         const SearchOptions& options);

nlohmann::json to_json(const Cost& c);

}  // namespace kit::planner
