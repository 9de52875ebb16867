// Validating a pipeline shape and building every rank's schedule from the student
// functions (pipeline_training/schedules.cpp).
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "kit/errors.h"
#include "pipeline_training/schedules.h"

namespace kit::pp {

void check_shape(ScheduleKind kind, const PipelineShape& shape) {
  const std::string p = std::to_string(shape.ranks), m = std::to_string(shape.microbatches),
                    v = std::to_string(shape.virtual_chunks), name = to_string(kind);
  if (shape.ranks < 1) throw Error("pipeline ranks p = " + p + ": need at least 1 rank");
  if (shape.microbatches < 1) throw Error("micro-batches m = " + m + ": need at least 1 micro-batch");
  if (shape.virtual_chunks < 1) throw Error("chunks per rank v = " + v + ": need at least 1 chunk");
  if (kind != ScheduleKind::Interleaved) {
    if (shape.virtual_chunks != 1)
      throw Error("chunks per rank v = " + v + " with the " + name +
                  " schedule: only the interleaved schedule places several chunks on a rank; use v = 1 "
                  "or --kind interleaved");
    return;
  }
  // Megatron's interleaved schedule sends micro-batches through each chunk in groups of p.
  if (shape.microbatches % shape.ranks != 0) {
    const int64_t below = shape.microbatches / shape.ranks * shape.ranks;
    const int64_t above = below + shape.ranks;
    throw Error("interleaved schedule with p = " + p + " ranks needs m to be a multiple of p, got m = " + m +
                ": use m = " + (below > 0 ? std::to_string(below) + " or " : std::string()) +
                std::to_string(above) + ", or the 1f1b schedule");
  }
  if (shape.ranks > 1 && shape.virtual_chunks < 2)
    throw Error("interleaved schedule with v = " + v +
                " chunk per rank is plain 1F1B: use v >= 2 chunks per rank, or the 1f1b schedule");
}

Schedules make_schedule(ScheduleKind kind, const PipelineShape& shape) {
  check_shape(kind, shape);
  Schedules all;
  for (int64_t r = 0; r < shape.ranks; ++r) {
    switch (kind) {
      case ScheduleKind::GPipe: all.push_back(gpipe_schedule(shape.ranks, shape.microbatches, r)); break;
      case ScheduleKind::OneFOneB: all.push_back(one_f_one_b_schedule(shape.ranks, shape.microbatches, r)); break;
      case ScheduleKind::Interleaved:
        all.push_back(interleaved_schedule(shape.ranks, shape.microbatches, shape.virtual_chunks, r));
        break;
    }
  }
  return all;
}

RankSchedule one_stage_schedule(ScheduleKind kind, int64_t microbatches) {
  check_shape(kind, {1, microbatches, 1});
  RankSchedule s;
  if (kind == ScheduleKind::GPipe) {
    for (int64_t i = 0; i < microbatches; ++i) s.push_back(F(i));
    for (int64_t i = 0; i < microbatches; ++i) s.push_back(B(i));
    return s;
  }
  for (int64_t i = 0; i < microbatches; ++i) {
    s.push_back(F(i));
    s.push_back(B(i));
  }
  return s;
}

Schedules read_schedules_file(const std::string& path, int64_t ranks, const std::string& flag) {
  std::ifstream f(path);
  if (!f) throw Error(flag + " " + path + " cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw Error(flag + " " + path + " is not JSON: " + e.what());
  }
  if (j.is_object() && j.contains("schedules")) j = j["schedules"];
  if (!j.is_array() || static_cast<int64_t>(j.size()) != ranks)
    throw Error(flag + " " + path + " must hold one list of actions per rank (" + std::to_string(ranks) +
                " lists, as {\"schedules\": [[{\"op\": \"F\", \"microbatch\": 0, \"chunk\": 0}, ...], ...]})");
  Schedules s;
  for (const auto& rank : j) {
    if (!rank.is_array()) throw Error(flag + " " + path + ": each rank's schedule must be a list");
    RankSchedule r;
    for (const auto& a : rank) r.push_back(action_from_json(a));
    s.push_back(std::move(r));
  }
  return s;
}

}  // namespace kit::pp
