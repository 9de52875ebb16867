// Problem 8.1: the terms of a strategy's cost (see planner/cost.h).
#include <algorithm>
#include <numeric>
#include <vector>

#include "kit/errors.h"
#include "planner/cost.h"

namespace kit::planner {

double ring_all_reduce_seconds(double bytes, int64_t n, const Link& link) {
  if (n < 1) throw Error("ring_all_reduce_seconds: a ring needs at least one rank");
  // TODO(Problem 8.1 ring_all_reduce_seconds): your code here.
  throw kit::NotImplemented("Problem 8.1 ring_all_reduce_seconds");
}

double p2p_seconds(double bytes, const Link& link) {
  // TODO(Problem 8.1 p2p_seconds): your code here.
  throw kit::NotImplemented("Problem 8.1 p2p_seconds");
}

double compute_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, int64_t tp,
                       const DeviceType& device, bool recompute) {
  // TODO(Problem 8.1 compute_seconds): your code here.
  throw kit::NotImplemented("Problem 8.1 compute_seconds");
}

double tensor_parallel_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, int64_t tp,
                               const Link& link) {
  // TODO(Problem 8.1 tensor_parallel_seconds): your code here.
  throw kit::NotImplemented("Problem 8.1 tensor_parallel_seconds");
}

double bubble_fraction(int64_t p, int64_t m, Schedule schedule, int64_t v) {
  if (p < 1 || m < 1 || v < 1) throw Error("bubble_fraction needs p, m and v of 1 or more");
  // TODO(Problem 8.1 bubble_fraction): your code here.
  throw kit::NotImplemented("Problem 8.1 bubble_fraction");
}

double pipeline_seconds(const std::vector<double>& stage_seconds, int64_t m, Schedule schedule, int64_t v) {
  if (stage_seconds.empty() || m < 1 || v < 1) throw Error("pipeline_seconds needs a stage, and m and v of 1 or more");
  // TODO(Problem 8.1 pipeline_seconds): your code here.
  throw kit::NotImplemented("Problem 8.1 pipeline_seconds");
}

double data_parallel_seconds(double gradient_bytes, const std::vector<int64_t>& ranks, const Cluster& cluster) {
  // TODO(Problem 8.1 data_parallel_seconds): your code here.
  throw kit::NotImplemented("Problem 8.1 data_parallel_seconds");
}

int64_t in_flight_micro_batches(int64_t stage, int64_t p, int64_t m, Schedule schedule, int64_t v) {
  if (stage < 0 || stage >= p || m < 1 || v < 1)
    throw Error("in_flight_micro_batches: stage " + std::to_string(stage) + " is not one of 0.." +
                std::to_string(p - 1) + ", or m or v is below 1");
  // TODO(Problem 8.1 in_flight_micro_batches): your code here.
  throw kit::NotImplemented("Problem 8.1 in_flight_micro_batches");
}

Memory memory_per_rank(const ModelSpec& model, int64_t first, int64_t last, double tokens_per_micro_batch,
                       const Strategy& s, int64_t stage, int64_t m) {
  // TODO(Problem 8.1 memory_per_rank): your code here.
  throw kit::NotImplemented("Problem 8.1 memory_per_rank");
}

}  // namespace kit::planner
