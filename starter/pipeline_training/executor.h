// Problem 3.2: performing a schedule on one rank (given code around two student functions).
//
// A rank holds v model chunks (stage_model.h). For one batch, the Executor takes the
// rank's actions (schedules.h) one after another:
//
//   forward_step(F(i, c))   get the input of micro-batch i for chunk c (the tokens on virtual
//                           stage 0, else the activation the previous stage sends), run the
//                           chunk, keep what backward will need, send the output on (the last
//                           stage computes the loss instead: scaled by 1/m, so the gradients
//                           the m backwards accumulate are those of the batch loss).
//   backward_step(B(i, c))  take back what forward kept, get the gradient of the output (the
//                           next stage sends it; the last stage starts from its loss),
//                           backpropagate through the chunk, send the gradient of the input
//                           to the previous stage, and let go of what was kept.
//
// Parameters' gradients accumulate over the m micro-batches; the caller then sums the
// tied embedding/head gradient between the first and last stage and takes one optimizer
// step. Sends return at once (a buffer is kept until its send is done), receives wait, with
// the dist layer's timeout: a rank never hangs on a neighbour that is gone.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kit/precision.h"
#include "pipeline_training/action.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/stage_model.h"

namespace kit::pp {

// What forward keeps for backward, per (micro-batch, chunk).
struct Kept {
  torch::Tensor input;   // what went into the chunk (requires grad unless it is token ids)
  torch::Tensor output;  // what came out: the activation sent on, or the scaled loss
};

// When one action ran on this rank (seconds since the batch started).
struct ActionTime {
  Action action;
  int64_t stage = 0;
  double start = 0, end = 0;
  double recv = 0;  // of end - start, the seconds spent in P2P receives (waiting + transfer)
  // Those receives, each [start, end] in seconds since the batch started (inside start..end).
  std::vector<std::pair<double, double>> recv_spans;
};

struct BatchResult {
  double loss = 0;                   // the batch loss (last stage's rank only; 0 elsewhere)
  std::vector<ActionTime> timeline;  // this rank's actions, in order
  int64_t peak_kept = 0;             // most (micro-batch, chunk) entries kept at once
  // steady_clock time (seconds since its epoch) when the batch started: the timelines'
  // zero. One clock for all processes of a machine, so ranks' timelines can be aligned.
  double clock_origin = 0;
};

// Called before each action with its index in the rank's schedule (tests, failure
// injection, memory sampling).
using OnAction = std::function<void(size_t, const Action&)>;

// The loop every executor shares (this file's Executor and TeraPipe's SlicedExecutor):
// the rank's actions one after another, each checked against the shape (`unit` names what
// Action::microbatch counts in the error: "micro-batch", or TeraPipe's "unit"), performed
// by `perform` and timed, with the P2P receives it waited in, and the most forwards kept
// at once (`kept`: how many are kept now). Forward actions run under `forward`'s autocast
// (--precision bf16; kit/precision.h), backward actions outside it. What is left kept after
// the last action and p2p.finish() are the caller's, whose errors name its own steps.
BatchResult run_actions(const RankSchedule& schedule, const PipelineShape& shape, int64_t rank, P2P& p2p,
                        const std::function<void(const Action&)>& perform, const std::function<size_t()>& kept,
                        const OnAction& on_action = {}, const std::string& unit = "micro-batch",
                        const ForwardPrecision& forward = {});

// The precision of forwards on `module`'s parameters' device type (the CPU when it has none).
ForwardPrecision forward_precision(Precision precision, const torch::nn::Module& module);

class Executor {
 public:
  // chunks[c] is virtual stage c*p + rank. The P2P carries the messages.
  Executor(std::vector<StageModule> chunks, const PipelineShape& shape, int64_t rank, P2P& p2p);

  // Runs `schedule` on `micro` (the batch's m micro-batches, the same on every rank) and
  // returns the loss and the timeline. Gradients accumulate into the chunks' parameters
  // (the caller zeroes them before). Throws kit::Error when the schedule leaves anything
  // kept or unsent, and when an action names a chunk or micro-batch out of range.
  // on_action (tests, failure injection): called before each action with its index.
  BatchResult run(const RankSchedule& schedule, const std::vector<MicroBatch>& micro, const OnAction& on_action = {});
  // The same on a pipeline of one stage (p = v = 1), where an action needs no message:
  // F(i) runs the whole model and its loss, B(i) starts backward from that loss. Given code,
  // not forward_step / backward_step, so a run with no pipeline (data or tensor parallelism
  // alone: Problems 4 and 5) needs none of Problem 3's student functions.
  BatchResult run_one_stage(const RankSchedule& schedule, const std::vector<MicroBatch>& micro,
                            const OnAction& on_action = {});
  // --precision: bf16 runs every forward action under autocast (run_actions); fp32 by default.
  void set_precision(Precision precision) { forward_ = forward_precision(precision, *chunks_.front()); }

  // ---- Problem 3.2 (student functions, pipeline_training/step.cpp) ------------------
  void forward_step(const Action& a);
  void backward_step(const Action& a);

  // ---- what the student functions use ------------------------------------------------
  int64_t stage_of(const Action& a) const { return virtual_stage(shape_, rank_, a.chunk); }
  bool is_first_stage(int64_t stage) const { return stage == 0; }
  bool is_last_stage(int64_t stage) const { return stage == shape_.stages() - 1; }
  StageModule& chunk(const Action& a);               // the chunk the action runs on
  const MicroBatch& microbatch(const Action& a) const;
  // Shape of the activation (and of its gradient) passed between stages for micro-batch i.
  std::vector<int64_t> activation_shape(int64_t microbatch) const;
  P2P& p2p() { return p2p_; }
  // Keeps what backward needs; kit::Error if something is already kept for (i, c).
  void keep(const Action& a, Kept kept);
  // Hands back and forgets what forward kept for (i, c); kit::Error if nothing is.
  Kept take(const Action& a);
  // Adds the loss of a micro-batch (the scaled value) to the batch loss.
  void add_loss(const torch::Tensor& scaled_loss);

  const std::vector<StageModule>& chunks() const { return chunks_; }
  const PipelineShape& shape() const { return shape_; }
  int64_t rank() const { return rank_; }
  size_t kept_count() const { return kept_.size(); }

 private:
  std::vector<StageModule> chunks_;
  PipelineShape shape_;
  int64_t rank_;
  P2P& p2p_;
  const std::vector<MicroBatch>* micro_ = nullptr;
  std::map<std::pair<int64_t, int64_t>, Kept> kept_;  // (micro-batch, chunk) -> kept
  double loss_ = 0;
  int64_t peak_kept_ = 0;
  ForwardPrecision forward_;

  BatchResult run_with(const RankSchedule& schedule, const std::vector<MicroBatch>& micro, const OnAction& on_action,
                       const std::function<void(const Action&)>& perform);
};

}  // namespace kit::pp
