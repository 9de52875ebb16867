// Problem 3: what one pipeline rank does, as data.
//
// A schedule is, for each rank, the ordered list of actions it performs for one batch:
//
//   F(i, c)  forward of micro-batch i through this rank's model chunk c
//   B(i, c)  backward of micro-batch i through chunk c
//
// With p ranks and v chunks per rank there are S = v*p virtual stages; chunk c of rank r is
// virtual stage c*p + r (Megatron's interleaved placement). Without interleaving v = 1 and
// chunk 0 of rank r is stage r. Virtual stage 0 holds the embeddings; stage S-1 the final
// layer norm, the tied output projection and the loss.
//
// p = 2, m = 4, 1F1B:  rank 0: F0 F1 B0 F2 B1 F3 B2 B3
//                      rank 1: F0 B0 F1 B1 F2 B2 F3 B3
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kit::pp {

enum class Op { Forward, Backward };

struct Action {
  Op op = Op::Forward;
  int64_t microbatch = 0;  // i, 0..m-1
  int64_t chunk = 0;       // c, 0..v-1 (always 0 without interleaving)

  bool operator==(const Action& o) const { return op == o.op && microbatch == o.microbatch && chunk == o.chunk; }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

inline Action F(int64_t microbatch, int64_t chunk = 0) { return {Op::Forward, microbatch, chunk}; }
inline Action B(int64_t microbatch, int64_t chunk = 0) { return {Op::Backward, microbatch, chunk}; }

using RankSchedule = std::vector<Action>;        // one rank's actions, in order
using Schedules = std::vector<RankSchedule>;     // rank 0 .. p-1

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

// The shape of a pipeline run: p ranks, m micro-batches, v chunks per rank.
struct PipelineShape {
  int64_t ranks = 1;         // p
  int64_t microbatches = 1;  // m
  int64_t virtual_chunks = 1;  // v (model chunks per rank; > 1 only for Interleaved)
  int64_t stages() const { return ranks * virtual_chunks; }  // S = v * p virtual stages
};

// Virtual stage of chunk c on rank r: c * p + r. Its rank: s % p; its chunk: s / p.
inline int64_t virtual_stage(const PipelineShape& s, int64_t rank, int64_t chunk) { return chunk * s.ranks + rank; }
inline int64_t rank_of_stage(const PipelineShape& s, int64_t stage) { return stage % s.ranks; }
inline int64_t chunk_of_stage(const PipelineShape& s, int64_t stage) { return stage / s.ranks; }

std::string to_string(const Action& a);              // "F3", "B0"; "F3.1" for chunk 1 when interleaving
std::string to_string(const RankSchedule& s);        // "F0 F1 B0 F2 B1 B2"
std::string to_string(ScheduleKind k);               // "gpipe", "1f1b", "interleaved"
// "gpipe", "1f1b" (also "pipedream-flush"), "interleaved"; kit::Error listing them otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);

// {"op": "F"|"B", "microbatch": i, "chunk": c}
nlohmann::json to_json(const Action& a);
Action action_from_json(const nlohmann::json& j);    // kit::Error naming what is wrong

}  // namespace kit::pp
