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
  // BEGIN SOLUTION 7.2 sliced_schedule
  pp::RankSchedule out;
  for (int64_t u = 0; u < microbatches * slices; ++u)
    for (int64_t c = 0; c < chunks; ++c) out.push_back(pp::F(u, c));
  for (int64_t i = 0; i < microbatches; ++i)
    for (int64_t s = slices - 1; s >= 0; --s)
      for (int64_t c = chunks - 1; c >= 0; --c) out.push_back(pp::B(i * slices + s, c));
  return out;
  // END SOLUTION
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
  // BEGIN SOLUTION 7.2 forward_slice
  const int64_t j = stage_of(a);
  torch::Tensor input = is_first_stage(j)
                            ? tokens(a)
                            : p2p().recv_activation(j - 1, a.microbatch, activation_shape(a)).requires_grad_(true);
  std::vector<KVCache> caches = context(a);
  torch::Tensor output = stage(a)->forward_slice(input, offset_of(a), caches);
  hand_on(a, caches);
  if (is_last_stage(j)) {
    torch::Tensor loss = slice_loss(a, output);
    add_loss(loss);
    keep(a, {input, loss, caches});
  } else {
    p2p().send_activation(output.detach(), j + 1, a.microbatch);
    keep(a, {input, output, caches});
  }
  // END SOLUTION
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
  // BEGIN SOLUTION 7.2 backward_slice
  const int64_t j = stage_of(a);
  KeptSlice kept = take(a);
  std::vector<torch::Tensor> outputs{kept.output};
  std::vector<torch::Tensor> grads{is_last_stage(j)
                                       ? torch::ones_like(kept.output)
                                       : p2p().recv_gradient(j + 1, a.microbatch, activation_shape(a))};
  const std::vector<KVCache> later = context_gradient(a);
  for (size_t b = 0; b < later.size(); ++b) {
    if (later[b].k.defined()) {
      outputs.push_back(kept.caches[b].k);
      grads.push_back(later[b].k);
    }
    if (later[b].v.defined()) {
      outputs.push_back(kept.caches[b].v);
      grads.push_back(later[b].v);
    }
  }
  torch::autograd::backward(outputs, grads);
  if (!is_first_stage(j)) p2p().send_gradient(kept.input.grad(), j - 1, a.microbatch);
  // END SOLUTION
}

}  // namespace kit::terapipe
