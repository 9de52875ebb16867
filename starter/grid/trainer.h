// Problem 6 (given code): GPT-2 trained on the 3D grid, Megatron-LM's PTD-P.
//
// Each rank holds v chunks (virtual pipeline stages) of the model with tensor-parallel
// blocks (grid/stage.h; at t = 1 Problem 3's own stages, pipeline_training/stage_model.h, so
// a grid without tensor parallelism runs no Problem 4 code) and runs Problem 3's schedules
// over its pipeline, with Problem 3's Executor and your forward_step / backward_step (at
// p = v = 1, no pipeline, the Executor's given one-stage run: data or tensor parallelism
// alone runs no Problem 3 code). One training step on the global batch:
//
//   1. the data-parallel rank dp takes rows [dp·B/d, (dp+1)·B/d) of the batch (every rank of
//      a replica, whatever its stage or tensor rank, the same rows) and cuts them into m
//      micro-batches;
//   2. the schedule runs: activations and their gradients go between the stages of this
//      rank's pipeline (the same tensor rank on each stage), each block all-reduces over the
//      tensor group twice forward and twice backward (Problem 4);
//   3. the tied embedding: the first and the last stage add their wte gradients over the
//      embedding group (Megatron's embedding group), so both copies take the same step;
//   4. data parallelism: the gradients are averaged over the data group and AdamW steps
//      (Assignment 1), or ZeRO-1/2 over the data group does both (Problem 5). At p = t = 1
//      the optimizer may be ZeRO-3 (FSDP, Problem 5.5), which shards whole GPT-2 units: the
//      step then runs the model's forward through its units in place of a schedule;
//   5. the loss of the global batch (the mean of the replicas' losses) reaches every rank.
//
// With Options3D::slices (Problem 7, TeraPipe) each micro-batch also goes down the pipeline
// token slice by token slice: the stages are terapipe's SlicedStages (Problem 3's, which run a
// slice at a time), the shape's "micro-batches" the m·n units, the executor its SlicedExecutor.
//
//   ProcessGrid grid = make_process_grid({.dp = 2, .pp = 2, .tp = 2});
//   Trainer3D trainer(*full, grid, options);   // every rank passes the same whole model
//   StepReport r = trainer.step(idx, labels, mask);
//   TensorDict whole = trainer.gather_state_dict();   // collective: the whole model on rank 0
#pragma once
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grid/grid.h"
#include "grid/stage.h"
#include "model/checkpoint_layout.h"
#include "model/gpt2.h"
#include "pipeline_training/action.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/schedules.h"

namespace kit::zero {
class DataParallelOptimizer;
}

namespace kit::grid {

struct Options3D {
  int64_t microbatches = 1;                            // m, per data-parallel replica
  int64_t virtual_chunks = 1;                          // v (interleaved only)
  pp::ScheduleKind schedule = pp::ScheduleKind::OneFOneB;
  std::string optimizer = "adamw";                     // adamw, zero1 or zero2 over the data group
                                                       // (zero/data_parallel_optimizer.h); zero3
                                                       // (FSDP) at p = t = 1 only
  double lr = 1e-4, weight_decay = 0.0;                // AdamW (torch's betas and eps)
  Precision precision = Precision::FP32;               // bf16: the forwards under autocast; with
                                                       // zero1/2 bf16 parameters, an fp32 master
  pp::Schedules schedules;                             // every pipeline rank's actions (train_parallel
                                                       // --schedule-file); empty: make_schedule's
  std::vector<int64_t> slices;                         // TeraPipe (Problem 7): each micro-batch's token
                                                       // slices, run by its SlicedExecutor in
                                                       // GPipe's order (t = 1); empty: whole
};

// What a run measures around a step, kept out of the step itself (as llm.c keeps its
// diagnostics apart): each hook may be empty.
struct StepHooks {
  std::function<void()> before_schedule;  // this rank's schedule is about to start
  pp::OnAction before_action;             // before each of its actions
  std::function<void()> after_schedule;   // it has finished (the gradients are all there)
  std::function<void()> after_backward;   // before the optimizer step: the gradients as computed
  bool zero_in_place = false;             // zero the gradients in place (memory counting: see
                                          // pipeline_training/forward_backward.h)
};

// Seconds this rank spent in each kind of communication during one step (dist's counters:
// time inside blocking calls and waits). Pipeline: inside P2P receives, which includes
// waiting for the neighbour (the bubble); data: the gradient all-reduce, or ZeRO's ring
// reduce-scatter and all-gather; embedding: the tied gradient's all-reduce.
struct CommSeconds {
  double data = 0, tensor = 0, pipeline = 0, embedding = 0;
};

struct StepReport {
  double loss = 0;               // the global batch's loss, on every rank
  pp::BatchResult batch;         // this rank's schedule: timeline and peak kept
  CommSeconds comm;
  double seconds = 0;            // the whole step, on this rank
};

class Trainer3D {
 public:
  // Builds this rank's chunks from `full` (the same weights on every rank). kit::Error
  // naming the fix when the model has fewer blocks than the v·p stages, when t does not
  // divide n_head, n_embd or vocab_size, or when the schedule does not fit (p, m, v).
  Trainer3D(const GPT2& full, const ProcessGrid& grid, Options3D options);
  ~Trainer3D();

  // One training step on the global batch (B rows, the same on every rank). kit::Error
  // when d·m does not divide B.
  StepReport step(const torch::Tensor& idx, const torch::Tensor& labels, const torch::Tensor& mask,
                  const StepHooks& hooks = {});

  // Collective over the world: the whole model, as kit::state_dict writes a one-process
  // model's (Kit layout, lm_head.weight tied), on world rank 0; empty on the other ranks.
  TensorDict gather_state_dict() const;

  // This rank's chunks: TensorParallelStages at t > 1, Problem 3's StageModules at t = 1.
  // zero3: none, the model is FSDP's units (the optimizer's).
  const std::vector<pp::StageModule>& chunks() const { return chunks_; }
  // This rank's parameters (every chunk's), each once.
  std::vector<torch::Tensor> parameters() const;
  const ProcessGrid& grid() const { return grid_; }
  const pp::PipelineShape& pipeline_shape() const { return shape_; }
  // The pipeline's messages: counts and the seconds spent receiving.
  const pp::P2P& p2p() const;
  // The data-parallel optimizer (its byte counts).
  const zero::DataParallelOptimizer& optimizer() const;

 private:
  void build_stages(const GPT2& full, torch::ScalarType type);
  void build_sliced_stages(const GPT2& full, torch::ScalarType type);
  GPT2 whole_model(const GPT2& full, torch::ScalarType type) const;
  pp::BatchResult whole_model_forward_backward(const torch::Tensor& idx, const torch::Tensor& labels,
                                               const torch::Tensor& mask, const StepHooks& hooks);

  ProcessGrid grid_;
  Options3D options_;
  pp::PipelineShape shape_;
  pp::RankSchedule schedule_;
  std::vector<pp::StageModule> chunks_;
  struct Impl;  // the P2P, the Executor and the optimizer
  std::unique_ptr<Impl> impl_;
};

}  // namespace kit::grid
