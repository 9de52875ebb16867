// Forward and backward of one batch on one pipeline rank: the part of a training step that
// the grid's trainer (grid/trainer.cpp, bin/train_parallel.cpp) runs for every pipeline, Problem
// 3's and TeraPipe's, as Megatron-LM's forward_backward_func is the one pipeline step its
// trainers call.
//
//   1. the chunks' gradients cleared;
//   2. the rank's rows of the batch cut into m micro-batches (split_batch), and the rank's
//      schedule run on them (`run`: an executor's run, Executor or terapipe's SlicedExecutor);
//   3. the tied embedding gradient summed between the first and the last stage.
//
// The caller then does what differs: averaging over data-parallel replicas (the 3D grid),
// the optimizer step, its timing and its records.
#pragma once
#include <torch/types.h>

#include <functional>
#include <vector>

#include "dist/dist.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/stage_model.h"

namespace kit::pp {

// This rank's place in its pipeline.
struct PipelineRank {
  std::vector<StageModule> chunks;     // this rank's chunks (stages), chunk c = stage c·p + rank
  PipelineShape shape;
  int64_t rank = 0;                    // in the pipeline (0..p-1)
  const dist::Group* tied = nullptr;   // the first and last stage's ranks (sum_tied_gradients)
};

using RunBatch = std::function<BatchResult(const std::vector<MicroBatch>&)>;

// Steps 1 to 3 above on rows idx/labels/mask (B' rows: m must divide them). The gradients
// are freed before the batch, or zeroed in place with zero_in_place (a memory count then
// never sees them allocated again, as LibTorch 1.13's zero_grad did). Returns the batch's
// result (loss on the last stage's rank, timeline, peak kept).
BatchResult forward_backward(const PipelineRank& rank, const RunBatch& run, const torch::Tensor& idx,
                             const torch::Tensor& labels, const torch::Tensor& mask, int64_t microbatches,
                             bool zero_in_place = false);

}  // namespace kit::pp
