// Problem 5.5: ZeRO stage 3 (Rajbhandari et al. 2020, section 5.3), which PyTorch calls
// fully sharded data parallelism (FSDP): each of the n ranks keeps 1/n of every parameter,
// not only of the optimizer state (Problem 5.2's stages 1 and 2).
//
// The model is cut into units, whose parameters are gathered and freed together: "outer"
// (wte, wpe and ln_f: the embeddings and the head, which share the tied table wte) and one
// unit per block, "h.0", "h.1", ... A unit's parameters lie end to end in one flat buffer of
// n*S elements (S = ceil(P_u / n), shard_of of Problem 5.2) and rank r keeps [r*S, (r+1)*S)
// only: the unit's `shard`. One training step, for each block unit:
//
//   forward    all-gather the full parameters, run the block, free them;
//   backward   all-gather them again just before the block's backward (a hook on the block's
//              output, whose gradient arrives right before), then, as soon as the unit's
//              gradients are complete, reduce-scatter them (rank r keeps the average of its
//              shard's) and free the full parameters and gradients;
//   step       AdamW on the shard only (Problem 5.2's update_shard).
//
// The tied table is needed at the forward's first step (the lookup) and its last (the head),
// so "outer" stays gathered from the embeddings to the head, is gathered again for the head's
// backward and freed when that is done (the lookup's backward reads indices, not the table):
// two all-gathers and one reduce-scatter, like a block. Every unit's parameters therefore
// cross the ring three times a step, each time (n-1)/n of them: 3 (n-1)/n x 4P bytes sent per
// rank in float32, 1.5x data parallelism's all-reduce (ZeRO's paper, section 7.2.3), exactly
// 3 (n-1) x 4 x (sum of the units' S) with the padding.
//
// How it works in LibTorch (given): a unit's gather is an autograd function (GatherParams in
// fsdp.cpp) from the shard to the full flat buffer, whose backward receives the unit's whole
// gradient in one flat tensor once every use of every parameter of the unit has sent its
// part; the module's parameter members (Linear::weight, ...) are pointed at views of that
// buffer. Freeing releases the buffer's storage (the views and the tensors autograd saved for
// the backward share it), gathering again refills the same storage.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/ring.h"
#include "dist/dist.h"
#include "model/gpt2.h"
#include "zero/zero.h"

namespace kit::zero {

struct FsdpUnit {
  std::string name;                         // "outer", "h.0", "h.1", ...
  std::vector<torch::Tensor*> slots;        // the module members that hold its parameters
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> numels;
  int64_t numel = 0;                        // P_u: its parameters' elements
  ring::Range range;                        // this rank's shard_of(P_u, r, n): [r*S, (r+1)*S)
  torch::Tensor shard;                      // S elements, a leaf: .grad() is the averaged shard gradient
  torch::Tensor full;                       // n*S elements; storage held only while gathered
  const void* storage = nullptr;            // (given) full's storage object: the parameters are views of it
  bool counted = false;                     // (given) made while kit::memory counts: its memory must be counted

  int64_t padded() const { return full.numel(); }  // n*S
  bool gathered() const;                    // the full buffer holds memory now
  void allocate();                          // (given) memory for the full buffer, contents undefined
  void free();                              // (given) the full buffer's memory released
};

// When a hook registered with Fsdp::before_backward runs, what it does to its unit.
enum class Refill { kGather, kFree };

class Fsdp {
 public:
  // Shards `model` over `group`: every rank must build the same model (same seed); each keeps
  // its shard of every unit and the full parameters are freed. The model's parameters() are
  // the units' business from now on: read them with full_parameters().
  Fsdp(GPT2 model, dist::Group group, ZeroOptions options = {});
  // The autograd graph and the hooks hold pointers to this object and its units: it stays put.
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  // Logits (B, T, V) of one forward: forward_units (the student's, below), then a check that
  // every unit it freed is gathered again before its backward (a clear error, not a crash in
  // the backward). A backward from the logits gathers, reduce-scatters and frees.
  torch::Tensor forward(const torch::Tensor& idx);
  void zero_grad();

  // --- the student's functions (fsdp_step.cpp) ---
  // AdamW on every unit's shard: their gradients end to end into optimizer_->update_shard.
  void step();
  // u.full := the unit's full parameters: this rank's shard in its place, the others' by a
  // ring all-gather (Problem 5.1's ring_all_gather).
  void gather(FsdpUnit& u);
  // The unit's gradients are complete (`grad`: n*S elements, the unit's whole gradient on this
  // rank): ring reduce-scatter, keep this rank's S elements averaged over the ranks (a tensor
  // of its own, not a view of `grad`), and free the full parameters (nothing needs them now).
  torch::Tensor reduce_scatter(FsdpUnit& u, const torch::Tensor& grad);

  // --- given, for the student's forward ---
  // Gathers u (autograd's GatherParams: gather(u), then its backward reduce_scatter) and points
  // the module's members at the full parameters.
  void use(FsdpUnit& u);
  // When the gradient of `t` has been computed, gather (kGather) or free (kFree) unit u: register
  // it on a unit's output to gather the unit before its backward, on a unit's input to free it
  // after. Returns t.
  const torch::Tensor& before_backward(const torch::Tensor& t, FsdpUnit& u, Refill what);

  std::vector<FsdpUnit>& units() { return units_; }
  const std::vector<FsdpUnit>& units() const { return units_; }
  FsdpUnit& outer() { return units_.front(); }
  FsdpUnit& block_unit(size_t i) { return units_.at(i + 1); }
  GPT2& model() { return model_; }
  const dist::Group& group() const { return group_; }

  // The full parameters (gathered copies), in model->parameters() order: for tests and checkpoints.
  std::vector<torch::Tensor> full_parameters();
  int64_t shard_bytes() const;     // bytes of every unit's shard on this rank
  // AdamW's state for the shards: the moments, 2 x shard_bytes() in fp32; in mixed precision
  // (a bfloat16 model) fp32 moments and the fp32 master, 12 bytes per shard element.
  int64_t state_bytes() const { return optimizer_->state_bytes(); }
  int64_t gathered_bytes() const;  // bytes of full buffers held right now
  // Bytes this rank sends per step on the ring: 3 (n-1) x element size x (sum of the units' S).
  int64_t expected_send_bytes() const;

 private:
  // The student's forward: use(u) before a unit computes, u.free() after it, and for each freed
  // unit a before_backward(..., Refill::kGather) that brings it back before its backward.
  torch::Tensor forward_units(const torch::Tensor& idx);
  void build_units();

  GPT2 model_;
  dist::Group group_;
  ZeroOptions opt_;
  std::vector<FsdpUnit> units_;
  std::vector<const FsdpUnit*> regathered_;  // units with a kGather hook registered in this forward
  std::unique_ptr<ZeroAdamW> optimizer_;     // over the shards, laid end to end (Problem 5.2's update)
};

}  // namespace kit::zero
