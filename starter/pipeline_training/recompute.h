// Problem 6.3: activation recomputation (Megatron-LM's "full recomputation", PyTorch's
// torch.utils.checkpoint).
//
// What. A pipeline stage's forward keeps, for every micro-batch in flight, everything its
// blocks' backward will read: the inputs of every layer norm, matrix product, softmax and
// dropout, the attention matrix (b, H, T, T), the MLP's 4C-wide hidden layer. With
// recomputation a block keeps only its input: recompute(block, x) runs the block without
// recording a graph, and when the backward reaches it, runs the block's forward again, this
// time recording, and back-propagates through that fresh graph.
//
// Why. 1F1B holds up to p micro-batches on the first stage, and each holds the activations
// of all of the stage's blocks; those, not the parameters, are what limits the micro-batch
// size or the model that fits. Megatron-LM (Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models", 2022) keeps only each block's input, the
// b x T x C values that flow between blocks, at the price of one more forward per block:
// about a third more compute per step (a backward costs about two forwards, so 1 + 2 becomes
// 1 + 1 + 2), which the paper measures as 30-40 % more time.
//
// The contract (tests/pipeline_training/test_recompute.cpp checks it, in float64):
//   - the loss and every gradient (the input's and each parameter's) equal, to 1e-12, those
//     of calling block(x) directly, dropout included: the recomputed forward must draw the
//     same dropout masks, so recompute saves the random generator's state (the CPU one, and
//     the CUDA one of x's device when x is on a GPU) in the forward and restores it for the
//     recomputation, then puts back the state it found, so that the draws after it are the
//     ones they would have been without recomputation;
//   - the forward keeps only x (detached: the same storage, no new buffer) and the output;
//     nothing the block computes inside survives the forward;
//   - the block runs exactly twice per forward and backward: once in the forward, once when
//     the backward reaches it (the counters below, kept by given code).
//
// The input gets its gradient from recompute's backward; the parameters of the block get
// theirs by accumulation into .grad, as in any backward. As torch.utils.checkpoint's
// (reentrant) implementation, the output records a graph only when x requires a gradient:
// in a pipeline stage it always does (a received activation, or the embeddings' output).
// The generators' states are taken and put back by the given save_generators and
// restore_generators below (the CPU generator, and x's GPU's when x is on a GPU), and with
// them autocast's setting (kit/precision.h): under --precision bf16 the first forward ran in
// bf16, outside any autocast the backward runs, and the block must run again as it first ran.
// LibTorch 1.13 and 2.x have the same autograd and generator calls for this.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>

#include "kit/precision.h"

namespace kit::pp {

// One transformer block as a function of its input: (b, T, C) -> (b, T, C).
using BlockFn = std::function<torch::Tensor(const torch::Tensor&)>;

// Student code (Problem 6.3, pipeline_training/recompute.cpp): block(x), keeping only x for
// the backward, which runs block again on it. A custom autograd function
// (torch::autograd::Function<T>): its forward runs the block under NoGradGuard and saves x
// detached and the generators' states (save_generators); its backward restores those
// (restore_generators, having saved the current ones to put back afterwards), re-runs the
// block with gradients on (the engine runs a backward with them off) on a detached copy of x
// that requires grad, back-propagates the incoming gradient through that output with
// torch::autograd::backward, and returns x's gradient.
torch::Tensor recompute(const BlockFn& block, const torch::Tensor& x);

// ---- given (recompute_given.cpp) --------------------------------------------------------

// The states of the random generators a block on `device` draws its dropout masks from: the
// CPU's, and the device's own when it is a GPU. Each is taken and set under its generator's
// mutex (at::globalContext().defaultGenerator(device), get_state() / set_state()). Also
// autocast's setting on the device's type (kit::autocast_state), which restore_generators
// puts back too.
struct GeneratorStates {
  torch::Tensor cpu, cuda;  // cuda: defined when device is a GPU
  c10::Device device{torch::kCPU};
  AutocastState autocast;
};
GeneratorStates save_generators(const c10::Device& device);
void restore_generators(const GeneratorStates& states);  // kit::Error if `states` was never saved

// How often the stages ran a block, since the last reset, in this process (every thread).
// forwards: every call of a block's forward; recomputed: those of them made inside a
// backward pass (the recomputations).
struct RecomputeCounters {
  int64_t forwards = 0, recomputed = 0;
};
void reset_recompute_counters();
RecomputeCounters recompute_counters();

// What the stages (pipeline_training/stage_model.h, grid/stage.h) call for each block:
// block(x), through recompute when `with_recompute`; every call of the block is counted.
torch::Tensor run_block(const BlockFn& block, const torch::Tensor& x, bool with_recompute);

}  // namespace kit::pp
