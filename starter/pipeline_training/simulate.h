// Replays a schedule in time (given code): each rank performs its actions in order, an
// action starts when the rank is free and its input has arrived from the neighbouring
// virtual stage, and takes the cost of its stage. From that come each rank's timeline,
// the makespan, the bubble and the peak number of micro-batches a rank keeps alive.
//
// Dependencies (S = v*p virtual stages, stage s on rank s % p):
//   F(i) on stage s > 0      after F(i) on stage s-1 ended (+ comm)
//   B(i) on stage s < S-1    after B(i) on stage s+1 ended (+ comm)
//   B(i) on stage s          after F(i) on stage s (its own activations)
// A schedule whose ranks wait on each other in a cycle cannot finish: simulate() throws
// kit::Error naming every rank, the action it is stuck at and the action it waits for,
// instead of hanging as the real run would.
//
// p = 4, m = 8, F = 1, B = 2: GPipe and 1F1B take 33, interleaved (v = 2) 28.5.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "pipeline_training/action.h"

namespace kit::pp {

// Cost of one action. `forward` and `backward` are the time of one micro-batch through one
// rank's whole share of the model, so with v chunks per rank an action on one chunk costs
// forward / v (backward / v): interleaving cuts the work into smaller pieces, it does not
// add work. Per-stage costs (index = virtual stage), when given, are the cost of an action
// on that virtual stage as is, so measured per-stage times can be fed in. comm: time of one
// point-to-point message, added between the end of an action on one rank and the start of
// the action that uses its result on another rank (0 in the reference facts; nothing is
// added between two chunks on the same rank).
struct Costs {
  double forward = 1.0;
  double backward = 2.0;
  double comm = 0.0;
  std::vector<double> forward_per_stage;   // empty, or one per virtual stage
  std::vector<double> backward_per_stage;  // empty, or one per virtual stage
  // Cost of F (B) on virtual stage `stage` with `chunks` chunks per rank.
  double forward_of(int64_t stage, int64_t chunks = 1) const;
  double backward_of(int64_t stage, int64_t chunks = 1) const;
  // kit::Error when a cost is negative or not finite, or a per-stage list is not one per stage.
  void check(const PipelineShape& shape) const;
};

struct TimedAction {
  Action action;
  int64_t stage = 0;  // virtual stage
  double start = 0, end = 0;
};

struct Timeline {
  PipelineShape shape;
  std::vector<std::vector<TimedAction>> ranks;  // per rank, in the order performed
  double makespan = 0;                          // last end over all ranks
  // 1 - (busy time summed over ranks) / (p * makespan)
  double bubble_fraction = 0;
  std::vector<int64_t> peak_in_flight;          // per rank: most micro-batch-chunks forwarded, not yet backwarded
};

// Checks that `schedules` is a complete, consistent schedule of `shape`: one list per rank,
// every (micro-batch, virtual stage) has exactly one F and one B, on the stage's rank,
// the B after the F; chunks and micro-batches in range. Throws kit::Error naming the first
// problem (rank, action).
void check_complete(const Schedules& schedules, const PipelineShape& shape);

// check_complete, then the replay. Throws kit::Error on a deadlock (see above).
Timeline simulate(const Schedules& schedules, const PipelineShape& shape, const Costs& costs = {});

// The timeline as a text table, one row per rank and one column per time unit of the
// smallest cost ("F0", "B3" in the cells, blank for the bubble), then the makespan,
// bubble and peak in-flight per rank.
std::string format_timeline(const Timeline& t);

// {"ranks": p, "microbatches": m, "virtual_chunks": v, "makespan": .., "bubble_fraction": ..,
//  "peak_in_flight": [...], "timeline": [[{"op","microbatch","chunk","stage","start","end"}, ...], ...]}
nlohmann::json timeline_to_json(const Timeline& t);
Timeline timeline_from_json(const nlohmann::json& j);  // kit::Error naming what is wrong

}  // namespace kit::pp
