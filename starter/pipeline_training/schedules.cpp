// Problem 3.1: the pipeline schedules (see pipeline_training/schedules.h).
#include "pipeline_training/schedules.h"

#include <algorithm>

#include "kit/errors.h"

namespace kit::pp {

// Problem 3.1 gpipe_schedule. Every rank does the same thing: the m forwards F(0) .. F(m-1),
// then the m backwards B(0) .. B(m-1), in micro-batch order, all on chunk 0. It keeps all
// m micro-batches' activations until its first backward. p = 2, m = 3, either rank:
//   F0 F1 F2 B0 B1 B2
// (`ranks` and `rank` do not change the order; the simulator makes the later ranks wait.)
RankSchedule gpipe_schedule(int64_t ranks, int64_t microbatches, int64_t rank) {
  // TODO(Problem 3.1 gpipe_schedule): your code here.
  throw kit::NotImplemented("Problem 3.1 gpipe_schedule");
}

// Problem 3.1 one_f_one_b_schedule (PipeDream-flush). Rank r:
//   1. warm-up: w = min(p - r - 1, m) forwards F(0) .. F(w-1). The last rank needs none:
//      it can start the backward of a micro-batch right after its forward.
//   2. steady state: while forwards are left, one forward then one backward, both in
//      micro-batch order: F(w) B(0) F(w+1) B(1) ...
//   3. cool-down: the backwards that are left, in micro-batch order.
// Backwards always go in micro-batch order (the gradient of micro-batch i arrives from the
// next rank in that order). Rank r then keeps at most p - r micro-batches alive.
// p = 2, m = 4:  rank 0: F0 F1 B0 F2 B1 F3 B2 B3
//                rank 1: F0 B0 F1 B1 F2 B2 F3 B3
// With p - r warm-ups every rank keeps one micro-batch more for nothing (same makespan); with
// p - r - 2 ranks sit idle (p = 4, m = 8: makespan 54, not 33); with warm-ups that grow with r
// two neighbours both wait to receive first and the run deadlocks (the simulator says so).
RankSchedule one_f_one_b_schedule(int64_t ranks, int64_t microbatches, int64_t rank) {
  // TODO(Problem 3.1 one_f_one_b_schedule): your code here.
  throw kit::NotImplemented("Problem 3.1 one_f_one_b_schedule");
}

// Problem 3.1 interleaved_schedule (Megatron-LM's forward_backward_pipelining_with_interleaving).
// Rank r holds v chunks (chunk c is virtual stage c*p + r) and does m*v forwards and m*v
// backwards. Number them k = 0 .. m*v-1 and cut them into groups of p*v:
//   k-th forward:   g = k % (p*v);  chunk g / p;           micro-batch (k / (p*v))*p + g % p
//   k-th backward:  the same micro-batch, chunk v - 1 - g / p   (backwards run the chunks in reverse)
// so p micro-batches go through chunk 0, then the same p through chunk 1, ... (m must be a
// multiple of p; make_schedule checked it). The order of the k's is 1F1B's:
//   warm-up  w forwards: w = m*v when m == p (all forwards, then all backwards), otherwise
//            w = min(m*v, (p - r - 1)*2 + (v - 1)*p)
//   steady   forward k + w, then backward k, for k = 0 .. m*v - w - 1
//   cool-down the remaining backwards.
// p = 2, m = 4, v = 2, rank 1:  F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3
// ("F0.1" is F(0, 1): micro-batch 0 on chunk 1.)
RankSchedule interleaved_schedule(int64_t ranks, int64_t microbatches, int64_t chunks, int64_t rank) {
  // TODO(Problem 3.1 interleaved_schedule): your code here.
  throw kit::NotImplemented("Problem 3.1 interleaved_schedule");
}

}  // namespace kit::pp
