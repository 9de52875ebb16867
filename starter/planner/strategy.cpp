// Problem 8 (given): see planner/strategy.h.
#include "planner/strategy.h"

#include "kit/errors.h"

namespace kit::planner {

std::string schedule_name(Schedule s) {
  switch (s) {
    case Schedule::gpipe: return "gpipe";
    case Schedule::one_f_one_b: return "1f1b";
    case Schedule::interleaved: return "interleaved";
  }
  return "?";
}

Schedule schedule_from_name(const std::string& name) {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved})
    if (schedule_name(s) == name) return s;
  throw Error("unknown schedule \"" + name + "\": use gpipe, 1f1b or interleaved");
}

std::string Strategy::label() const {
  std::string l = "d=" + std::to_string(dp) + " p=" + std::to_string(pp) + " t=" + std::to_string(tp) +
                  " mb=" + std::to_string(micro_batch) + " " + schedule_name(schedule);
  if (schedule == Schedule::interleaved) l += " v=" + std::to_string(virtual_chunks);
  if (zero_stage > 0) l += " zero" + std::to_string(zero_stage);
  if (recompute) l += " rc";
  return l;
}

int64_t micro_batches(const Strategy& s, int64_t global_batch) {
  const int64_t per_replica = s.dp * s.micro_batch;
  if (per_replica < 1 || global_batch % per_replica != 0)
    throw Error("the global batch " + std::to_string(global_batch) + " is not a multiple of dp x micro-batch = " +
                std::to_string(s.dp) + " x " + std::to_string(s.micro_batch));
  return global_batch / per_replica;
}

std::vector<int64_t> tensor_group(const Strategy& s, int64_t stage, int64_t replica) {
  std::vector<int64_t> g;
  for (int64_t k = 0; k < s.tp; ++k) g.push_back(stage * s.dp * s.tp + replica * s.tp + k);
  return g;
}

std::vector<int64_t> data_group(const Strategy& s, int64_t stage, int64_t tp_index) {
  std::vector<int64_t> g;
  for (int64_t r = 0; r < s.dp; ++r) g.push_back(stage * s.dp * s.tp + r * s.tp + tp_index);
  return g;
}

std::vector<int64_t> stage_ranks(const Strategy& s, int64_t stage) {
  std::vector<int64_t> g;
  for (int64_t k = 0; k < s.dp * s.tp; ++k) g.push_back(stage * s.dp * s.tp + k);
  return g;
}

std::vector<int64_t> stage_bounds(const std::vector<int64_t>& layers_per_stage) {
  std::vector<int64_t> b{0};
  for (const int64_t n : layers_per_stage) b.push_back(b.back() + n);
  return b;
}

}  // namespace kit::planner
