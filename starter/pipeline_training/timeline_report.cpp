#include "pipeline_training/timeline_report.h"

#include <cstdio>
#include <fstream>
#include <iostream>

#include "kit/errors.h"
#include "kit/trace.h"
#include "pipeline_training/trace_events.h"

namespace kit::pp {

Timeline read_timeline_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw kit::Error("cannot read " + flag + " " + path + ": check the path");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw kit::Error(flag + " " + path + " is not valid JSON (" + e.what() + ")");
  }
  try {
    return timeline_from_json(j);
  } catch (const kit::Error& e) {
    throw kit::Error(flag + " " + path + ": " + e.what());
  }
}

std::string simulated_heading(ScheduleKind kind, const PipelineShape& shape, const Costs& costs) {
  char c[160];
  if (costs.forward_per_stage.empty() && costs.backward_per_stage.empty())
    std::snprintf(c, sizeof c, "F = %g, B = %g, comm = %g", costs.forward, costs.backward, costs.comm);
  else
    std::snprintf(c, sizeof c, "per-stage F and B, comm = %g", costs.comm);
  return to_string(kind) + " schedule: p = " + std::to_string(shape.ranks) + " ranks, m = " +
         std::to_string(shape.microbatches) + " micro-batches, v = " + std::to_string(shape.virtual_chunks) + " chunk" +
         (shape.virtual_chunks == 1 ? "" : "s") + " per rank (" + c + ")";
}

void write_timeline_trace(const Timeline& t, const std::string& path, const nlohmann::json& info,
                          const std::string& flag) {
  trace::Trace trace = timeline_trace(t);
  trace.other.update(info);
  trace::write_chrome_trace(path, trace, flag);
  std::cerr << "wrote " << path << " (open it in https://ui.perfetto.dev)\n";
}

}  // namespace kit::pp
