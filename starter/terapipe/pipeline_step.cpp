// Problem 7.2: one slice forward and one slice backward on one stage of the token-slice
// pipeline (see terapipe/pipeline.h).
#include <torch/torch.h>

#include "kit/errors.h"
#include "terapipe/pipeline.h"

namespace kit::terapipe {

// Forwards: for each micro-batch i, each slice s (unit u = i * n + s), each stage c of this
// rank: F(u, c). Then backwards: for each micro-batch i, each slice from s = n - 1 down to 0,
// each stage from c = chunks - 1 down to 0: B(u, c). A slice's backward needs the gradient
// the later slices leave on its keys and values, so the later slices go first.
pp::RankSchedule sliced_schedule(int64_t microbatches, int64_t slices, int64_t chunks) {
  // TODO(Problem 7.2 sliced_schedule): your code here.
  throw kit::NotImplemented("Problem 7.2 sliced_schedule");
}

// F(u, c): slice s = slice_of(a) of micro-batch u / n on stage j = stage_of(a).
//  1. The input: on the first stage the slice's token ids, tokens(a); elsewhere
//     p2p().recv_activation(j - 1, a.microbatch, activation_shape(a)), which must require
//     grad (its gradient goes back to stage j - 1).
//  2. caches = context(a): the earlier slices' keys and values on this stage, as leaves.
//  3. output = stage(a)->forward_slice(input, offset_of(a), caches); the caches grow by the
//     slice's own keys and values. hand_on(a, caches): they are slice s + 1's context.
//  4. The last stage: loss = slice_loss(a, output), add_loss(loss), keep {input, loss,
//     caches}. Any other stage: send output.detach() to stage j + 1 with
//     p2p().send_activation and keep {input, output, caches}.
void SlicedExecutor::forward_slice(const pp::Action& a) {
  // TODO(Problem 7.2 forward_slice): your code here.
  throw kit::NotImplemented("Problem 7.2 forward_slice");
}

// B(u, c): the same slice going back (the schedule runs a micro-batch's slices last first).
//  1. KeptSlice kept = take(a).
//  2. What to backpropagate: the output with its gradient (the last stage: the loss, with
//     gradient ones; elsewhere p2p().recv_gradient(j + 1, a.microbatch, activation_shape(a))),
//     and, for each block whose context_gradient(a) is defined, the kept caches' k and v with
//     those gradients: the later slices' attention to this slice's keys and values.
//  3. One torch::autograd::backward over all of them together (each slice's graph is
//     traversed once; its context leaves collect the gradient for slice s - 1).
//  4. Unless this is the first stage, send kept.input.grad() to stage j - 1.
void SlicedExecutor::backward_slice(const pp::Action& a) {
  // TODO(Problem 7.2 backward_slice): your code here.
  throw kit::NotImplemented("Problem 7.2 backward_slice");
}

}  // namespace kit::terapipe
