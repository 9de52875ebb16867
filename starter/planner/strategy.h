// Problem 8 (given): one parallel strategy, and where its ranks sit.
//
// W = dp x pp x tp ranks, numbered as Problem 6's grid numbers them (and as srun and torchrun
// place ranks node by node):
//   rank = stage * (dp * tp) + replica * tp + tp_index
// so a tensor group is tp consecutive ranks (inside a node when tp fits one), a stage's
// dp x tp ranks are consecutive, and a data group takes every tp-th rank of its stage.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kit::planner {

enum class Schedule { gpipe, one_f_one_b, interleaved };
std::string schedule_name(Schedule s);            // "gpipe", "1f1b", "interleaved"
Schedule schedule_from_name(const std::string& name);  // kit::Error naming the choices

struct Strategy {
  int64_t dp = 1, pp = 1, tp = 1;
  int64_t micro_batch = 1;  // sequences per micro-batch on one replica
  Schedule schedule = Schedule::one_f_one_b;
  int64_t virtual_chunks = 1;  // model chunks per rank (interleaved only: Megatron's v)
  int zero_stage = 0;       // 0: plain data parallel; 1: optimizer state sharded; 2: and gradients
  bool recompute = false;   // activation recomputation (Problem 6.3): a stage keeps only each
                            // layer's input and runs the forward again in the backward
  std::vector<int64_t> layers_per_stage;  // pp entries, each 1 or more

  int64_t world() const { return dp * pp * tp; }
  std::string label() const;  // "d=2 p=2 t=1 mb=4 1f1b", then " v=2", " zero1", " rc" as set
};

// Micro-batches m each replica runs per step: global_batch / (dp * micro_batch); kit::Error
// when that does not divide.
int64_t micro_batches(const Strategy& s, int64_t global_batch);

// The ranks of one group (see the numbering above).
std::vector<int64_t> tensor_group(const Strategy& s, int64_t stage, int64_t replica);
std::vector<int64_t> data_group(const Strategy& s, int64_t stage, int64_t tp_index);
std::vector<int64_t> stage_ranks(const Strategy& s, int64_t stage);

// The first layer of each stage and one past the last: pp + 1 entries.
std::vector<int64_t> stage_bounds(const std::vector<int64_t>& layers_per_stage);

}  // namespace kit::planner
