// What the schedule program shows of a timeline besides the table and JSON of simulate.h:
// a timeline file read back (--timeline-json), the heading of a simulated schedule, and the
// timeline as a Chrome trace file (--trace). No tensors.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "pipeline_training/action.h"
#include "pipeline_training/simulate.h"

namespace kit::pp {

// A timeline saved as JSON (timeline_to_json's format, simulated or measured); kit::Error
// naming `flag` and `path` when it cannot be read, is not JSON or is not a timeline.
Timeline read_timeline_file(const std::string& path, const std::string& flag);

// "1f1b schedule: p = 4 ranks, m = 8 micro-batches, v = 1 chunk per rank (F = 1, B = 2, comm = 0)"
std::string simulated_heading(ScheduleKind kind, const PipelineShape& shape, const Costs& costs);

// The timeline as trace events (timeline_trace) with `info` added to otherData, written to
// `path` (flag names it in errors); says so on stderr (stdout may be JSON).
void write_timeline_trace(const Timeline& t, const std::string& path, const nlohmann::json& info,
                          const std::string& flag);

}  // namespace kit::pp
