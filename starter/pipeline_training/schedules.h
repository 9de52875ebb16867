// Problem 3.1: the three pipeline schedules, as the ordered list of actions of one rank
// (see action.h for F(i, c) and B(i, c)). p ranks, m micro-batches, v chunks per rank.
//
//   GPipe            all m forwards, then all m backwards (in micro-batch order).
//   1F1B             PipeDream-flush, Megatron's non-interleaved schedule: rank r first does
//                    min(p - r - 1, m) warm-up forwards, then alternates one forward and one
//                    backward until every forward is done, then the remaining backwards.
//                    Same bubble as GPipe, but rank r keeps at most p - r micro-batches alive.
//   Interleaved      Megatron's interleaved 1F1B with v chunks per rank (virtual stage c*p + r
//                    on rank r); m must be a multiple of p. Bubble (p-1)(F+B)/v.
//
// Every schedule here runs a chunk's backwards in micro-batch order (B0 first), as
// Megatron-LM does: micro-batch 0 finished its forward first, so its gradient is the first
// one the next rank can send back. Any other order makes ranks wait or deadlock.
//
// The builders below only order actions: they need no tensors and no processes, so the
// tests check them exactly and the simulator (simulate.h) replays them.
#pragma once
#include <cstdint>
#include <string>

#include "pipeline_training/action.h"

namespace kit::pp {

// Student functions (solution in pipeline_training/schedules.cpp). Each returns rank
// `rank`'s actions; arguments are already validated by make_schedule.
RankSchedule gpipe_schedule(int64_t ranks, int64_t microbatches, int64_t rank);
RankSchedule one_f_one_b_schedule(int64_t ranks, int64_t microbatches, int64_t rank);
RankSchedule interleaved_schedule(int64_t ranks, int64_t microbatches, int64_t chunks, int64_t rank);

// Given: checks the shape (p >= 1, m >= 1, v >= 1; v == 1 unless interleaved; for
// interleaved m % p == 0 and v >= 2 unless p == 1), throwing kit::Error that names the
// bad value and what would work; then builds every rank's schedule.
void check_shape(ScheduleKind kind, const PipelineShape& shape);
Schedules make_schedule(ScheduleKind kind, const PipelineShape& shape);

// Given: what `kind` is on a pipeline of one stage (p = v = 1), built here and not by the
// functions above, so that a run with no pipeline (Problems 4 and 5) needs no Problem 3.1
// code: GPipe's m forwards then m backwards; 1F1B's (and interleaved's, at v = 1) F0 B0 F1 B1 ...
RankSchedule one_stage_schedule(ScheduleKind kind, int64_t microbatches);

// Per-rank action lists from a JSON file: {"schedules": [[{"op": "F", "microbatch": 0,
// "chunk": 0}, ...], ...]} or the bare list of lists, one list per rank. kit::Error naming
// `flag` and the file when it cannot be read, is not JSON or has not `ranks` lists.
Schedules read_schedules_file(const std::string& path, int64_t ranks, const std::string& flag);

}  // namespace kit::pp
