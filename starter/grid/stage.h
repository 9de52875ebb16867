// Problem 6 (given code): one pipeline stage of GPT-2 whose blocks are tensor-parallel.
//
// The stage is Problem 3's (pipeline_training/stage_model.h: the same blocks per stage, the
// same full-model parameter names, run by the same Executor and schedules) built from
// Problem 4's layers over the grid's tensor group of t ranks: ParallelBlocks, a
// VocabParallelEmbedding on the first stage, and on the last stage ln_f and the output
// projection tied to this rank's vocabulary rows of wte, with the vocab-parallel loss. When
// the first and last stages differ, the last one holds its own copy of those rows; the
// trainer adds the two copies' gradients over the grid's embedding group, as Megatron does.
//
// Every tensor rank of a stage runs the whole micro-batch: the activation it receives and
// sends between stages is whole (b, T, C), the same on the t ranks.
//
// set_recompute(true) (the base's, Problem 6.3) runs each ParallelBlock through recompute: its
// backward runs the block's forward again, all-reduces included, in the same order on the t
// ranks (each runs the same schedule), with the dropout masks of the forward.
#pragma once
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include "dist/dist.h"
#include "model/checkpoint_layout.h"
#include "model/gpt2.h"
#include "pipeline_training/stage_model.h"
#include "tensor_parallel/vocab.h"

namespace kit::grid {

class TensorParallelStageImpl : public pp::StageModuleImpl {
 public:
  // Stage `stage` of `n_stages` over the tensor group; kit::Error when t does not divide
  // n_head, n_embd or vocab_size. Parameters are uninitialised until load_full.
  TensorParallelStageImpl(const GPT2Config& cfg, int64_t stage, int64_t n_stages, dist::Group tensor);

  // This tensor rank's shard of this stage's part of a whole model.
  void load_full(const GPT2Impl& full);

  // Stage 0: ids -> hidden; middle: hidden -> hidden; the last stage: hidden -> this rank's
  // logits slice (b, T, V/t), for tokens [vocab_start, vocab_end) of wte.
  torch::Tensor forward(const torch::Tensor& input) override;
  // The last stage: the vocab-parallel cross-entropy of the slices, times mb.weight.
  torch::Tensor loss(const torch::Tensor& logits, const pp::MicroBatch& mb) const override;
  torch::Tensor tied_weight() const override { return wte ? wte->weight : torch::Tensor(); }

  // Collective over the tensor group: this stage's parameters, whole, under the full
  // model's names (the tied copy on the last stage included), on every tensor rank.
  TensorDict whole_state_dict() const;

  const dist::Group& tensor_group() const { return tensor_; }

 private:
  dist::Group tensor_;
  tp::VocabParallelEmbedding wte{nullptr};  // stage 0's table; the last stage's tied copy
  torch::nn::Embedding wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};  // tp::ParallelBlock
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(TensorParallelStage);

}  // namespace kit::grid
