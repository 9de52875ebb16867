// Pipeline timelines as trace events (kit/trace.h): the simulator's (schedule --kind --trace)
// and the executors' measured ones (train_parallel --trace, with or without --slices).
//
// Each action is one event on its rank's track: "F mb3" (category "forward"), "B mb3"
// ("backward"); " c1" added for chunk 1 when a rank holds several chunks; TeraPipe's unit
// u = i * n + s shows as "F mb1 s2" (micro-batch i = 1, slice s = 2). args: microbatch, chunk,
// stage (virtual), and slice and unit for TeraPipe.
//
// Measured batches also carry each P2P receive inside an action, as a "recv" event nested in
// it: the executor timed it (waiting for the neighbour plus the transfer, which it cannot tell
// apart, so there is no separate "wait"). Sends are asynchronous and not timed, and nothing
// happens between two actions, so there are no "send" or "wait" events. The simulator's
// timeline has actions only: its idle time is the bubble, left blank.
#pragma once
#include <cstdint>
#include <vector>

#include "kit/trace.h"
#include "pipeline_training/simulate.h"

namespace kit::pp {

struct BatchResult;  // pipeline_training/executor.h

// How an action's micro-batch number reads: TeraPipe's unit i * n + s when slices = n > 1.
struct ActionNaming {
  int64_t virtual_chunks = 1;  // v: name the chunk when > 1
  int64_t slices = 1;  // n: TeraPipe's slices per micro-batch
};

// "F mb3", "B mb3 c1", "F mb1 s2".
std::string trace_name(const Action& a, const ActionNaming& naming);

// A Timeline (the simulator's, or one read back with timeline_from_json): one track per rank
// ("rank r"), one event per action, its time unit as one second. otherData: ranks,
// microbatches, chunks, makespan, bubble_fraction (the caller adds program, schedule, unit).
trace::Trace timeline_trace(const Timeline& t);

// One measured batch of one rank on track `track`: its actions and their receives, at
// batch.clock_origin + start (the steady clock, shared by the processes of one machine, so
// the ranks' files line up). `step` goes into every event's args.
std::vector<trace::Event> measured_events(const BatchResult& batch, int64_t track, const ActionNaming& naming,
                                          int64_t step);

}  // namespace kit::pp
