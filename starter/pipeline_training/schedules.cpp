// Problem 3.1: the pipeline schedules (see pipeline_training/schedules.h).
#include "pipeline_training/schedules.h"

#include "kit/errors.h"

namespace kit::pp {

RankSchedule gpipe_schedule(int64_t ranks, int64_t microbatches, int64_t rank) {
  // TODO(Problem 3.1 gpipe_schedule): your code here.
  throw kit::NotImplemented("Problem 3.1 gpipe_schedule");
}

RankSchedule one_f_one_b_schedule(int64_t ranks, int64_t microbatches, int64_t rank) {
  // TODO(Problem 3.1 one_f_one_b_schedule): your code here.
  throw kit::NotImplemented("Problem 3.1 one_f_one_b_schedule");
}

RankSchedule interleaved_schedule(int64_t ranks, int64_t microbatches, int64_t chunks, int64_t rank) {
  // TODO(Problem 3.1 interleaved_schedule): your code here.
  throw kit::NotImplemented("Problem 3.1 interleaved_schedule");
}

}  // namespace kit::pp
