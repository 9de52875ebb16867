// GPT-2 cut into pipeline stages (given code).
//
// S virtual stages, blocks as even as possible (blocks_per_stage from pipeline/): stage 0
// also holds the embeddings (wte, wpe), stage S-1 also the final layer norm and the output
// projection, which is tied to wte. When stage 0 and stage S-1 are different modules, the
// last one holds its own copy of wte (as Megatron does): both copies start equal, and
// after every batch sum_tied_gradients() adds their gradients together, so both take the
// same optimizer step and stay equal.
//
// Parameter names are the full model's ("wte.weight", "h.3.mlp.c_fc.weight", ...), so a
// stage's parameters can be compared one by one with a single-process model.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dist/dist.h"
#include "model/gpt2.h"
#include "pipeline_training/action.h"

namespace kit::pp {

// One micro-batch: token ids (b, T) int64, labels (b, T) int64, loss mask (b, T) float.
// weight = b / (batch rows): the micro-batch loss is multiplied by it, so the m scaled
// losses add up to the loss of the whole batch (weight = 1/m for equal micro-batches).
struct MicroBatch {
  torch::Tensor idx, labels, mask;
  double weight = 1.0;
};

// kit::Error unless m micro-batches cut `rows` rows (of `what`: "the batch", or a data-parallel
// replica's share of it) into equal parts, naming the m that would, and the fix. The one check
// of m against the rows: split_batch makes it, and the programs before any process starts.
void check_microbatches(int64_t rows, int64_t microbatches, const std::string& what = "the batch");

// Cuts a batch into m equal micro-batches along dim 0 (check_microbatches first).
std::vector<MicroBatch> split_batch(const torch::Tensor& idx, const torch::Tensor& labels, const torch::Tensor& mask,
                                    int64_t microbatches);

class StageModuleImpl : public torch::nn::Module {
 public:
  // Virtual stage `stage` of `n_stages`, with copies of `full`'s parameters for its part.
  StageModuleImpl(const GPT2& full, int64_t stage, int64_t n_stages);

  // Stage 0: token ids (b, T) -> hidden (b, T, C). Middle stages: hidden -> hidden.
  // The last stage: hidden -> logits (b, T, V) (or ids -> logits when S = 1).
  // Virtual, with loss, named_model_parameters and tied_weight: Problem 6's stages
  // (grid/stage3d.h) run the same schedules with tensor-parallel blocks.
  virtual torch::Tensor forward(const torch::Tensor& input);
  // The last stage: masked cross-entropy of the logits, times mb.weight.
  virtual torch::Tensor loss(const torch::Tensor& logits, const MicroBatch& mb) const;

  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == n_stages_ - 1; }
  int64_t stage() const { return stage_; }
  int64_t first_block() const { return first_block_; }
  int64_t num_blocks() const { return num_blocks_; }
  const GPT2Config& config() const { return cfg_; }
  // This stage's parameters under the full model's names (the tied wte copy as "wte.weight").
  virtual std::vector<std::pair<std::string, torch::Tensor>> named_model_parameters() const;
  // The wte weight this stage holds (stage 0's own, or the last stage's copy), or undefined.
  virtual torch::Tensor tied_weight() const;

  // Problem 6.3: when on, forward runs each block through recompute (recompute.h), keeping
  // only the blocks' inputs and running each block again in the backward. Off by default.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute_enabled() const { return recompute_; }

 protected:
  // For stages that build their own modules: only the stage's place and its blocks' range.
  StageModuleImpl(const GPT2Config& cfg, int64_t stage, int64_t n_stages);
  // "h.<local>.rest" -> "h.<first_block + local>.rest"; other names unchanged.
  std::string model_name(const std::string& local_name) const;
  // kit::Error unless `input` is what this stage takes: token ids within the vocabulary and
  // the context on stage 0, hidden states (b, T, n_embd) elsewhere.
  void check_input(const torch::Tensor& input) const;

 private:
  int64_t stage_, n_stages_, first_block_ = 0, num_blocks_ = 0;
  GPT2Config cfg_;
  bool recompute_ = false;

 protected:
  // The stage's modules (null where the stage has none), for stages that run them
  // differently (Problem 7's token slices, terapipe/pipeline.h).
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(StageModule);

// kit::Error when a model of n_layer blocks cannot give each of the shape's v·p virtual
// stages a block (naming both and --n-layer as the fix). Every pipeline program and the
// 3D grid check this one way, before any process waits.
void check_blocks_fit(int64_t n_layer, const PipelineShape& shape);

// The chunks of rank `rank`: chunk c is virtual stage c*p + rank. kit::Error when the
// model has fewer blocks than virtual stages (check_blocks_fit).
std::vector<StageModule> build_rank_chunks(const GPT2& full, const PipelineShape& shape, int64_t rank);

// Adds the gradients of the two wte copies (stage 0 on pipeline rank 0, stage S-1 on rank
// p-1) so both hold the gradient of the tied weight; a point-to-point exchange when they
// are on different ranks, a local sum when on the same. Call on every rank after backward.
// `tied`: the group of those two ranks, first stage's first (the 3D grid's embedding
// group, grid/grid.h); without one the world, where pipeline rank r is world rank r.
void sum_tied_gradients(const std::vector<StageModule>& chunks, const PipelineShape& shape, int64_t rank,
                        const dist::Group* tied = nullptr);

}  // namespace kit::pp
