// Problem 8.1: the terms of a strategy's cost (see planner/cost.h).
#include <algorithm>
#include <numeric>
#include <vector>

#include "kit/errors.h"
#include "planner/cost.h"

namespace kit::planner {

double ring_all_reduce_seconds(double bytes, int64_t n, const Link& link) {
  if (n < 1) throw Error("ring_all_reduce_seconds: a ring needs at least one rank");
  // BEGIN SOLUTION 8.1 ring_all_reduce_seconds
  if (n == 1) return 0;
  const double steps = 2.0 * static_cast<double>(n - 1);
  return steps * link.latency + steps / static_cast<double>(n) * bytes / link.bandwidth;
  // END SOLUTION
}

double p2p_seconds(double bytes, const Link& link) {
  // BEGIN SOLUTION 8.1 p2p_seconds
  return link.latency + bytes / link.bandwidth;
  // END SOLUTION
}

double compute_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, int64_t tp,
                       const DeviceType& device, bool recompute) {
  // BEGIN SOLUTION 8.1 compute_seconds
  double seconds = 0;
  for (int64_t i = first; i < last; ++i) {
    const LayerSeconds s = layer_seconds(model.layers.at(static_cast<size_t>(i)), tokens, tp, device);
    seconds += s.forward + s.backward + (recompute ? s.forward : 0.0);  // the forward again, in the backward
  }
  return seconds;
  // END SOLUTION
}

double tensor_parallel_seconds(const ModelSpec& model, int64_t first, int64_t last, double tokens, int64_t tp,
                               const Link& link) {
  // BEGIN SOLUTION 8.1 tensor_parallel_seconds
  double seconds = 0;
  for (int64_t i = first; i < last; ++i) {
    const Layer& l = model.layers.at(static_cast<size_t>(i));
    seconds += static_cast<double>(l.tp_all_reduces) *
               ring_all_reduce_seconds(l.output_bytes_per_token * tokens, tp, link);
  }
  return seconds;
  // END SOLUTION
}

double bubble_fraction(int64_t p, int64_t m, Schedule schedule, int64_t v) {
  if (p < 1 || m < 1 || v < 1) throw Error("bubble_fraction needs p, m and v of 1 or more");
  // BEGIN SOLUTION 8.1 bubble_fraction
  const double idle = static_cast<double>(p - 1);
  const double work = schedule == Schedule::interleaved ? static_cast<double>(v * m) : static_cast<double>(m);
  return idle / (work + idle);
  // END SOLUTION
}

double pipeline_seconds(const std::vector<double>& stage_seconds, int64_t m, Schedule schedule, int64_t v) {
  if (stage_seconds.empty() || m < 1 || v < 1) throw Error("pipeline_seconds needs a stage, and m and v of 1 or more");
  // BEGIN SOLUTION 8.1 pipeline_seconds
  const double slowest = *std::max_element(stage_seconds.begin(), stage_seconds.end());
  const double sum = std::accumulate(stage_seconds.begin(), stage_seconds.end(), 0.0);
  if (schedule == Schedule::interleaved)
    return static_cast<double>(m) * slowest + (sum - slowest) / static_cast<double>(v);
  return static_cast<double>(m - 1) * slowest + sum;
  // END SOLUTION
}

double data_parallel_seconds(double gradient_bytes, const std::vector<int64_t>& ranks, const Cluster& cluster) {
  // BEGIN SOLUTION 8.1 data_parallel_seconds
  return ring_all_reduce_seconds(gradient_bytes, static_cast<int64_t>(ranks.size()), cluster.link_of(ranks));
  // END SOLUTION
}

int64_t in_flight_micro_batches(int64_t stage, int64_t p, int64_t m, Schedule schedule, int64_t v) {
  if (stage < 0 || stage >= p || m < 1 || v < 1)
    throw Error("in_flight_micro_batches: stage " + std::to_string(stage) + " is not one of 0.." +
                std::to_string(p - 1) + ", or m or v is below 1");
  // BEGIN SOLUTION 8.1 in_flight_micro_batches
  switch (schedule) {
    case Schedule::gpipe: return m;
    case Schedule::one_f_one_b: return std::min(p - stage, m);
    case Schedule::interleaved: {
      const int64_t chunks = (p - stage - 1) * 2 + (v - 1) * p + 1;  // Megatron's warm-up, plus one
      return std::min((chunks + v - 1) / v, m);
    }
  }
  return m;
  // END SOLUTION
}

Memory memory_per_rank(const ModelSpec& model, int64_t first, int64_t last, double tokens_per_micro_batch,
                       const Strategy& s, int64_t stage, int64_t m) {
  // BEGIN SOLUTION 8.1 memory_per_rank
  const double t = static_cast<double>(s.tp), d = static_cast<double>(s.dp);
  Memory mem;
  mem.parameters = model.param_bytes(first, last) / t;
  mem.gradients = s.zero_stage >= 2 ? mem.parameters / d : mem.parameters;
  mem.optimizer = 2 * mem.parameters / (s.zero_stage >= 1 ? d : 1.0);
  double per_token = 0, largest = 0;
  for (int64_t i = first; i < last; ++i) {
    const Layer& l = model.layers.at(static_cast<size_t>(i));
    if (!s.recompute) {
      per_token += l.activation_bytes_per_token;
    } else {
      if (i > 0) per_token += model.layers.at(static_cast<size_t>(i - 1)).output_bytes_per_token;  // its input
      largest = std::max(largest, l.activation_bytes_per_token);
    }
  }
  mem.activations = per_token * tokens_per_micro_batch / t *
                    static_cast<double>(in_flight_micro_batches(stage, s.pp, m, s.schedule, s.virtual_chunks));
  mem.activations += largest * tokens_per_micro_batch / t;  // the layer being recomputed (0 without)
  return mem;
  // END SOLUTION
}

}  // namespace kit::planner
