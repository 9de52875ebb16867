// Problem 3.2: one action of a pipeline schedule on one rank (see pipeline_training/executor.h).
#include "pipeline_training/executor.h"

#include "kit/errors.h"

namespace kit::pp {

// F(i, c) on virtual stage s = stage_of(a), micro-batch i = a.microbatch:
//  1. The input: on the first stage (is_first_stage(s)) the token ids microbatch(a).idx;
//     elsewhere p2p().recv_activation(s - 1, i, activation_shape(i)). A received activation
//     is a fresh tensor outside any graph: call requires_grad_(true) on it, or backward
//     will never compute the gradient you must send back to stage s - 1.
//  2. output = chunk(a)->forward(input).
//  3. The last stage (is_last_stage(s)): loss = chunk(a)->loss(output, microbatch(a)) (already
//     scaled by the micro-batch's weight, 1/m), add_loss(loss), and keep(a, {input, loss}).
//  4. Any other stage: send the output on with p2p().send_activation(..., s + 1, i) and keep
//     (a, {input, output}). What is sent is data for the next rank (send output.detach());
//     what is kept must stay the very tensor autograd built, so backward can run through it.
void Executor::forward_step(const Action& a) {
  // TODO(Problem 3.2 forward_step): your code here.
  throw kit::NotImplemented("Problem 3.2 forward_step");
}

// B(i, c) on virtual stage s = stage_of(a):
//  1. Kept kept = take(a): what forward kept; take() also forgets it, so its memory is freed
//     when this function returns (Megatron frees the output as soon as it has been sent).
//  2. The last stage starts backward from its loss: kept.output.backward(). Any other stage
//     receives the gradient of its output, p2p().recv_gradient(s + 1, i, activation_shape(i)),
//     and calls kept.output.backward(grad).
//  3. Unless this is the first stage, send the gradient of the input, kept.input.grad(), to
//     stage s - 1 with p2p().send_gradient. (Token ids have no gradient: stage 0 sends nothing.)
// Parameter gradients accumulate over the micro-batches: do not zero them here.
void Executor::backward_step(const Action& a) {
  // TODO(Problem 3.2 backward_step): your code here.
  throw kit::NotImplemented("Problem 3.2 backward_step");
}

}  // namespace kit::pp
