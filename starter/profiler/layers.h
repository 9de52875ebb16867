// Given: the measurement behind the planner's profiles (planner/profile.h), as AMP profiles
// its layers: each kind of GPT-2 layer timed on this machine, forward and backward, for a
// tensor-parallel degree t and a micro-batch of `rows` sequences.
//
// A degree t is measured as it runs: t processes, each holding its shard of the kit's own
// tensor-parallel layers (Problem 4) over a real group of t ranks, so a layer's time holds its
// all-reduces and the processes' competition for the machine's cores:
//   "embedding"  VocabParallelEmbedding (V/t rows) + wpe, and its all-reduce;
//   "block"      cfg.n_layer ParallelBlocks in a row (each with its own weights, as a stage runs
//                them: alone and repeated, one block would find its weights and activations
//                in the caches, which it does not in a model); one block's time is the row's
//                / n_layer. Two all-reduces forward, two backward per block;
//   "head"       ln_f, the logits of this rank's V/t rows of the tied table, the vocab-parallel
//                cross-entropy, and their all-reduces.
// The backward also computes the gradient of the layer's input (a pipeline stage sends it
// back). The t ranks start each run together (a barrier) and a run's time is the slowest
// rank's. time_optimizer: torch's AdamW step over one such shard's parameters, on every rank
// of the group at once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "kit/config.h"

namespace kit::profiler {

// The kinds, in the model's order.
const std::vector<std::string>& layer_kinds();

struct Timing {
  double forward = 0, backward = 0;  // seconds, the median of the repeats
  double spread = 0;                 // (slowest - fastest) / median of forward + backward
};

// Collective over `group` (its size is t): every member calls it with the same arguments.
// One Timing per micro-batch size of `rows`, measured in up to 4 rounds of every size in turn
// (a drift of the machine's speed then hits every size alike), a size's runs of a round back
// to back with its gradients adding up, as a step's micro-batches run; --warmup untimed runs
// start each size's turn. kit::Error for an unknown kind,
// t not dividing n_head, n_embd and vocab_size, or rows, seq_len or repeats below 1.
std::vector<Timing> time_layers(const GPT2Config& cfg, const std::string& kind, const dist::Group& group,
                                const std::vector<int64_t>& rows, int64_t seq_len, int warmup, int repeats);
double time_optimizer(const GPT2Config& cfg, const std::string& kind, const dist::Group& group, int warmup,
                      int repeats);

}  // namespace kit::profiler
