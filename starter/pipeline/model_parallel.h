// GPT-2 across stages: the model-parallel baseline and, Problem 2.3, pipeline parallelism
// (the original's GPT2ModelParallel in pipeline/model_parallel.py and parallelize() in
// pipeline/model.py).
//
// Placement, for n stages and L transformer blocks:
//   stage 0       wte, wpe (the embeddings) and the first blocks
//   stage j       the next run of consecutive blocks (blocks_per_stage)
//   stage n - 1   the last blocks and ln_f; the output projection is tied to wte, so
//                 the logits are computed where wte lives
// Model parallel: forward runs block after block on the caller's thread, moving the whole
// batch from stage to stage, so only one stage ever works at a time.
// Pipeline parallel: the blocks go into a Pipe, which splits the batch into micro-batches
// and keeps every stage busy (see pipe.h). Same placement, same parameters, same result.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "model/gpt2.h"
#include "pipeline/pipe.h"
#include "pipeline/stage.h"

namespace kit {

// Consecutive blocks per stage: the first (n_blocks % n_stages) stages get
// ceil(n_blocks / n_stages) blocks, the others floor(n_blocks / n_stages). When n_stages
// divides n_blocks that is n_blocks / n_stages each; no stage is ever left empty.
// Throws kit::Error when n_stages < 1 or n_stages > n_blocks.
std::vector<int64_t> blocks_per_stage(int64_t n_blocks, int64_t n_stages);

class GPT2ModelParallel {
 public:
  // Places `model` on `stages` (moves its parameters) as described above.
  GPT2ModelParallel(GPT2 model, std::vector<StageDevice> stages);

  // Problem 2.3: put the transformer blocks, each pinned to its stage, into a Sequential
  // and wrap that in a Pipe with `split_size` rows per micro-batch. From then on forward()
  // runs the blocks through the pipe. threads_per_stage: see PipeImpl.
  void prepare_pipeline_parallel(int64_t split_size, int64_t threads_per_stage = 0);

  // idx (B, T) int64 -> logits (B, T, V), on the first stage's device (where wte lives).
  torch::Tensor forward(const torch::Tensor& idx);

  GPT2& model() { return model_; }
  const std::vector<StageDevice>& stages() const { return stages_; }
  const std::vector<StageDevice>& block_stages() const { return block_stages_; }  // block b's stage
  bool pipeline_parallel() const { return !pipe_.is_empty(); }
  Pipe& pipe() { return pipe_; }

 private:
  GPT2 model_;
  std::vector<StageDevice> stages_;
  std::vector<StageDevice> block_stages_;
  Pipe pipe_{nullptr};
};

}  // namespace kit
