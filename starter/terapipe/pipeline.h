// Problem 7.2: the token-slice pipeline (TeraPipe, Li et al., ICML 2021).
//
// GPipe cuts a batch into micro-batches; TeraPipe also cuts each micro-batch's sequence into
// token slices l_1 .. l_n and sends the slices down the pipeline one after another. A unit of
// work is (micro-batch i, slice s); Problem 3's actions carry it as "micro-batch"
// u = i * n + s, so its schedules' types, P2P messages and simulator serve unchanged.
//
// Slice s of a micro-batch on stage j needs
//   - slice s on stage j - 1 (its input, as in any pipeline), and
//   - slice s - 1 on stage j: the keys and values of the earlier tokens, which each block of
//     stage j cached when it ran the earlier slices (Problem 7.1).
// Backward runs the other way: slice s's gradient reaches the earlier slices' keys and values,
// so a micro-batch's slices go back last slice first, each handing the gradient of the
// cached keys and values on to the slice before it.
//
// The cache crosses from one slice to the next as fresh leaves: after slice s's forward the
// executor detaches its caches (prefix + own keys and values) and gives them, requiring grad,
// to slice s + 1 as context. Slice s + 1's backward fills their .grad; slice s's backward then
// starts from two gradients: its output's (sent by the next stage, or its loss) and that one,
// on the caches it produced. Each slice's graph is thus backpropagated exactly once, as in
// TeraPipe, instead of re-running the earlier slices' graphs for every later slice.
//
//   stage 1:      F0 F1 F2 F3 . . . B3 B2 B1 B0          (m = 1, n = 4 slices, GPipe order)
//   stage 0:   F0 F1 F2 F3 . . . . . . B3 B2 B1 B0
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "pipeline_training/action.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/stage_model.h"
#include "terapipe/sliced_attention.h"

namespace kit::terapipe {

// A pipeline stage of GPT-2 (Problem 3's, same parameters and names) that also runs one
// token slice at a time.
class SlicedStageImpl : public pp::StageModuleImpl {
 public:
  SlicedStageImpl(const GPT2& full, int64_t stage, int64_t n_stages) : pp::StageModuleImpl(full, stage, n_stages) {}

  // The slice of l tokens at positions offset .. offset + l - 1. input: token ids (b, l) on
  // the first stage (embedded at their own positions), hidden states (b, l, C) elsewhere.
  // caches: one per block of this stage, holding the earlier slices' keys and values; each
  // grows by this slice's (sliced_block). Returns hidden states, or logits on the last stage.
  torch::Tensor forward_slice(const torch::Tensor& input, int64_t offset, std::vector<KVCache>& caches);
};
TORCH_MODULE(SlicedStage);

// The stages of rank `rank` (stage c * p + rank as its chunk c, as pp::build_rank_chunks).
std::vector<SlicedStage> build_sliced_stages(const GPT2& full, const pp::PipelineShape& shape, int64_t rank);

// The same stages as Problem 3's type, for pp::sum_tied_gradients and parameter listings.
std::vector<pp::StageModule> as_stage_modules(const std::vector<SlicedStage>& stages);

// What a slice's forward keeps for its backward.
struct KeptSlice {
  torch::Tensor input;          // the slice's input (requires grad unless token ids)
  torch::Tensor output;         // the activation sent on, or the slice's scaled loss
  std::vector<KVCache> caches;  // per block: the keys and values after this slice (context + own)
};

// Problem 7.2 (student function, terapipe/pipeline_step.cpp): the actions of a rank that
// holds `chunks` stages, for m micro-batches of n slices (units u = i * n + s). GPipe's order:
// every unit's forward in order, slice by slice and micro-batch by micro-batch (with several
// stages on the rank, each unit through all of them, first stage first); then the backwards
// micro-batch by micro-batch, the last slice first (and the last stage first). The order is
// the same on every rank.
pp::RankSchedule sliced_schedule(int64_t microbatches, int64_t slices, int64_t chunks);

// Given: checks the shape (shape.microbatches = m * n units, rank in range; kit::Error naming
// the fix otherwise), then sliced_schedule(m, n, shape.virtual_chunks).
pp::RankSchedule make_sliced_schedule(const pp::PipelineShape& shape, int64_t slices, int64_t rank);

class SlicedExecutor {
 public:
  // shape: p ranks, m * n units, v stages per rank; lengths: the n slices (sum = the
  // micro-batches' sequence length).
  SlicedExecutor(std::vector<SlicedStage> stages, const pp::PipelineShape& shape, std::vector<int64_t> lengths,
                 int64_t rank, pp::P2P& p2p);

  // Runs the schedule on the m micro-batches (whole sequences; this cuts them into slices).
  // Gradients accumulate into the stages' parameters. Throws kit::Error when the schedule
  // leaves anything kept or names a unit out of range. on_action: as Executor::run's.
  pp::BatchResult run(const pp::RankSchedule& schedule, const std::vector<pp::MicroBatch>& micro,
                      const pp::OnAction& on_action = {});
  // --precision: bf16 runs every slice's forward under autocast (pp::run_actions); fp32 by default.
  void set_precision(Precision precision) { forward_ = pp::forward_precision(precision, *stages_.front()); }

  // ---- Problem 7.2 (student functions, terapipe/pipeline_step.cpp) ------------------
  void forward_slice(const pp::Action& a);
  void backward_slice(const pp::Action& a);

  // ---- what the student functions use ------------------------------------------------
  int64_t stage_of(const pp::Action& a) const { return pp::virtual_stage(shape_, rank_, a.chunk); }
  bool is_first_stage(int64_t stage) const { return stage == 0; }
  bool is_last_stage(int64_t stage) const { return stage == shape_.stages() - 1; }
  int64_t slice_of(const pp::Action& a) const { return a.microbatch % n(); }
  int64_t offset_of(const pp::Action& a) const;  // tokens before the slice: l_1 + .. + l_{s-1}
  int64_t length_of(const pp::Action& a) const;  // l_s
  SlicedStage& stage(const pp::Action& a);
  pp::P2P& p2p() { return p2p_; }
  // The slice's token ids (b, l), for the first stage.
  torch::Tensor tokens(const pp::Action& a) const;
  // Shape of the activation (and its gradient) of the slice between stages: (b, l, C).
  std::vector<int64_t> activation_shape(const pp::Action& a) const;
  // The slice's share of the batch loss, from the last stage's logits (b, l, V): its tokens'
  // cross-entropy divided by each example's count of all its counted tokens, so the n
  // slices' losses add up to the micro-batch's loss (times its weight).
  torch::Tensor slice_loss(const pp::Action& a, const torch::Tensor& logits) const;
  void add_loss(const torch::Tensor& scaled_loss);

  // The context of slice s on this stage: the caches of slice s - 1, detached, as fresh
  // leaves that require grad (empty caches for s = 0). Run the slice's forward on these.
  std::vector<KVCache> context(const pp::Action& a);
  // After the forward: the caches slice s produced become slice s + 1's context.
  void hand_on(const pp::Action& a, const std::vector<KVCache>& caches);
  // In the backward: the gradient that slice s + 1's backward left on its context, i.e. on
  // the caches slice s produced (undefined tensors for the last slice). Forgets the context.
  std::vector<KVCache> context_gradient(const pp::Action& a);

  void keep(const pp::Action& a, KeptSlice kept);  // kit::Error if (unit, chunk) is kept
  KeptSlice take(const pp::Action& a);             // kit::Error if it is not

  const std::vector<SlicedStage>& stages() const { return stages_; }
  const pp::PipelineShape& shape() const { return shape_; }
  size_t kept_count() const { return kept_.size(); }

 private:
  int64_t n() const { return static_cast<int64_t>(lengths_.size()); }
  const pp::MicroBatch& microbatch(const pp::Action& a) const;
  std::vector<SlicedStage> stages_;
  pp::PipelineShape shape_;
  std::vector<int64_t> lengths_, offsets_;
  int64_t rank_;
  pp::P2P& p2p_;
  const std::vector<pp::MicroBatch>* micro_ = nullptr;
  std::map<std::pair<int64_t, int64_t>, KeptSlice> kept_;                // (unit, chunk)
  std::map<std::pair<int64_t, int64_t>, std::vector<KVCache>> handed_;  // (unit, chunk) -> next slice's context
  double loss_ = 0;
  ForwardPrecision forward_;
};

}  // namespace kit::terapipe
