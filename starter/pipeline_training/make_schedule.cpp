// Validating a pipeline shape and building every rank's schedule from the student
// functions (pipeline_training/schedules.cpp).
#include <string>

#include "kit/errors.h"
#include "pipeline_training/schedules.h"

namespace kit::pp {

void check_shape(ScheduleKind kind, const PipelineShape& shape) {
  const std::string p = std::to_string(shape.ranks), m = std::to_string(shape.microbatches),
                    v = std::to_string(shape.chunks), name = to_string(kind);
  if (shape.ranks < 1) throw Error("pipeline ranks p = " + p + ": need at least 1 rank");
  if (shape.microbatches < 1) throw Error("micro-batches m = " + m + ": need at least 1 micro-batch");
  if (shape.chunks < 1) throw Error("chunks per rank v = " + v + ": need at least 1 chunk");
  if (kind != ScheduleKind::Interleaved) {
    if (shape.chunks != 1)
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
  if (shape.ranks > 1 && shape.chunks < 2)
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
        all.push_back(interleaved_schedule(shape.ranks, shape.microbatches, shape.chunks, r));
        break;
    }
  }
  return all;
}

}  // namespace kit::pp
